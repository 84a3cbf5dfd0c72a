"""Slow tier: the role's flag validator against the REAL SGLang 0.5.23 parser.

Run with scripts/slow-tests.sh (never collected by `make test`: pytest.ini's testpaths is tests/unit and the tiers
name their directories). It creates .build/slow-sglang-venv, installs sglang==0.5.23 with its full dependency set
(pip takes torch 2.14.1, a CUDA build, from this machine's disk when present, else from PyPI; about 11 GB), and runs
roles/sglang/files/sglang-validate-args.py with that venv's python, exactly as the role does.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = pathlib.Path(os.environ.get("SLOW_SGLANG_VENV", ROOT / ".build" / "slow-sglang-venv"))
VALIDATOR = ROOT / "roles" / "sglang" / "files" / "sglang-validate-args.py"
SGLANG_SPEC = "sglang==0.5.23"


def _service_default_argv():
    """The flags sglang_service renders with its defaults (its defaults file and flag mapping, rendered like cli_flags)."""
    defaults = yaml.safe_load((ROOT / "roles" / "sglang_service" / "defaults" / "main.yml").read_text())
    return [
        "--model-path", defaults["sglang_service_model_path"],
        "--served-model-name", defaults["sglang_service_served_model_name"],
        "--host", defaults["sglang_service_host"],
        "--port", str(defaults["sglang_service_port"]),
        "--tp-size", str(defaults["sglang_service_tp_size"]),
        "--speculative-algorithm", defaults["sglang_service_speculative_algorithm"],
        "--speculative-num-steps", str(defaults["sglang_service_speculative_num_steps"]),
        "--speculative-eagle-topk", str(defaults["sglang_service_speculative_eagle_topk"]),
        "--speculative-num-draft-tokens", str(defaults["sglang_service_speculative_num_draft_tokens"]),
        "--mamba-full-memory-ratio", str(defaults["sglang_service_mamba_full_memory_ratio"]),
        "--max-running-requests", str(defaults["sglang_service_max_running_requests"]),
        "--reasoning-parser", defaults["sglang_service_reasoning_parser"],
        "--enable-metrics",
    ]


@pytest.fixture(scope="module")
def venv_python():
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", SGLANG_SPEC],
        check=True, timeout=3600,
    )
    return python


def _validate(python, argv):
    # The role runs the validator the same way: the venv's python, the script, then the argv.
    return subprocess.run([str(python), str(VALIDATOR), "--", *argv], capture_output=True, text=True, timeout=600,
                          check=False, cwd="/")


def test_real_sglang_version_is_the_pin(venv_python):
    out = subprocess.run([str(venv_python), "-c", "from importlib.metadata import version; print(version('sglang'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "0.5.23"


def test_real_parser_accepts_the_service_default_flags(venv_python):
    run = _validate(venv_python, _service_default_argv())
    assert run.returncode == 0, run.stderr[-3000:]
    parsed = json.loads(run.stdout.strip().splitlines()[-1])
    assert parsed["sglang_version"] == "0.5.23"
    assert parsed["parsed"]["tp_size"] == 2
    assert parsed["parsed"]["speculative_algorithm"] == "NEXTN"
    assert parsed["parsed"]["enable_metrics"] is True


def test_real_parser_rejects_cuda_graph_max_bs(venv_python):
    run = _validate(venv_python, _service_default_argv() + ["--cuda-graph-max-bs", "16"])
    assert run.returncode == 2
    assert ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in run.stderr
