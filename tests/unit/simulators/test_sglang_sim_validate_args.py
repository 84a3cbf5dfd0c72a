# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/sglang's flag validator run against the stand-in `sglang` (the simulator's parser and resolution).

The slow tier runs the same validator against the real SGLang 0.5.23 (tests/slow/test_real_sglang_parser.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SIM_SOURCE

ROOT = os.path.abspath(os.path.join(SIM_SOURCE, "..", ".."))
VALIDATOR = os.path.join(ROOT, "roles", "sglang", "files", "sglang-validate-args.py")
STANDIN = os.path.join(ROOT, "simulators", "standins", "sglang_standin")
SERVICE = ["--model-path", "/models/Qwen3.6-27B", "--served-model-name", "qwen3.6-27b", "--tp-size", "2",
           "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
           "--speculative-num-draft-tokens", "4", "--max-running-requests", "16", "--enable-metrics"]


def validate(argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STANDIN, SIM_SOURCE]))
    # As the role runs it: the venv's python, the script, `--`, the argv.
    return subprocess.run([sys.executable, VALIDATOR, "--"] + list(argv), capture_output=True, text=True, timeout=120,
                          check=False, env=env, cwd="/")


def test_service_flags_pass_parse_and_resolution_with_secrets_redacted():
    run = validate(SERVICE + ["--api-key", "s3cret"])
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["sglang_version"] == "0.5.23+standin"
    assert result["resolution"] == "full" and result["warnings"] == []
    assert result["parsed"]["tp_size"] == 2 and result["parsed"]["speculative_algorithm"] == "NEXTN"
    assert result["resolved"]["speculative_algorithm"] == "EAGLE"
    assert result["parsed"]["api_key"] == "********" and "s3cret" not in run.stdout


def test_removed_flag_is_rejected_by_the_parser_exit_2():
    run = validate(SERVICE + ["--cuda-graph-max-bs", "16"])
    assert run.returncode == 2
    assert run.stderr.rstrip().splitlines()[-1] == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill")


@pytest.mark.parametrize("extra, message", [
    (["--speculative-algorithm", "mtp"], "ValueError: Unknown speculative algorithm name: MTP (raised in "),
    (["--speculative-eagle-topk", "2", "--speculative-use-rejection-sampling"],
     "ValueError: --speculative-use-rejection-sampling requires --speculative-eagle-topk=1. (raised in "),
    (["--mamba-radix-cache-strategy", "no_buffer"],
     "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True. (raised in "),
])
def test_combinations_the_resolution_refuses_exit_3_with_sglangs_message(extra, message):
    run = validate(SERVICE + extra)
    assert run.returncode == 3, run.stdout + run.stderr
    last = run.stderr.rstrip().splitlines()[-1]
    assert last.startswith("sglang-validate-args: SGLang's start-time resolution refuses these flags: " + message)


def test_steps_without_topk_names_sglangs_typeerror_and_where():
    argv = [arg for arg in SERVICE if arg not in ("--speculative-eagle-topk", "1")]
    run = validate(argv)
    assert run.returncode == 3
    assert ("TypeError: '>' not supported between instances of 'NoneType' and 'int' (raised in "
            "sglang_sim/resolution.py:_handle_eagle_family)") in run.stderr


def test_a_setting_the_resolution_cannot_check_here_falls_back_to_the_parse_with_a_warning():
    run = validate(["--model-path", "/models/Qwen3.6-27B", "--speculative-algorithm", "DFLASH"])
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["resolution"] == "parse-only"
    assert result["warnings"] == [
        "SGLang's resolution could not run here (sglang_sim.resolution.NotSimulatedError: sglang-sim simulates the "
        "EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE) only, not --speculative-algorithm DFLASH (raised in "
        "sglang_sim/resolution.py:handle_speculative_decoding)): SGLang's start-time resolution and checks "
        "(ServerArgs.resolve_once, check_server_args: speculative decoding, mamba cache strategy, memory, parallelism) "
        "were not run."]


def test_config_file_is_merged_and_its_errors_are_sglangs(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("api-key: from-file\ntp-size: 4\n")
    run = validate(SERVICE + ["--config", str(config)])
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    # The command line wins over the file (tp 2), the file's API key is used but never printed.
    assert result["parsed"]["tp_size"] == 2 and result["parsed"]["api_key"] == "********"
    assert "from-file" not in run.stdout
    wrong = tmp_path / "serve.json"
    wrong.write_text("{}")
    run = validate(SERVICE + ["--config", str(wrong)])
    assert run.returncode == 2
    assert run.stderr.rstrip().splitlines()[-1] == (
        "sglang-validate-args: SGLang refuses the --config file: ValueError: Config file must be YAML format, got: .json "
        "(raised in sglang_sim/config_file.py:_validate_yaml_file)")
