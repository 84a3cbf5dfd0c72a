# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_log: SGLang's startup pool lines and chat sampling defaults, from public logs (data/sglang_startup)."""

from __future__ import annotations

import pathlib

from ansible_collections.llmops.serving.plugins.module_utils import sglang_log

DATA = pathlib.Path(__file__).parent / "data" / "sglang_startup"


def parse(name):
    return sglang_log.parse_pool_lines((DATA / name).read_text().splitlines())


def test_h100_log_without_prefixes():
    assert parse("qwen3.8-27b-fp8-h100-tp1.log") == {
        "load_end_avail_gib": 50.01, "weights_gib": 28.47, "max_mamba_cache_size": 124, "conv_state_gib": 0.34,
        "ssm_state_gib": 17.58, "kv_tokens": 330323, "k_size_gib": 10.08, "v_size_gib": 10.08}


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
