# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's command line: SGLang 0.5.23's flags and argparse behaviour, and the separate --sim-* knobs."""
from __future__ import annotations

import sys
import types

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
        ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "7"]))
    assert args["speculative_num_draft_tokens"] == 3


def test_algorithm_is_uppercased_and_nextn_runs_as_eagle():
    args = cli.resolve_server_args(cli.parse_server_args(["--model-path", "m", "--speculative-algorithm", "nextn"]))
    # No step count: _auto_choose_speculative_params' (3, 1, 4); max_running_requests 48 with speculation.
    assert (args["speculative_algorithm"], args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"], args["max_running_requests"]) == ("EAGLE", 3, 1, 4, 48)
    assert cli.resolve_server_args(cli.parse_server_args(["--model-path", "m", "--speculative-algorithm", "eagle3"]))[
        "speculative_algorithm"] == "EAGLE3"


@pytest.mark.parametrize("extra, error, message", [
    (["--speculative-algorithm", "mtp"], ValueError, "Unknown speculative algorithm name: MTP"),
    (["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"], TypeError,
     "'>' not supported between instances of 'NoneType' and 'int'"),
    (["--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1"], AssertionError, ""),
    (["--mamba-radix-cache-strategy", "no_buffer"], AssertionError,
     "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."),
    (["--served-model-name", "qwen:latest"], AssertionError, "served_model_name cannot contain a colon (':') character."),
    (["--speculative-algorithm", "NEXTN", "--speculative-use-rejection-sampling", "--speculative-eagle-topk", "2",
      "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"], ValueError,
     "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1."),
])
def test_combinations_sglang_refuses_at_start_raise_its_exception(extra, error, message):
    namespace = cli.parse_server_args(["--model-path", "m"] + extra)
    with pytest.raises(error) as raised:
        cli.resolve_server_args(namespace)
    assert type(raised.value) is error  # pylint: disable=unidiomatic-typecheck
    assert str(raised.value).startswith(message)


def test_mamba_cache_strategy_resolution():
    def resolve(*extra):
        return cli.resolve_server_args(cli.parse_server_args(["--model-path", "m"] + list(extra)))

    assert resolve()["mamba_radix_cache_strategy"] == "extra_buffer"
    assert resolve("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")[
        "mamba_radix_cache_strategy"] == "no_buffer"
    args = resolve("--disable-overlap-schedule")
    assert (args["mamba_radix_cache_strategy"], args["disable_overlap_schedule"]) == ("no_buffer", True)
    with pytest.raises(AssertionError, match="no_buffer only supports page_size=1."):
        resolve("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule", "--page-size", "16")


def test_resolved_args_keep_only_server_args_fields_and_the_parsed_values():
    args = cli.resolve_server_args(cli.parse_server_args(["--model-path", "m", "--context-length", "128k"]))
    assert "config" not in args and "help" not in args
    assert args["context_length"] == 128000
    assert (args["tokenizer_path"], args["served_model_name"], args["device"]) == ("m", "m", "cuda")


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
    assert "the following arguments are required: --model-path/--model" in result.stderr


def test_bad_choice_exit_2():
    result = run_cli(["--model-path", "m", "--sampling-defaults", "greedy"])
    assert result.returncode == 2
    assert "argument --sampling-defaults: invalid choice: 'greedy' (choose from 'openai', 'model')" in result.stderr


def test_unknown_algorithm_makes_the_server_exit_at_start_with_sglangs_error():
    result = run_cli(["--model-path", "m", "--speculative-algorithm", "mtp"], SGLANG_SIM_STARTUP_SECONDS="0.2")
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == "ValueError: Unknown speculative algorithm name: MTP"
    assert "server_args=" not in result.stderr, "SGLang resolves before it logs server_args"


def test_sim_flags_are_split_off_before_sglang_parses():
    sglang_argv, sim_argv = knobs.split_sim_argv(["--model-path", "m", "--sim-fault", "oom", "--tp", "2", "--sim-startup-seconds=0.5"])
    assert sglang_argv == ["--model-path", "m", "--tp", "2"]
    loaded = knobs.load_knobs(sim_argv, environ={"SGLANG_SIM_FAULT": "degenerate", "SGLANG_SIM_ITERATION_MS": "5"})
    assert loaded.faults == frozenset({"oom"})
    assert loaded.startup_seconds == 0.5
    assert loaded.iteration_ms == 5.0


@pytest.fixture
def installed_standin(monkeypatch):
    """install(**attributes): a fake `sglang` stand-in release in sys.modules, as `import sglang` finds it."""
    def install(**attributes):
        monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(__version__="0.5.23.post1+standin", **attributes))
    return install


