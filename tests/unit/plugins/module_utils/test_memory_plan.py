# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""memory_plan: SGLang 0.5.23's pool arithmetic, the seed's two configurations and public startup logs."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import memory_plan, model_config, sglang_log

DATA = pathlib.Path(__file__).parent / "data"
QWEN36 = json.loads((DATA / "models" / "qwen3.6-27b-from-model-card.json").read_text())
DIMS = model_config.parse_model_config(QWEN36)
WEIGHTS = model_config.weight_bytes(DIMS)
GIB = memory_plan.GIB
A6000 = {"memory_mib": 49140, "count": 2}          # nvidia-smi memory.total of an RTX A6000
MTP = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
       "speculative_num_draft_tokens": 4}


def plan(flags, gpu=None, measured=None):
    return memory_plan.plan_memory(DIMS, WEIGHTS, gpu or A6000, flags, measured)


def startup(name):
    return sglang_log.parse_pool_lines((DATA / "sglang_startup" / name).read_text().splitlines())


# ---- the pieces, against SGLang's own figures ------------------------------------------------------------------------

def test_state_per_request_is_sglangs_figure():
    # SGLang prints mamba_cache_per_req=146.81 MB for this geometry at TP 1 (qwen3.8-27b-fp8-mi355x-oom.log).
    conv, ssm = memory_plan.mamba_state_bytes_per_request(DIMS, 1)
    assert round((conv + ssm) / memory_plan.MIB, 2) == 146.81
    assert sum(memory_plan.mamba_state_bytes_per_request(DIMS, 2)) * 2 == conv + ssm
    assert sum(memory_plan.mamba_state_bytes_per_request(DIMS, 1, "bfloat16")) < conv + ssm


def test_kv_cell_counts_the_full_attention_layers_and_the_draft():
    target, draft = memory_plan.kv_cell_bytes(DIMS, 2, 2, 1)
    assert target == 2 * (256 + 256) * 16 * 2 and draft == target // 16


@pytest.mark.parametrize("strategy, overlap_off, radix_off, slots", [
    ("extra_buffer", False, False, 5), ("extra_buffer", True, False, 4), ("no_buffer", True, False, 3),
    ("extra_buffer_lazy", False, False, 4), ("extra_buffer", False, True, 1),
])
def test_slots_per_request(strategy, overlap_off, radix_off, slots):
    assert memory_plan.mamba_slots_per_request(strategy, overlap_off, radix_off) == slots


def test_gpu_defaults_and_graph_sizes():
    assert memory_plan.gpu_capacity_defaults(49140, 2) == (4096, 32)
    assert memory_plan.gpu_capacity_defaults(81559, 1) == (8192, 256)
    assert memory_plan.decode_cuda_graph_batch_sizes(16, True) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]
    assert memory_plan.decode_cuda_graph_batch_sizes(20, False) == [1, 2, 4, 8, 12, 16, 20]
    assert len(memory_plan.prefill_cuda_graph_batch_sizes(4096)) == 50   # as SGLang 0.5.23 generates them


def test_resolution_follows_sglang():
    resolved = plan(dict(MTP, speculative_num_draft_tokens=9))["resolved"]
    assert resolved["speculative_num_draft_tokens"] == 4          # topk 1: steps + 1
    assert resolved["max_running_requests"] == 48                 # spec default
    assert resolved["mamba_radix_cache_strategy"] == "extra_buffer"
    assert resolved["cuda_graph_max_bs"] == 32 and resolved["chunked_prefill_size"] == 4096
    with pytest.raises(memory_plan.PlanInputError, match="EAGLE family"):
        plan(dict(MTP, speculative_algorithm="NGRAM"))
    with pytest.raises(memory_plan.PlanInputError, match="unknown flag"):
        plan(dict(MTP, mem_fraction=0.8))
    with pytest.raises(memory_plan.PlanInputError, match="needs 4 GPUs"):
        plan(dict(MTP, tp_size=4))


# ---- the seed: Qwen3.6-27B, 2 x RTX A6000, TP 2, MTP 3/1/4 ------------------------------------------------------------

def test_seed_48_requests_ratio_09_is_refused_by_the_state_pool():
    result = plan(dict(MTP, max_running_requests=48, mamba_full_memory_ratio=0.9))
    assert not result["fits"] and result["binding"] == "mamba"
    assert result["reasons"][0].startswith("mamba: the state pool (26 slots, 5 per request) serves 5 of max_running_requests=48")
    assert result["pools"] == {"max_mamba_cache_size": 26, "max_total_num_tokens": 133995, "max_running_requests": 5}
    breakdown = result["breakdown"]
    assert round(breakdown["target_weights_bytes"] / GIB, 2) == 25.47
    assert round(breakdown["draft_weights_bytes"] / GIB, 2) == 2.76
    assert round(breakdown["mem_fraction_static"], 3) == 0.773
    suggestions = memory_plan.suggest(DIMS, WEIGHTS, A6000, dict(MTP, max_running_requests=48, mamba_full_memory_ratio=0.9),
                                      plan=result)
    assert suggestions["max_running_requests"] == 5
    assert suggestions["mamba_full_memory_ratio"] is None          # no ratio up to 20 serves 48 requests
    assert suggestions["mamba_ssm_dtype"] is None
    assert suggestions["fits_with"] == {"max_running_requests": 5, "context_length": 135313}
    assert plan(dict(MTP, mamba_full_memory_ratio=0.9, **suggestions["fits_with"]))["fits"]


