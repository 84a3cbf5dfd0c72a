# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's command line: SGLang 0.5.23's flags and argparse behaviour, and the separate --sim-* knobs."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import run_cli
from sglang_sim import cli, knobs

CARD_COMMAND = ["--model-path", "Qwen/Qwen3.6-27B", "--port", "8000", "--tp-size", "8", "--mem-fraction-static", "0.8",
                "--context-length", "262144", "--reasoning-parser", "qwen3", "--speculative-algo", "NEXTN",
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def test_model_card_command_parses_and_resolves_nextn_to_eagle():
    args = cli.resolve_server_args(cli.parse_server_args(CARD_COMMAND))
    assert args["speculative_algorithm"] == "EAGLE"
    assert args["tp_size"] == 8
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert args["max_running_requests"] == 48
    assert args["served_model_name"] == "Qwen/Qwen3.6-27B"
    assert args["mem_fraction_static"] == 0.8


def test_abbreviations_parse_like_sglang():
    namespace = cli.parse_server_args(["--model-path", "m", "--tp", "2", "--speculative-algo", "EAGLE3", "--mamba-full", "0.5"])
    assert namespace.tp_size == 2
    assert namespace.speculative_algorithm == "EAGLE3"
    assert namespace.mamba_full_memory_ratio == 0.5


def test_topk_one_forces_draft_tokens_to_steps_plus_one():
    args = cli.resolve_server_args(cli.parse_server_args(
        ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--speculative-num-draft-tokens", "7"]))
    assert args["speculative_num_draft_tokens"] == 3


def test_rendered_flags_are_all_accepted():
    namespace = cli.parse_server_args([
        "--model-path", "/srv/models/qwen", "--served-model-name", "qwen3.6-27b", "--host", "0.0.0.0", "--port", "30000",
        "--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--mamba-full-memory-ratio", "0.5", "--max-running-requests", "16",
        "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder", "--enable-metrics", "--api-key", "k",
        "--mem-fraction-static", "0.85", "--context-length", "131072", "--decode-log-interval", "40", "--cuda-graph-max-bs-decode", "16",
        "--max-mamba-cache-size", "64", "--mamba-ssm-dtype", "float32", "--sampling-defaults", "model", "--watchdog-timeout", "600",
        "--trust-remote-code", "--log-level", "info"])
    assert namespace.cuda_graph_max_bs_decode == 16
    assert namespace.enable_metrics and namespace.trust_remote_code


def test_removed_cuda_graph_max_bs_is_ambiguous_exit_2():
    result = run_cli(["--model-path", "m", "--cuda-graph-max-bs", "16"])
    assert result.returncode == 2
    assert result.stderr.rstrip().endswith(
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    assert result.stderr.startswith("usage: sglang serve ")


def test_unknown_flag_is_unrecognized_exit_2():
    result = run_cli(["--model-path", "m", "--enable-mtp", "--tp-size", "2"])
    assert result.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --enable-mtp" in result.stderr


def test_missing_model_path_exit_2():
    result = run_cli(["--port", "1"])
    assert result.returncode == 2
    assert "the following arguments are required: --model-path" in result.stderr


def test_bad_choice_exit_2():
    result = run_cli(["--model-path", "m", "--speculative-algorithm", "MTP"])
    assert result.returncode == 2
    assert "argument --speculative-algorithm: invalid choice: 'MTP'" in result.stderr


def test_sim_flags_are_split_off_before_sglang_parses():
    sglang_argv, sim_argv = knobs.split_sim_argv(["--model-path", "m", "--sim-fault", "oom", "--tp", "2", "--sim-startup-seconds=0.5"])
    assert sglang_argv == ["--model-path", "m", "--tp", "2"]
    loaded = knobs.load_knobs(sim_argv, environ={"SGLANG_SIM_FAULT": "degenerate", "SGLANG_SIM_ITERATION_MS": "5"})
    assert loaded.faults == frozenset({"oom"})
    assert loaded.startup_seconds == 0.5
    assert loaded.iteration_ms == 5.0


def test_faults_combine_and_healthy_is_empty():
    assert knobs.parse_faults("healthy") == frozenset()
    assert knobs.parse_faults("degenerate, low-accept") == frozenset({"degenerate", "low-accept"})
    with pytest.raises(ValueError):
        knobs.parse_faults("explode")


def test_unknown_fault_in_environment_exits_2():
    result = run_cli(["--model-path", "m"], SGLANG_SIM_FAULT="explode")
    assert result.returncode == 2
    assert "unknown fault mode(s) explode" in result.stderr
