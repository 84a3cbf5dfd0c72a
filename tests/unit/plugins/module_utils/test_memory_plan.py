# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""memory_plan: SGLang 0.5.23's and 0.5.9's pool arithmetic, the seed's two configurations and public startup logs."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible_collections.llmops.serving.plugins.module_utils import memory_plan, model_config, sglang_log

DATA = pathlib.Path(__file__).parent / "data"
QWEN36 = json.loads((DATA / "models" / "qwen3.6-27b-from-model-card.json").read_text())
DIMS = model_config.parse_model_config(QWEN36)
WEIGHTS = model_config.weight_bytes(DIMS)
GIB = memory_plan.GIB
A6000 = {"memory_mib": 49140, "count": 2}          # nvidia-smi memory.total of an RTX A6000
MTP = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
       "speculative_num_draft_tokens": 4}


def plan(flags, gpu=None, measured=None, arithmetic="0.5.23"):
    return memory_plan.plan_memory(DIMS, WEIGHTS, gpu or A6000, flags, measured, arithmetic=arithmetic)


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

SEED_48 = dict(MTP, max_running_requests=48, mamba_full_memory_ratio=0.9)
SEED_16 = dict(MTP, max_running_requests=16, mamba_full_memory_ratio=0.5)
PER_REQ = sum(memory_plan.mamba_state_bytes_per_request(DIMS, 2))   # 73.41 MiB per state slot on a rank


@pytest.mark.parametrize("flags, slots, tokens, running, requested", [
    (SEED_48, 26, 133995, 5, 48),
    (SEED_16, 18, 170687, 3, 16),
])
def test_seed_under_sglang_0_5_23_starts_and_is_cut_by_the_state_pool(flags, slots, tokens, running, requested):
    # 0.5.23 sizes the draft's intermediate state from the requests the state pool serves (the joint solve), so both
    # configurations start - and serve far fewer requests than asked (5 slots per request, 73.4 MiB each).
    result = plan(flags)
    assert result["sglang_version"] == "0.5.23"
    assert (result["fits"], result["serves_requested"], result["reasons"], result["binding"]) == (True, False, [], "mamba")
    assert result["pools"] == {"max_mamba_cache_size": slots, "max_total_num_tokens": tokens, "max_running_requests": running}
    assert result["shortfalls"] == [
        "mamba: the state pool (%d slots, 5 per request) serves %d of max_running_requests=%d; SGLang would cap it "
        "('max_running_requests is capped to %d by the mamba state cache')" % (slots, running, requested, running),
        "kv: %d tokens cannot hold one request of context_length=262144" % tokens]
    breakdown = result["breakdown"]
    assert round(breakdown["target_weights_bytes"] / GIB, 2) == 25.47
    assert round(breakdown["draft_weights_bytes"] / GIB, 2) == 2.76
    assert breakdown["available_after_load_bytes"] == breakdown["pre_model_load_bytes"] - breakdown["target_weights_bytes"] \
        - breakdown["draft_weights_bytes"]
    assert breakdown["multimodal_reservation_bytes"] == 100 * memory_plan.MIB
    assert breakdown["mamba_state_bytes"] == (slots + 1) * PER_REQ                   # the padding slot
    assert breakdown["mamba_intermediate_bytes"] == (running + 1) * 4 * PER_REQ      # from the requests it serves
    assert breakdown["kv_draft_cell_bytes"] == breakdown["kv_cell_bytes"] // 16      # the MTP layer in the same pool


def test_seed_48_requests_under_sglang_0_5_23_suggestions():
    result = plan(SEED_48)
    assert round(result["breakdown"]["mem_fraction_static"], 3) == 0.773
    suggestions = memory_plan.suggest(DIMS, WEIGHTS, A6000, SEED_48, plan=result)
    assert suggestions["max_running_requests"] == 5
    assert suggestions["mamba_full_memory_ratio"] is None          # no ratio up to 20 serves 48 requests
    assert suggestions["mamba_ssm_dtype"] is None
    assert suggestions["fits_with"] == {"max_running_requests": 5, "context_length": 135313}
    assert plan(dict(SEED_48, **suggestions["fits_with"]))["serves_requested"]
    summary = memory_plan.summary_line(result, suggestions)
    assert summary.startswith("fits (starts), but mamba: the state pool (26 slots, 5 per request) serves 5 of "
                              "max_running_requests=48; SGLang would cap it")
    assert "; weights 25.47 GiB + draft 2.76 GiB, mamba 26 slots" in summary
    assert "serves every request with context_length=135313, max_running_requests=5" in summary