def test_the_installed_standins_fault_applies_when_neither_flag_nor_environment_sets_one(installed_standin):
    installed_standin(STANDIN_FAULT="oom")
    assert knobs.load_knobs([], environ={}).faults == frozenset({"oom"})
    assert knobs.load_knobs([], environ={"SGLANG_SIM_FAULT": ""}).faults == frozenset({"oom"})
    # The environment and the flag keep precedence, healthy included.
    assert knobs.load_knobs([], environ={"SGLANG_SIM_FAULT": "healthy"}).faults == frozenset()
    assert knobs.load_knobs([], environ={"SGLANG_SIM_FAULT": "never-ready"}).faults == frozenset({"never-ready"})
    assert knobs.load_knobs(["--sim-fault", "degenerate"], environ={}).faults == frozenset({"degenerate"})


@pytest.mark.parametrize("attributes", [{"STANDIN_FAULT": ""}, {}], ids=["normal release", "no STANDIN_FAULT"])
def test_a_standin_without_a_fault_is_healthy(installed_standin, attributes):
    installed_standin(**attributes)
    assert knobs.load_knobs([], environ={}).faults == frozenset()


def test_without_an_installed_sglang_the_simulator_is_healthy(monkeypatch):
    # None in sys.modules makes `import sglang` raise ImportError.
    monkeypatch.setitem(sys.modules, "sglang", None)
    assert knobs.standin_fault() == ""
    assert knobs.load_knobs([], environ={}).faults == frozenset()


def test_an_unknown_standin_fault_names_its_origin(installed_standin, capsys):
    installed_standin(STANDIN_FAULT="explode")
    with pytest.raises(SystemExit) as exit_info:
        knobs.load_knobs([], environ={})
    assert exit_info.value.code == 2
    assert "the installed sglang stand-in's STANDIN_FAULT: unknown fault mode(s) explode" in capsys.readouterr().err


def test_faults_combine_and_healthy_is_empty():
    assert knobs.parse_faults("healthy") == frozenset()
    assert knobs.parse_faults("degenerate, low-accept") == frozenset({"degenerate", "low-accept"})
    with pytest.raises(ValueError):
        knobs.parse_faults("explode")


@pytest.mark.parametrize("argv, env", [([], {"SGLANG_SIM_GPU_MEMORY_GB": "80"}), (["--sim-gpu-memory-gb=80"], {})],
                         ids=["environment", "flag"])
def test_the_removed_gpu_memory_knob_is_refused(argv, env):
    # The GPUs' memory is the driver's now; a run still told a size would silently run on other figures.
    result = run_cli(["--model-path", "m"] + argv, **env)
    assert result.returncode == 2
    assert ("SGLANG_SIM_GPU_MEMORY_GB / --sim-gpu-memory-gb was removed: the GPUs and their memory are what the NVIDIA "
            "driver stand-in reports") in result.stderr


def test_unknown_fault_in_environment_exits_2():
    result = run_cli(["--model-path", "m"], SGLANG_SIM_FAULT="explode")
    assert result.returncode == 2
    assert "unknown fault mode(s) explode" in result.stderr
