"""Slow tier: the simulator's parser and the role's flag validator against the REAL SGLang 0.5.23.

Run with scripts/slow-tests.sh (never collected by `make test`: pytest.ini's testpaths is tests/unit and the tiers
name their directories). It creates .build/slow-sglang-venv, installs sglang==0.5.23 with its full dependency set
(pip takes torch 2.14.1, a CUDA build, from this machine's disk when present, else from PyPI; about 11 GB), and:
- dumps the installed parser with simulators/sglang_sim/tools/dump_sglang_args.py and requires the committed spec
  (simulators/sglang_sim/sglang_sim/sglang_0_5_23_args.json) to be that dump;
- runs the probe table (tests/unit/simulators/sglang_parser_probes.py) through SGLang's prepare_server_args and the
  simulator's parser and requires the same outcome, values and messages, and the outcomes the table recorded;
- runs roles/sglang/files/sglang-validate-args.py with that venv's python, exactly as the role does, on flags SGLang
  accepts and on combinations its start-time resolution refuses, and compares the refusals with the simulator's.
Without a GPU the validator resolves as on a CUDA device; the model is a config.json written by transformers'
Qwen3_5Config (the hybrid architecture the service runs, default sizes: not the real checkpoint's config).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
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
DUMP_TOOL = ROOT / "simulators" / "sglang_sim" / "tools" / "dump_sglang_args.py"
SPEC = ROOT / "simulators" / "sglang_sim" / "sglang_sim" / "sglang_0_5_23_args.json"
RUNNER = pathlib.Path(__file__).resolve().parent / "sglang_probe_runner.py"
PROBE_TABLE = ROOT / "tests" / "unit" / "simulators" / "sglang_parser_probes.py"
STANDIN = ROOT / "simulators" / "standins" / "sglang_standin"
SIM_SOURCE = ROOT / "simulators" / "sglang_sim"
STUB_MODEL = ROOT / "simulators" / "standins" / "models" / "Qwen3.6-27B"
SGLANG_SPEC = "sglang==0.5.23"
REFUSED = "sglang-validate-args: SGLang's start-time resolution refuses these flags: "
# Combinations the parser accepts and SGLang's resolution refuses at start: (id, extra argv, SGLang's exception).
RESOLUTION_REFUSALS = [
    ("unknown-algorithm", ["--speculative-algorithm", "mtp"], "ValueError: Unknown speculative algorithm name: MTP"),
    ("steps-without-topk", ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"],
     "TypeError: '>' not supported between instances of 'NoneType' and 'int'"),
    ("topk-without-steps", ["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1"], "AssertionError"),
    ("no-buffer-with-overlap", ["--mamba-radix-cache-strategy", "no_buffer"],
     "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."),
    ("rejection-sampling-topk", ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                                 "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "4",
                                 "--speculative-use-rejection-sampling"],
     "ValueError: --speculative-use-rejection-sampling requires --speculative-eagle-topk=1."),
]


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
        "--tool-call-parser", defaults["sglang_service_tool_call_parser"],
        "--enable-metrics",
    ]


def _clean_env(**extra):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SGLANG_")}
    env.update(extra)
    return env


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


@pytest.fixture(scope="module")
def model_dir(venv_python, tmp_path_factory):
    """A local model folder whose config.json is transformers' default Qwen3_5Config (hybrid Gated DeltaNet)."""
    folder = tmp_path_factory.mktemp("qwen3_5-config")
    script = ("import sys; from transformers import CONFIG_MAPPING; config = CONFIG_MAPPING['qwen3_5'](); "
              "config.architectures = ['Qwen3_5ForConditionalGeneration']; config.save_pretrained(sys.argv[1])")
    subprocess.run([str(venv_python), "-c", script, str(folder)], check=True, timeout=600, env=_clean_env())
    return folder


def _load_probe_table():
    spec = importlib.util.spec_from_file_location("sglang_parser_probes", PROBE_TABLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _validate(python, argv, **env):
    # The role runs the validator the same way: the venv's python, the script, then the argv.
    return subprocess.run([str(python), "-W", "ignore", str(VALIDATOR), "--", *argv], capture_output=True, text=True,
                          timeout=900, check=False, cwd="/", env=_clean_env(**env))


def _validate_many(python, runs):
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(_validate, python, argv) for name, argv in runs.items()}
        return {name: future.result() for name, future in futures.items()}


def _with_model(argv, model_dir):
    argv = list(argv)
    argv[argv.index("--model-path") + 1] = str(model_dir)
    return argv


