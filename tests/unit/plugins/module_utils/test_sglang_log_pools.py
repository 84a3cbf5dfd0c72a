# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_log: SGLang's startup pool lines and chat sampling defaults, from public logs (data/sglang_startup)."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import sglang_log

DATA = pathlib.Path(__file__).parent / "data" / "sglang_startup"


def parse(name):
    return sglang_log.parse_pool_lines((DATA / name).read_text().splitlines())


def test_h100_log_without_prefixes():
    assert parse("qwen3.8-27b-fp8-h100-tp1.log") == {
        "load_end_avail_gib": 50.01, "weights_gib": 28.47, "max_mamba_cache_size": 124, "conv_state_gib": 0.34,
        "ssm_state_gib": 17.58, "kv_tokens": 330323, "k_size_gib": 10.08, "v_size_gib": 10.08,
        "cuda_graph_gib": 0.1}


def test_tp_log_counts_rank_zero_only():
    parsed = parse("ktransformers-1870-qwen3.5-moe-tp2.log")
    assert parsed == {"load_end_avail_gib": 19.08, "weights_gib": 3.76, "max_mamba_cache_size": 82, "conv_state_gib": 0.13,
                      "ssm_state_gib": 7.29, "kv_tokens": 580364, "k_size_gib": 4.15, "v_size_gib": 4.15,
                      "pool_end_avail_gib": 4.02, "max_total_num_tokens": 580364, "max_running_requests": 1,
                      "context_len": 8192, "available_gpu_mem_gib": 3.63}
    assert sglang_log.parse_pool_line("[2026-02-27 17:10:28 TP1] Mamba Cache is allocated. max_mamba_cache_size: 9, x") == {}


def test_oom_and_cap_lines():
    assert parse("qwen3.8-27b-fp8-mi355x-oom.log") == {}          # split over two lines there: the parser reads whole lines
    line = ("[2026-12-01 22:01:04 TP0] RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            "Computed max_mamba_cache_size=-28 (total_rest_memory=-7.96 GB, mamba_cache_per_req=146.81 MB). Try: ...")
    assert sglang_log.parse_pool_line(line) == {"oom_mamba_cache_size": -28, "oom_total_rest_gib": -7.96}
    cap = ("[2026-12-01 22:00:55 TP0] max_running_requests is capped to 3 by the mamba state cache (max_mamba_cache_size=17, "
           "5 state slots per request). To raise it: ...")
    assert sglang_log.parse_pool_line(cap) == {"capped_running_requests": 3}


def test_first_value_wins_so_the_draft_does_not_replace_the_target():
    lines = ["KV Cache is allocated. #tokens: 100, K size: 1.00 GB, V size: 1.00 GB",
             "KV Cache is allocated. #tokens: 100, K size: 0.06 GB, V size: 0.06 GB"]
    assert sglang_log.parse_pool_lines(lines)["k_size_gib"] == 1.0


def test_sampling_defaults_line():
    parsed = parse("sglang-12726-sampling-defaults.log")
    assert parsed["sampling_defaults"] == {"repetition_penalty": 1.0, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert parsed["max_total_num_tokens"] == 421472 and parsed["available_gpu_mem_gib"] == 12.18
    assert sglang_log.parse_sampling_defaults_line("[x] nothing here") is None
    assert "sampling_defaults" not in sglang_log.parse_pool_lines(["max_total_num_tokens=1, max_running_requests=1"])


# Issue 27's corpus (data/sglang_startup/README.md names each source): SGLang from January 2025 (no #tokens on the KV
# line, no mem usage on the weight line) to August 2026, dense, MoE FP8 and a hybrid model, one to four GPUs. The parser
# takes rank 0's lines and what each release prints, nothing it does not.
@pytest.mark.parametrize("name, expected", [
    ("llama-3.1-8b-instruct-80gb-tp1-sglang-docs-20250123.log", {
        "load_begin_avail_gib": 78.81, "load_end_avail_gib": 63.72, "k_size_gib": 27.13, "v_size_gib": 27.13,
        "pool_end_avail_gib": 8.34, "max_total_num_tokens": 444500, "max_running_requests": 2049, "context_len": 131072}),
    ("qwq-32b-l4-tp4-llms-in-clouds.log", {
        "load_begin_avail_gib": 21.63, "load_end_avail_gib": 6.09, "weights_gib": 15.54, "kv_tokens": 46611,
        "k_size_gib": 1.42, "v_size_gib": 1.42, "pool_end_avail_gib": 2.09, "max_total_num_tokens": 46611,
        "max_running_requests": 2049, "context_len": 131072, "cuda_graph_gib": 0.93}),
    ("qwen3-8b-sm100-tp1-reference-log-20260524.log", {
        "load_begin_avail_gib": 275.75, "load_end_avail_gib": 260.48, "weights_gib": 15.28, "kv_tokens": 1707904,
        "k_size_gib": 117.28, "v_size_gib": 117.28, "pool_end_avail_gib": 25.28, "max_total_num_tokens": 1707904,
        "max_running_requests": 4096, "context_len": 40960, "available_gpu_mem_gib": 21.24, "cuda_graph_gib": 2.92,
        "sampling_defaults": {"temperature": 0.6, "top_k": 20, "top_p": 0.95}}),
    ("qwen3-14b-rtx4090-tp4-kuiperinfer.log", {
        "load_end_avail_gib": 16.0, "weights_gib": 7.08, "kv_tokens": 298447, "k_size_gib": 5.69, "v_size_gib": 5.69,
        "max_total_num_tokens": 298447, "max_running_requests": 3730, "context_len": 40960, "available_gpu_mem_gib": 2.82}),
    ("qwen3-30b-a3b-fp8-h100-tp1-vllm-hybrid-tsk043.log", {
        "load_begin_avail_gib": 78.48, "load_end_avail_gib": 49.33, "weights_gib": 29.15, "kv_tokens": 392920,
        "k_size_gib": 17.99, "v_size_gib": 17.99, "pool_end_avail_gib": 12.7, "max_total_num_tokens": 392920,
        "max_running_requests": 4096, "context_len": 40960, "available_gpu_mem_gib": 10.54, "cuda_graph_gib": 2.05,
        "sampling_defaults": {"temperature": 0.6, "top_k": 20, "top_p": 0.95}}),
    ("qwen3.5-9b-rtx4090-tp2-exp001.log", {
        "load_begin_avail_gib": 22.93, "load_end_avail_gib": 14.08, "weights_gib": 8.85, "max_mamba_cache_size": 186,
        "conv_state_gib": 0.1, "ssm_state_gib": 4.38, "kv_tokens": 327310, "k_size_gib": 2.5, "v_size_gib": 2.5,
        "pool_end_avail_gib": 4.49, "max_total_num_tokens": 327310, "max_running_requests": 62, "context_len": 262144,
        "available_gpu_mem_gib": 3.79, "cuda_graph_gib": 0.26}),
])
def test_startup_logs_of_several_releases_and_model_kinds(name, expected):
    assert parse(name) == expected