def test_seed_48_requests_ratio_09_under_sglang_0_5_9_does_not_start():
    # 0.5.9 takes the draft's intermediate state for max_running_requests x draft tokens off the budget first:
    # 48 x 4 x 73.41 MiB = 13.76 GiB against a 9.41 GiB budget leaves nothing for the state pool. The budget is what
    # 0.5.9's default mem_fraction_static leaves (0.742: its reserve keeps 2 GiB more for a speculative draft and has
    # no prefill-graph term; the vision tower lowers it).
    result = plan(SEED_48, arithmetic="0.5.9")
    assert result["sglang_version"] == "0.5.9"
    assert (result["fits"], result["serves_requested"], result["binding"], result["shortfalls"]) == (False, False, "mamba", [])
    assert result["reasons"] == [
        "mamba: the draft's intermediate state for 48 requests x 4 draft tokens (13.76 GiB) leaves no state pool in the "
        "9.41 GiB pool budget (SGLang 0.5.9 sizes it from max_running_requests)"]
    breakdown = result["breakdown"]
    assert breakdown["mamba_intermediate_bytes"] == 48 * 4 * PER_REQ
    assert result["pools"]["max_mamba_cache_size"] == -29 and result["pools"]["max_running_requests"] == 0
    assert result["breakdown"]["mem_fraction_static"] == 0.7423
    # The draft loads after the pools in 0.5.9: its weights are reported, not taken from the budget.
    assert round(breakdown["draft_weights_bytes"] / GIB, 2) == 2.76
    assert breakdown["available_after_load_bytes"] == breakdown["pre_model_load_bytes"] - breakdown["target_weights_bytes"]
    assert breakdown["multimodal_reservation_bytes"] == 0
    assert abs(breakdown["pool_budget_bytes"] - (breakdown["available_after_load_bytes"]
                                                 - breakdown["outside_static_bytes"])) <= 1     # each rounded down
    suggestions = memory_plan.suggest(DIMS, WEIGHTS, A6000, SEED_48, plan=result)   # the plan's arithmetic
    assert suggestions["fits_with"] == {"max_running_requests": 12, "context_length": 103941}
    assert plan(dict(SEED_48, **suggestions["fits_with"]), arithmetic="0.5.9")["serves_requested"]
    summary = memory_plan.summary_line(result, suggestions)
    assert summary.startswith("does not fit: weights 25.47 GiB + draft 2.76 GiB, mamba -29 slots (0.00 GiB + 13.76 GiB "
                              "intermediate), KV 0 tokens")
    assert "; binding mamba: mamba: the draft's intermediate state for 48 requests" in summary
    assert "; fits with context_length=103941, max_running_requests=12" in summary