def test_real_sglang_version_is_the_pin(venv_python):
    out = subprocess.run([str(venv_python), "-c", "from importlib.metadata import version; print(version('sglang'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "0.5.23"


def test_committed_spec_is_the_installed_parser(venv_python):
    dump = subprocess.run([str(venv_python), "-W", "ignore", str(DUMP_TOOL)], capture_output=True, text=True,
                          check=True, timeout=900, env=_clean_env()).stdout
    real, committed = json.loads(dump), json.loads(SPEC.read_text())
    real_actions = {tuple(action["option_strings"]): action for action in real["actions"]}
    committed_actions = {tuple(action["option_strings"]): action for action in committed["actions"]}
    changed = sorted(" ".join(key) for key in set(real_actions) | set(committed_actions)
                     if real_actions.get(key) != committed_actions.get(key))
    assert not changed, f"regenerate {SPEC.name} with {DUMP_TOOL.name}; options that differ: {changed}"
    assert real == committed


def test_probe_table_real_and_simulator_agree(venv_python):
    table = _load_probe_table()
    payload = json.dumps([{"id": probe.id, "argv": probe.argv, "files": probe.files} for probe in table.PROBES])
    outcomes = {}
    for which in ("real", "sim"):
        run = subprocess.run([str(venv_python), "-W", "ignore", str(RUNNER), which], input=payload, capture_output=True,
                             text=True, check=True, timeout=900, env=_clean_env())
        outcomes[which] = {outcome["id"]: outcome for outcome in json.loads(run.stdout)}
    spec = json.loads(SPEC.read_text())
    dests = {action["dest"] for action in spec["actions"]} - set(spec["dests_not_in_server_args"])
    defaults = {action["dest"]: action["default"] for action in spec["actions"] if action["dest"] in dests}
    disagreements = []
    for probe in table.PROBES:
        real, sim = outcomes["real"][probe.id], outcomes["sim"][probe.id]
        if real["outcome"] != probe.outcome:
            disagreements.append(f"{probe.id}: SGLang now gives {real['outcome']!r}, the table says {probe.outcome!r}")
        if (real["outcome"], real["messages"]) != (sim["outcome"], sim["messages"]):
            disagreements.append(f"{probe.id}: real {real['outcome']!r} {real['messages']}, "
                                 f"simulator {sim['outcome']!r} {sim['messages']}")
        if real["values"] is not None:
            real_values = {dest: real["values"][dest] for dest in dests}
            sim_values = {dest: (sim["values"] or {}).get(dest) for dest in dests}
            if real_values != sim_values:
                differing = {dest: (real_values[dest], sim_values[dest]) for dest in dests if real_values[dest] != sim_values[dest]}
                disagreements.append(f"{probe.id}: values differ: {differing}")
            changed = {dest: value for dest, value in real_values.items() if value != defaults[dest]}
            if changed != probe.values:
                disagreements.append(f"{probe.id}: SGLang now sets {changed}, the table says {probe.values}")
    assert not disagreements, "\n".join(disagreements)


def test_real_sglang_accepts_and_resolves_the_service_default_flags(venv_python, model_dir):
    run = _validate(venv_python, _with_model(_service_default_argv(), model_dir) + ["--api-key", "s3cret"])
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["sglang_version"] == "0.5.23"
    assert result["resolution"] == "cuda-assumed"
    assert result["warnings"][0].startswith("no GPU is visible here: SGLang's resolution ran as on a CUDA device")
    assert result["parsed"]["tp_size"] == 2
    assert result["parsed"]["speculative_algorithm"] == "NEXTN"
    assert result["resolved"]["speculative_algorithm"] == "EAGLE"
    assert result["parsed"]["enable_metrics"] is True
    assert result["parsed"]["api_key"] == "********" and "s3cret" not in run.stdout


def test_real_parser_rejects_cuda_graph_max_bs(venv_python):
    run = _validate(venv_python, _service_default_argv() + ["--cuda-graph-max-bs", "16"])
    assert run.returncode == 2
    assert ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in run.stderr


def test_without_a_readable_model_config_only_the_parse_is_checked(venv_python):
    run = _validate(venv_python, ["--model-path", str(STUB_MODEL), "--speculative-algorithm", "NEXTN"])
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["resolution"] == "parse-only"
    assert result["warnings"][-1].startswith("SGLang's resolution could not run here (ValueError: Unrecognized model in ")
    assert result["warnings"][-1].endswith(
        "SGLang's start-time resolution and checks (ServerArgs.resolve_once, check_server_args: speculative decoding, "
        "mamba cache strategy, memory, parallelism) were not run.")


def test_real_resolution_refuses_what_the_server_would_refuse_at_start_as_the_simulator_does(venv_python, model_dir):
    base = ["--model-path", str(model_dir), "--tp-size", "2"]
    real = _validate_many(venv_python, {name: base + extra for name, extra, _exception in RESOLUTION_REFUSALS})
    for name, extra, exception in RESOLUTION_REFUSALS:
        run = real[name]
        assert run.returncode == 3, (name, run.stdout[-2000:], run.stderr[-2000:])
        last = run.stderr.rstrip().splitlines()[-1]
        assert last.startswith(REFUSED + exception + " (raised in sglang/srt/"), (name, last)
        # The stand-in (the simulator's resolution) refuses it with the same exception.
        sim = subprocess.run([sys.executable, str(VALIDATOR), "--", *base, *extra], capture_output=True, text=True,
                             timeout=120, check=False, cwd="/",
                             env=_clean_env(PYTHONPATH=os.pathsep.join([str(STANDIN), str(SIM_SOURCE)])))
        assert sim.returncode == 3, (name, sim.stderr[-2000:])
        assert sim.stderr.rstrip().splitlines()[-1].startswith(REFUSED + exception + " (raised in "), name