def test_seed_16_requests_ratio_05_under_sglang_0_5_23():
    # SGLang 0.5.23 sizes the draft's intermediate state from the requests the state pool can serve, not from
    # max_running_requests, so 16 + 0.5 starts - and serves 3 requests, not 16 (5 slots per request, 73.4 MiB each).
    result = plan(dict(MTP, max_running_requests=16, mamba_full_memory_ratio=0.5))
    assert result["pools"] == {"max_mamba_cache_size": 18, "max_total_num_tokens": 170687, "max_running_requests": 3}
    assert not result["fits"] and result["binding"] == "mamba"
    assert "serves 3 of max_running_requests=16" in result["reasons"][0]
    summary = memory_plan.summary_line(result, memory_plan.suggest(
        DIMS, WEIGHTS, A6000, dict(MTP, max_running_requests=16, mamba_full_memory_ratio=0.5), plan=result))
    assert summary.startswith("does not fit: weights 25.47 GiB + draft 2.76 GiB, mamba 18 slots")
    assert "fits with context_length=170687, max_running_requests=3" in summary


def test_seed_16_requests_fit_with_a_larger_gpu_share():
    # What 16 concurrent requests need on these GPUs: a higher static fraction and more of it for the state pool.
    result = plan(dict(MTP, max_running_requests=16, mamba_full_memory_ratio=4.0, mem_fraction_static=0.9,
                       context_length=65536))
    assert result["fits"], result["reasons"]
    assert result["pools"]["max_running_requests"] == 16
    assert result["warnings"] and result["warnings"][0].startswith("activation_reserve:")


def test_refusals_where_sglang_refuses_to_start():
    weights = plan(dict(MTP, mem_fraction_static=0.55))
    assert (weights["fits"], weights["binding"]) == (False, "weights")
    assert "Loaded weights leave no GPU memory" in weights["reasons"][0]
    state = plan(dict(MTP, mem_fraction_static=0.62))
    assert (state["fits"], state["binding"]) == (False, "mamba")
    assert state["pools"]["max_mamba_cache_size"] <= 0
    assert "Not enough GPU memory for hybrid" in state["reasons"][0]


def test_dense_model_gets_a_kv_pool_only():
    dense = model_config.parse_model_config({
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288,
        "max_position_embeddings": 40960, "torch_dtype": "bfloat16"})
    result = memory_plan.plan_memory(dense, model_config.weight_bytes(dense), {"memory_mib": 81559}, {"max_running_requests": 64})
    assert result["fits"] and result["pools"]["max_mamba_cache_size"] is None
    assert result["breakdown"]["kv_cell_bytes"] == 8 * 256 * 36 * 2


# ---- public startup logs (data/sglang_startup/README.md) --------------------------------------------------------------

def _measured(actual, pre_gib=None):
    pre = pre_gib if pre_gib is not None else actual["load_end_avail_gib"] + actual["weights_gib"]
    return {"pre_model_load_bytes": pre * GIB, "available_after_load_bytes": actual["load_end_avail_gib"] * GIB}


def test_public_h100_log_within_one_slot_and_half_a_percent():
    actual = startup("qwen3.8-27b-fp8-h100-tp1.log")
    result = plan({"tp_size": 1, "mem_fraction_static": 0.85, "max_running_requests": 32},
                  gpu={"memory_mib": 81559, "count": 1}, measured=_measured(actual))
    errors = memory_plan.compare_with_startup(result, actual)
    assert errors["max_mamba_cache_size"] == {"planned": 125, "actual": 124, "error": 1, "relative_error": 0.0081}
    assert errors["max_total_num_tokens"]["actual"] == 330323
    assert abs(errors["max_total_num_tokens"]["relative_error"]) <= 0.005    # 328917 planned: -0.43 %
    # The README reports the cap SGLang logged: 24 of 32. The plan refuses the configuration for that cap.
    assert not result["fits"] and "serves 25 of max_running_requests=32" in result["reasons"][0]


@pytest.mark.parametrize("name, tp, tokens", [
    ("qwen3.8-27b-fp8-mi355x-tp1.log", 1, 1543256),
    ("qwen3.8-27b-fp8-mi355x-tp2.log", 2, 3228418),
])
def test_public_mi355x_logs_within_21_percent(name, tp, tokens):
    # SGLang 0.5.17 on ROCm: the KV pool comes out about 20 % below the 0.5.23 arithmetic on both runs; the log leaves
    # the Mamba Cache line out, so which pool took the difference cannot be told. Stated error: within 21 %.
    actual = startup(name)
    assert actual["max_total_num_tokens"] == tokens
    result = plan({"tp_size": tp, "mem_fraction_static": 0.85, "max_running_requests": 32},
                  gpu={"memory_mib": 294912, "count": tp}, measured=_measured(actual))
    error = memory_plan.compare_with_startup(result, actual)["max_total_num_tokens"]["relative_error"]
    assert 0.15 < error <= 0.21


def test_compare_reports_each_pool_it_can():
    actual = {"max_mamba_cache_size": 20, "max_total_num_tokens": 1000, "max_running_requests": 4,
              "capped_running_requests": 3, "available_gpu_mem_gib": 2.0}
    fake = {"pools": {"max_mamba_cache_size": 18, "max_total_num_tokens": 1100, "max_running_requests": 3},
            "breakdown": {"free_after_pools_bytes": int(2.5 * GIB)}}
    errors = memory_plan.compare_with_startup(fake, actual)
    assert errors["max_mamba_cache_size"]["error"] == -2 and errors["max_total_num_tokens"]["relative_error"] == 0.1
    assert errors["max_running_requests"]["actual"] == 3 and errors["max_running_requests"]["error"] == 0
    assert errors["available_gpu_mem_gib"] == {"planned": 2.5, "actual": 2.0, "error": 0.5, "relative_error": 0.25}
    assert memory_plan.compare_with_startup(fake, {}) == {}
