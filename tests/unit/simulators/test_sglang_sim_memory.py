# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator sizes its pools with SGLang 0.5.23's arithmetic on a simulated GPU, as the collection's plan does."""
from __future__ import annotations

import json
import pathlib
import signal

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import memory_plan, model_config, sglang_log
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import READY_LINE, SPEC_ARGS
from sglang_sim import cuda, memory, resolution

CONFIG = json.loads((pathlib.Path(__file__).parents[1] / "plugins" / "module_utils" / "data" / "models"
                     / "qwen3.6-27b-from-model-card.json").read_text())
A6000_GB = 49140 / 1024.0


def sim_args(**flags):
    args = {"tp_size": 2, "mem_fraction_static": None, "max_running_requests": 16, "mamba_full_memory_ratio": 0.5,
            "speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4, "max_mamba_cache_size": None,
            "mamba_radix_cache_strategy": "extra_buffer", "disable_overlap_schedule": False, "cuda_graph_max_bs_decode": None,
            "chunked_prefill_size": None, "max_total_tokens": None, "mamba_ssm_dtype": None}
    args.update(flags)
    return args


@pytest.mark.parametrize("requests, ratio, fraction, gpu_gb", [
    (48, 0.9, None, A6000_GB), (16, 0.5, None, A6000_GB), (16, 4.0, 0.9, A6000_GB), (8, 0.9, None, 79.65),
])
def test_simulator_and_plan_agree(requests, ratio, fraction, gpu_gb):
    figures = memory.plan(sim_args(max_running_requests=requests, mamba_full_memory_ratio=ratio,
                                   mem_fraction_static=fraction), gpu_gb)
    dims = model_config.parse_model_config(CONFIG)
    planned = memory_plan.plan_memory(
        dims, model_config.weight_bytes(dims), {"memory_mib": gpu_gb * 1024},
        {"tp_size": 2, "max_running_requests": requests, "mamba_full_memory_ratio": ratio, "mem_fraction_static": fraction,
         "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1})
    assert figures["mamba_size"] == planned["pools"]["max_mamba_cache_size"]
    assert figures["kv_tokens"] == planned["pools"]["max_total_num_tokens"]
    assert figures["max_running_requests"] == planned["pools"]["max_running_requests"]


def test_refusals():
    assert memory.plan(sim_args(mem_fraction_static=0.55), A6000_GB)["error"][0] == "weights"
    size, rest_gb, per_req_mb = memory.plan(sim_args(mem_fraction_static=0.62), A6000_GB)["error"][1]
    assert size <= 0 and round(per_req_mb, 2) == 73.41
    assert memory.plan(sim_args(tp_size=1), A6000_GB)["error"][0] == "weights"


def test_gpu_settings_follow_the_card_nvidia_smi_reports(gpu_kit):
    args = {"mem_fraction_static": None, "chunked_prefill_size": None, "cuda_graph_max_bs_decode": None,
            "max_running_requests": 16, "tp_size": 2, "mamba_full_memory_ratio": None}
    resolution.handle_gpu_memory_settings(args, cuda.Cuda.load(gpu_kit.env()))
    assert (args["chunked_prefill_size"], args["cuda_graph_max_bs_decode"]) == (4096, 16)
    assert round(args["mem_fraction_static"], 3) == 0.774


def test_pool_lines_parse_back_to_the_plan(start_sim):
    sim = start_sim(["--tp-size", "2", "--max-running-requests", "16", "--mamba-full-memory-ratio", "0.5"] + SPEC_ARGS)
    sim.wait_ready()
    actual = sglang_log.parse_pool_lines(sim.log().splitlines())
    expected = memory.plan(sim_args(), A6000_GB)
    assert actual["max_mamba_cache_size"] == expected["mamba_size"] == 18          # the seed test's figure
    assert actual["max_total_num_tokens"] == actual["kv_tokens"] == expected["kv_tokens"]
    assert actual["capped_running_requests"] == actual["max_running_requests"] == 3
    assert actual["sampling_defaults"] == {"temperature": 1.0, "top_k": 20, "top_p": 0.95}


def test_a_configuration_that_does_not_fit_is_refused_with_sglangs_error(start_sim):
    sim = start_sim(["--tp-size", "2", "--mem-fraction-static", "0.62"] + SPEC_ARGS)
    assert sim.proc.wait(timeout=15) == -signal.SIGKILL
    log = sim.log()
    assert "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed " \
           "max_mamba_cache_size=0 " in log
    assert READY_LINE not in log and "Mamba Cache is allocated" not in log
    parsed = sglang_log.parse_pool_lines(log.splitlines())
    assert parsed["oom_mamba_cache_size"] == 0 and "max_mamba_cache_size" not in parsed
