# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's start-time memory arithmetic for the simulated Qwen3.6-27B on a simulated GPU.

The same steps as SGLang (paths under sglang/srt/), one TP rank:

- memory_hook.py: handle_gpu_memory_settings - chunked prefill size, decode graph max bs and the default
  mem_fraction_static from the activation + graph reserve, times adjust_mem_fraction_for_vlm's factor;
- managers/scheduler.py: init_memory_pools - target and MTP draft weights are loaded before the pools are sized; the
  draft still holds its embed_tokens/lm_head copies (speculative/eagle_worker_v2.py: alloc_memory_pool);
- mem_cache/kv_cache_configurator.py: _profile_available_bytes (rest = free after load - pre-load free x
  (1 - mem_fraction_static) - the 100 MB VLM cache), _handle_max_mamba_cache (ratio split, joint solve with the draft's
  intermediate state, +1 padding slot), _calculate_mamba_ratio (3 + 2 tracking slots with extra_buffer and overlap),
  resolve_max_num_reqs;
- model_executor/pool_configurator.py: DefaultPoolConfigurator (KV cell of the 16 full-attention layers plus the MTP
  draft's layer).

Standard library only: the collection's plan (plugins/module_utils/memory_plan.py) does the same arithmetic for any
model; a unit test holds the two to the same numbers for this model.
"""
from __future__ import annotations

import math

MIB = 1 << 20
GIB = 1 << 30

DEFAULT_GPU_MEMORY_MIB = 49140           # an RTX A6000 (nvidia-smi memory.total)
DEFAULT_GPU_MEMORY_GB = DEFAULT_GPU_MEMORY_MIB / 1024.0
CUDA_CONTEXT_GB = 1.0                      # gone before the weights load (CUDA context, NCCL)

# Qwen3.6-27B (model card: 64 layers = 16 x (3 Gated DeltaNet + 1 gated attention), GDN heads V 48 / QK 16 of dim 128,
# attention Q 24 / KV 4 of dim 256, hidden 5120, vocabulary 248320, FFN 17408, one MTP layer), bf16 weights.
HIDDEN, VOCAB, FFN = 5120, 248320, 17408
FULL_LAYERS, LINEAR_LAYERS = 16, 48
KV_HEADS, HEAD_DIM = 4, 256
LINEAR_K_HEADS, LINEAR_V_HEADS, LINEAR_HEAD_DIM, CONV_KERNEL = 16, 48, 128, 4
WEIGHT_BYTES_TOTAL = 55551778816           # 27,775,889,408 parameters x 2 (the plan's estimate from the dimensions)
MTP_BYTES = 849346560
VISION = (27, 1152)                        # depth, hidden size of the vision tower
VLM_CACHE_SIZE_MB = 100
BASE_SLOTS = 3


def defaults_for_gpu(gpu_mib, tp_size):
    """memory_hook.py: handle_gpu_memory_settings - (chunked_prefill_size, decode cuda graph max_bs)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp_size < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def prefill_graph_sizes(max_tokens):
    """cuda_graph_hook.py: generate_prefill_cuda_graph_batch_sizes."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [size for size in sizes if size <= max_tokens]


def default_mem_fraction(gpu_mib, tp_size, chunked, decode_max_bs):
    """memory_hook.py: mem_fraction_static when unset, for this vision-language model."""
    reserved = 512 + max(chunked, 2048) * 1.5 + tp_size / 8.0 * 1024 + decode_max_bs * 2 + len(prefill_graph_sizes(chunked)) * 8
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    depth, hidden = VISION
    complexity = depth * hidden * hidden / float(24 * 1024 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3) * 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))


def state_bytes_per_request(tp_size, ssm_bytes=4):
    """mamba_utils.py: (conv, ssm) bytes of one state slot on one rank (bf16 conv state, fp32 SSM state)."""
    conv_dim = LINEAR_V_HEADS * LINEAR_HEAD_DIM + 2 * LINEAR_K_HEADS * LINEAR_HEAD_DIM
    conv = conv_dim // tp_size * (CONV_KERNEL - 1) * 2 * LINEAR_LAYERS
    ssm = LINEAR_V_HEADS // tp_size * LINEAR_HEAD_DIM * LINEAR_HEAD_DIM * ssm_bytes * LINEAR_LAYERS
    return conv, ssm


def plan(args, gpu_memory_gb, used_by_others_gb=0.0):
    """The pools SGLang would allocate on each rank, or why it would refuse to start.

    ``gpu_memory_gb``: the GPU's total; ``used_by_others_gb``: what other processes hold on it when the server starts
    (model_runner.py: pre_model_load_memory is the memory free then, the smallest over the TP ranks).

    ``args``: the resolved server args (tp_size, mem_fraction_static or None, max_running_requests,
    mamba_full_memory_ratio, speculative_algorithm, speculative_num_draft_tokens, max_mamba_cache_size or None,
    mamba_radix_cache_strategy, disable_overlap_schedule, cuda_graph_max_bs_decode or None, chunked_prefill_size or
    None, max_total_tokens, mamba_ssm_dtype). Returns a dict of figures; ``error`` is None or ("oom_mamba" |
    "weights" | "too_small", message).
    """
    tp = max(1, args["tp_size"])
    gpu_mib = gpu_memory_gb * 1024.0
    chunked, decode_max_bs = defaults_for_gpu(gpu_mib, tp)
    chunked = args.get("chunked_prefill_size") or chunked
    requested = args.get("max_running_requests")
    if args.get("cuda_graph_max_bs_decode") is not None:
        decode_max_bs = args["cuda_graph_max_bs_decode"]
    elif requested:
        decode_max_bs = min(decode_max_bs, requested)
    fraction = args.get("mem_fraction_static") or default_mem_fraction(gpu_mib, tp, chunked, decode_max_bs)
    speculative = bool(args.get("speculative_algorithm"))
    draft_tokens = (args.get("speculative_num_draft_tokens") or 4) if speculative else 0
    pre = (gpu_memory_gb - used_by_others_gb - CUDA_CONTEXT_GB) * GIB
    weights = (WEIGHT_BYTES_TOTAL - MTP_BYTES) / tp
    draft = (MTP_BYTES / tp + 2 * VOCAB * HIDDEN * 2 / tp) if speculative else 0
    available = pre - weights - draft
    rest = available - pre * (1 - fraction) - VLM_CACHE_SIZE_MB * MIB
    figures = {"gpu_memory_gb": gpu_memory_gb, "pre_gb": pre / GIB, "weights_gb": weights / GIB, "draft_gb": draft / GIB,
               "available_after_load_gb": available / GIB, "mem_fraction_static": fraction, "chunked_prefill_size": chunked,
               "cuda_graph_max_bs": decode_max_bs, "error": None, "mamba_size": 0, "kv_tokens": 0, "conv_gb": 0.0,
               "ssm_gb": 0.0, "kv_gb": 0.0, "intermediate_gb": 0.0, "max_running_requests": 0, "capped_to": None}
    if rest <= 0:
        minimum = 1 - available / pre if pre > 0 else 1.0
        figures["error"] = ("weights", "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=%s. "
                            "Raise --mem-fraction-static above %.3f (minimum viable = 1 - available/pre = %.4f). If using "
                            "speculative decoding, draft weights are now counted."
                            % (fraction, math.ceil(minimum * 1000) / 1000.0, minimum))
        return figures
    conv, ssm = state_bytes_per_request(tp, 2 if args.get("mamba_ssm_dtype") in ("bfloat16", "float16") else 4)
    per_req = conv + ssm
    strategy = args.get("mamba_radix_cache_strategy") or "extra_buffer"
    tracking = (1 if args.get("disable_overlap_schedule") else 2) if strategy in ("extra_buffer", "auto") else 0
    slots = BASE_SLOTS + tracking
    intermediate = 0
    if args.get("max_mamba_cache_size") is not None:
        size = args["max_mamba_cache_size"]
        if speculative:
            intermediate = per_req * (min(max(1, requested or 1), size // slots) + 1) * draft_tokens
    else:
        ratio = float(args.get("mamba_full_memory_ratio") or 0.9)
        budget = rest * ratio / (1 + ratio)
        if speculative:
            size = int((budget - per_req * (1 + draft_tokens)) // (per_req * (1 + draft_tokens / float(slots))))
            intermediate = per_req * (min(max(1, requested or 1), size // slots) + 1) * draft_tokens
        else:
            size = int((budget - per_req) // per_req)
    figures["mamba_size"] = size
    if size <= 0:
        figures["error"] = ("oom_mamba", (size, (rest - intermediate) / GIB, per_req / MIB))
        return figures
    rest -= intermediate + (size + 1) * per_req
    cell = KV_HEADS // tp * 2 * HEAD_DIM * FULL_LAYERS * 2 if KV_HEADS >= tp else 2 * HEAD_DIM * FULL_LAYERS * 2
    draft_cell = int(cell / FULL_LAYERS) if speculative else 0
    tokens = int(max(rest, 0) // (cell + draft_cell))
    if args.get("max_total_tokens"):
        tokens = min(tokens, int(args["max_total_tokens"]))
    running = min(max(1, requested or 48), tokens // 2, size // slots)
    if running <= 0:
        figures["error"] = ("too_small", "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                            "max_mamba_cache_size=%d, mamba_ratio=%d, resulting max_num_reqs=%d. Try: (1) reduce "
                            "--max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory."
                            % (size, slots, running))
    figures.update({"kv_tokens": tokens, "conv_gb": conv * (size + 1) / GIB, "ssm_gb": ssm * (size + 1) / GIB,
                    "kv_gb": tokens * cell / GIB, "draft_kv_gb": tokens * draft_cell / GIB,
                    "intermediate_gb": intermediate / GIB, "max_running_requests": running,
                    "capped_to": size // slots if requested and size // slots < requested else None,
                    "slots_per_request": slots,
                    "after_pools_gb": (available - intermediate - (size + 1) * per_req - tokens * (cell + draft_cell)) / GIB})
    return figures