def test_seed_16_requests_ratio_05_under_sglang_0_5_9_starts_with_7_of_16():
    result = plan(SEED_16, arithmetic="0.5.9")
    assert (result["fits"], result["serves_requested"], result["reasons"], result["binding"]) == (True, False, [], "mamba")
    assert result["pools"] == {"max_mamba_cache_size": 22, "max_total_num_tokens": 106290, "max_running_requests": 7}
    # 0.5.9 resolves the auto strategy to no_buffer (server_args.py: "TODO: when extra_buffer is more verified"): 3
    # slots per request.
    assert result["resolved"]["mamba_radix_cache_strategy"] == "no_buffer"
    assert result["shortfalls"] == [
        "mamba: the state pool (22 slots, 3 per request) serves 7 of max_running_requests=16; SGLang 0.5.9 caps "
        "max_running_requests to 7", "kv: 106290 tokens cannot hold one request of context_length=262144"]
    breakdown = result["breakdown"]
    # handle_max_mamba_cache: intermediate first, then the ratio split of the rest, no padding slot.
    intermediate = 16 * 4 * PER_REQ
    assert breakdown["mamba_intermediate_bytes"] == intermediate
    assert int((breakdown["pool_budget_bytes"] - intermediate) * 0.5 / 1.5 // PER_REQ) == 22
    assert breakdown["mamba_state_bytes"] == 22 * PER_REQ and breakdown["mamba_slots_per_request"] == 3
    # The KV pool: the target's full-attention layers only (the draft's pool is its own in 0.5.9).
    assert breakdown["kv_draft_cell_bytes"] == 0
    assert int((breakdown["pool_budget_bytes"] - intermediate - 22 * PER_REQ) // breakdown["kv_cell_bytes"]) == 106290
    assert limits_of(result) == {"mamba": 0.4375, "kv": 0.4055}        # an explicit request count: no half-the-KV cap
    suggestions = memory_plan.suggest(DIMS, WEIGHTS, A6000, SEED_16, arithmetic="0.5.9")
    assert suggestions == {"max_running_requests": 10, "mamba_full_memory_ratio": 2.5, "mamba_ssm_dtype": "bfloat16",
                           "context_length": 143874, "fits_with": {"max_running_requests": 10, "context_length": 143874},
                           "cuda_graph_max_bs": None, "mem_fraction_static": None}
    summary = memory_plan.summary_line(result, suggestions)
    assert summary.startswith("fits (starts), but mamba: the state pool (22 slots, 3 per request) serves 7 of "
                              "max_running_requests=16; SGLang 0.5.9 caps max_running_requests to 7; weights 25.47 GiB")
    assert summary.endswith("; the state pool serves every request with mamba_full_memory_ratio=2.5 or "
                            "mamba_ssm_dtype=bfloat16 or max_running_requests=10")


def limits_of(result):
    return {key: value for key, value in result["limits"].items() if key != "activation_reserve"}


@pytest.mark.parametrize("arithmetic, slots, tokens", [("0.5.23", 83, 94343), ("0.5.9", 136, 81247)])
def test_seed_16_requests_serve_with_a_larger_gpu_share(arithmetic, slots, tokens):
    # What 16 concurrent requests need on these GPUs: a higher static fraction and more of it for the state pool.
    result = plan(dict(SEED_16, mamba_full_memory_ratio=4.0, mem_fraction_static=0.9, context_length=65536),
                  arithmetic=arithmetic)
    assert result["fits"] and result["serves_requested"], result["shortfalls"]
    assert result["pools"] == {"max_mamba_cache_size": slots, "max_total_num_tokens": tokens, "max_running_requests": 16}
    assert result["warnings"][-1].startswith("activation_reserve:")
    assert summary_verdict(result) == "fits"
    # Less than SGLang's reserve stays outside the pools: the warning's parts, and the fraction that leaves it all
    # (even batch size 1 does not fit the graphs next to the activations, so no cuda_graph_max_bs). 0.5.23 caps the
    # default graph batch size at max_running_requests and reserves for prefill graphs; 0.5.9 reserves 2 GiB for the
    # draft instead.
    parts = {"0.5.23": ("activations 6.75 GiB for a 4096-token chunked prefill, CUDA graphs 0.42 GiB for batch sizes "
                        "up to 16", 0.847),
             "0.5.9": ("activations 6.75 GiB for a 4096-token chunked prefill, the speculative draft 2.00 GiB, CUDA "
                       "graphs 0.06 GiB for batch sizes up to 32", 0.812)}
    assert parts[arithmetic][0] in result["warnings"][-1]
    assert memory_plan.suggest(DIMS, WEIGHTS, A6000, SEED_16, plan=result) == {
        "max_running_requests": None, "mamba_full_memory_ratio": None, "mamba_ssm_dtype": None, "context_length": None,
        "fits_with": None, "cuda_graph_max_bs": None, "mem_fraction_static": parts[arithmetic][1]}


def summary_verdict(result):
    return memory_plan.summary_line(result).split(":")[0]


def test_draft_weights_outside_the_pools_are_a_warning_under_0_5_9():
    flags = dict(SEED_16, mem_fraction_static=0.9)
    legacy = plan(flags, arithmetic="0.5.9")
    assert legacy["warnings"][0] == (
        "draft_weights: SGLang 0.5.9 loads the draft's 2.76 GiB after the pools, out of the 4.70 GiB outside the static "
        "pools; 1.94 GiB stay for activations and CUDA graphs, SGLang's default keeps 8.81 GiB; loading the draft or "
        "capturing CUDA graphs may run out of memory")
    assert not any(text.startswith("draft_weights:") for text in plan(flags)["warnings"])
    assert not any(text.startswith("draft_weights:") for text in plan(SEED_16, arithmetic="0.5.9")["warnings"])


def test_refusals_where_sglang_refuses_to_start():
    weights = plan(dict(MTP, mem_fraction_static=0.55))
    assert (weights["fits"], weights["binding"], weights["shortfalls"]) == (False, "weights", [])
    assert "Loaded weights leave no GPU memory" in weights["reasons"][0]
    state = plan(dict(MTP, mem_fraction_static=0.62))
    assert (state["fits"], state["serves_requested"], state["binding"]) == (False, False, "mamba")
    assert state["pools"]["max_mamba_cache_size"] <= 0
    assert "Not enough GPU memory for hybrid" in state["reasons"][0]
    assert summary_verdict(state) == "does not fit"


def test_refusals_under_sglang_0_5_9():
    weights = plan(dict(MTP, mem_fraction_static=0.5), arithmetic="0.5.9")
    assert (weights["fits"], weights["binding"]) == (False, "weights")
    assert weights["reasons"] == ["weights: 25.47 GiB of weights leave no room for pools under mem_fraction_static=0.500; "
                                  "raise it above 0.543 (SGLang 0.5.9 sizes its pools from a negative budget)"]
    assert plan(dict(MTP, mem_fraction_static=0.55))["binding"] == "weights"    # 0.5.23 counts the draft's weights
    kv = plan(dict(SEED_16, max_mamba_cache_size=200), arithmetic="0.5.9")
    assert (kv["fits"], kv["binding"], kv["pools"]["max_mamba_cache_size"]) == (False, "kv", 200)
    assert kv["reasons"] == ["kv: no token fits the KV pool (SGLang 0.5.9: 'Not enough memory. Please try to increase "
                             "--mem-fraction-static.')"]
    none_served = plan(dict(SEED_16, max_mamba_cache_size=2), arithmetic="0.5.9")
    assert (none_served["fits"], none_served["binding"], none_served["pools"]["max_running_requests"]) == (False, "mamba", 0)
    assert none_served["reasons"][0].startswith("mamba: 2 state slots serve no request at 3 slots per request")
    with pytest.raises(memory_plan.PlanInputError, match="SGLang 0.5.8 sizes the hybrid state pool in a way the plan"):
        plan(SEED_16, arithmetic="0.5.8")


@pytest.mark.parametrize("strategy, radix_off, speculative, slots", [
    ("extra_buffer", False, True, 4), ("extra_buffer", False, False, 5), ("no_buffer", False, True, 3),
    ("extra_buffer", True, True, 1),
])
def test_slots_per_request_under_0_5_9(strategy, radix_off, speculative, slots):
    assert memory_plan.mamba_slots_per_request_0_5_9(strategy, radix_off, speculative) == slots


def test_without_speculative_decoding_0_5_9_has_no_intermediate_state():
    result = plan({"tp_size": 2, "max_running_requests": 16}, arithmetic="0.5.9")
    assert result["breakdown"]["mamba_intermediate_bytes"] == 0 and result["breakdown"]["mamba_slots_per_request"] == 3
    extra = plan({"tp_size": 2, "max_running_requests": 16, "mamba_radix_cache_strategy": "extra_buffer"}, arithmetic="0.5.9")
    assert extra["breakdown"]["mamba_slots_per_request"] == 5
    assert result["pools"] == {"max_mamba_cache_size": 74, "max_total_num_tokens": 193309, "max_running_requests": 16}
    assert extra["pools"]["max_running_requests"] == 74 // 5


def test_dense_model_gets_a_kv_pool_only():
    dense = model_config.parse_model_config({
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288,
        "max_position_embeddings": 40960, "torch_dtype": "bfloat16"})
    result = memory_plan.plan_memory(dense, model_config.weight_bytes(dense), {"memory_mib": 81559}, {"max_running_requests": 64})
    assert result["fits"] and result["serves_requested"] and result["pools"]["max_mamba_cache_size"] is None
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
    # The README reports the cap SGLang logged: 24 of 32. The server started: the plan fits, with the cap as a shortfall.
    assert result["fits"] and not result["serves_requested"] and result["reasons"] == []
    assert "serves 25 of max_running_requests=32" in result["shortfalls"][0]


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


def test_flags_from_an_inventory_or_the_command_line_are_typed():
    # `-e sglang_service_max_running_requests=8` and YAML strings arrive as text.
    assert memory_plan.coerce_flags({"max_running_requests": "8", "mem_fraction_static": "0.85", "tp_size": 2,
                                     "disable_cuda_graph": "false", "context_length": "", "kv_cache_dtype": "auto",
                                     "speculative_algorithm": None}) == {
        "max_running_requests": 8, "mem_fraction_static": 0.85, "tp_size": 2, "disable_cuda_graph": False,
        "context_length": None, "kv_cache_dtype": "auto", "speculative_algorithm": None}
    assert plan(memory_plan.coerce_flags(dict(MTP, max_running_requests="16", mamba_full_memory_ratio="0.5")))[
        "pools"] == plan(SEED_16)["pools"]
    for bad in ({"max_running_requests": "8.5"}, {"max_running_requests": True}, {"tp_size": "two"},
                {"disable_cuda_graph": "maybe"}, {"mem_fraction": "0.8"}):
        with pytest.raises(memory_plan.PlanInputError):
            memory_plan.coerce_flags(bad)


# ---- GPUs shared with other servers ----------------------------------------------------------------------------------

def test_a_co_tenant_takes_its_static_share_of_the_free_memory_first_and_is_named():
    alone = plan(dict(MTP, max_running_requests=16, mem_fraction_static=0.85))
    assert alone["fits"] and alone["breakdown"]["co_tenant_bytes"] == 0
    shared = plan(dict(MTP, max_running_requests=16, mem_fraction_static=0.85),
                  gpu=dict(A6000, co_tenants=[{"name": "sandbox-llm-a", "mem_fraction_static": 0.45}]))
    free = (49140 - memory_plan.DEFAULT_CUDA_CONTEXT_MIB) * memory_plan.MIB
    assert shared["breakdown"]["co_tenant_bytes"] == int(0.45 * free)
    assert shared["breakdown"]["pre_model_load_bytes"] == int(free - 0.45 * free)
    # 27B weights over two GPUs do not fit half of what the co-tenant leaves: refused, naming the co-tenant first.
    assert not shared["fits"]
    assert shared["reasons"][0].startswith("shared GPUs: sandbox-llm-a (mem_fraction_static 0.45) hold about 21.14 GiB of "
                                           "each GPU, leaving 25.84 GiB of 47.99 GiB when this server starts")
    assert "shared GPUs: sandbox-llm-a" in memory_plan.summary_line(shared)


def test_a_co_tenant_without_a_fraction_counts_sglangs_default_and_can_leave_nothing():
    greedy = plan(dict(MTP, max_running_requests=16),
                  gpu=dict(A6000, co_tenants=[{"name": "llm-b", "mem_fraction_static": None},
                                              {"name": "llm-c", "mem_fraction_static": 0.5}]))
    assert not greedy["fits"] and greedy["reasons"][0].startswith("shared GPUs: llm-b (mem_fraction_static default), llm-c")
    assert "no GPU memory is free when this server starts" in greedy["reasons"][1]


def test_weights_larger_than_what_a_co_tenant_leaves_free_are_named_as_such():
    crowded = plan(dict(MTP, max_running_requests=16),
                   gpu=dict(A6000, co_tenants=[{"name": "sandbox-llm-b", "mem_fraction_static": None}]))
    assert not crowded["fits"]
    assert crowded["reasons"][1].startswith("weights: 28.24 GiB of weights do not fit the 10.61 GiB free when this server "
                                            "starts; no mem_fraction_static makes room")


# ---- what is served of what was asked --------------------------------------------------------------------------------

def test_serves_reads_the_plan_and_prefers_what_sglang_allocated():
    result = plan(SEED_16)
    figures = memory_plan.serves(result)
    assert figures == {"running_requests": 3, "requested_running_requests": 16, "kv_tokens": 170687,
                       "context_length": 262144, "full_context_requests": 0, "source": "plan"}
    assert memory_plan.serves_line(figures) == (
        "serves 3 of 16 requested running requests; the KV pool holds 170687 tokens, 0 request(s) of the 262144-token "
        "context")
    # What the startup log says wins (SGLang's own caps), its context length included.
    logged = memory_plan.serves(result, {"max_running_requests": 2, "max_total_num_tokens": 150000, "context_len": 65536})
    assert (logged["running_requests"], logged["kv_tokens"], logged["context_length"], logged["full_context_requests"],
            logged["source"]) == (2, 150000, 65536, 2, "startup log")
    # A log without the pool line (a server that died before it) leaves the plan's figures.
    assert memory_plan.serves(result, {"max_mamba_cache_size": 18})["source"] == "plan"


def test_the_roles_sizing_serves_what_it_asks_on_two_a6000s():
    defaults = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "roles" / "sglang_service" / "defaults"
                               / "main.yml").read_text())
    flags = dict(MTP, max_running_requests=defaults["sglang_service_max_running_requests"],
                 mamba_full_memory_ratio=defaults["sglang_service_mamba_full_memory_ratio"])
    # With the model's own context (262144) the KV pool cannot hold one request: the plan says so, and names the fix.
    own_context = plan(flags)
    assert own_context["fits"] and own_context["shortfalls"] == [
        "kv: %d tokens cannot hold one request of context_length=262144" % own_context["pools"]["max_total_num_tokens"]]
    # With the 131072-token context the example sets, every request is served.
    result = plan(dict(flags, context_length=131072))
    assert result["serves_requested"], result["shortfalls"]
    figures = memory_plan.serves(result)
    assert figures["running_requests"] == figures["requested_running_requests"] == 4
    assert figures["full_context_requests"] >= 1
