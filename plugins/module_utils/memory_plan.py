# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Will an SGLang 0.5.23 server fit its GPUs? The memory arithmetic SGLang does at start, done before it starts.

Pure functions. Every step names the SGLang 0.5.23 function it mirrors (paths under ``sglang/srt/``):

1. Defaults that depend on the GPU: ``arg_groups/memory_hook.py: handle_gpu_memory_settings`` (chunked prefill
   size, decode CUDA graph max batch size, ``mem_fraction_static`` from the activation and graph reserve, reduced for
   vision-language models by ``adjust_mem_fraction_for_vlm``), the capture lists of
   ``arg_groups/cuda_graph_hook.py: generate_decode_cuda_graph_batch_sizes`` / ``generate_prefill_...``.
2. Weights: the target model, then the draft (MTP head), are loaded before the pools are sized
   (``managers/scheduler.py: init_memory_pools``); the draft still holds its own copies of ``embed_tokens`` and
   ``lm_head`` then, because ``speculative/eagle_worker_v2.py: alloc_memory_pool`` frees them only after the
   target's pools are sized (sgl-project/sglang#36452).
3. The budget: ``mem_cache/kv_cache_configurator.py: KVCacheConfigurator._profile_available_bytes`` - free memory
   after loading minus ``pre_model_load_memory * (1 - mem_fraction_static)`` minus the multimodal reservation
   (``mm_runtime_reservation_gb``: SGLANG_VLM_CACHE_SIZE_MB, 100 MB).
4. The state pool: ``KVCacheConfigurator._handle_max_mamba_cache`` (the ratio split, the joint solve with the
   speculative intermediate state, the +1 padding slot) with the per-request state size of
   ``configs/mamba_utils.py: BaseLinearStateParams.mamba_cache_per_req`` / ``Mamba2StateShape.create`` and the
   slots per request of ``KVCacheConfigurator._calculate_mamba_ratio`` (3, plus 2 tracking slots with
   ``extra_buffer`` and the overlap schedule, ``mem_cache/allocation_sizing.py: get_mamba_tracking_slots``).
5. The KV pool: ``model_executor/pool_configurator.py: DefaultPoolConfigurator`` (cell size of the full-attention
   layers, plus the EAGLE/MTP draft's layers, ``calculate_pool_sizes``), capped by ``--max-total-tokens``
   (``KVCacheConfigurator._apply_token_constraints``).
6. Concurrency: ``KVCacheConfigurator.resolve_max_num_reqs`` (the request cap, the token cap, the state-pool cap).

A plan *fits* when SGLang would start (none of the errors in steps 3-6 is raised), the configured
``max_running_requests`` is not cut by a pool (SGLang only logs a warning and serves fewer), and the KV pool holds
one request of the full context length. Less memory outside the static pools than the activation and CUDA graph
reserve of SGLang's own default (``mem_fraction_static`` above the default) is a warning: the default is
conservative, and public runs above it start. Sizes are per TP rank, in bytes unless a key says otherwise.
"""

from __future__ import annotations

import math

from ansible_collections.llmops.serving.plugins.module_utils.model_config import dtype_bytes

MIB = 1 << 20
GIB = 1 << 30

SGLANG_VERSION = "0.5.23"

# mem_cache/kv_cache_configurator.py (module constants).
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3
# environ.py: SGLANG_VLM_CACHE_SIZE_MB default.
VLM_CACHE_SIZE_MB = 100
# speculative_hook.py: _handle_eagle_family sets 48 when --max-running-requests is unset.
DEFAULT_SPEC_MAX_RUNNING_REQUESTS = 48
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

POOL_WEIGHTS = "weights"
POOL_RESERVE = "activation_reserve"
POOL_MAMBA = "mamba"
POOL_KV = "kv"

DEFAULT_CUDA_CONTEXT_MIB = 1024

FLAG_DEFAULTS = {
    "tp_size": 1,
    "mem_fraction_static": None,
    "max_running_requests": None,
    "mamba_full_memory_ratio": 0.9,
    "mamba_radix_cache_strategy": "auto",
    "mamba_ssm_dtype": None,
    "max_mamba_cache_size": None,
    "disable_radix_cache": False,
    "disable_overlap_schedule": False,
    "context_length": None,
    "kv_cache_dtype": "auto",
    "speculative_algorithm": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "chunked_prefill_size": None,
    "cuda_graph_max_bs": None,
    "disable_cuda_graph": False,
    "max_total_tokens": None,
    "page_size": 1,
    "language_only": False,
}


class PlanInputError(ValueError):
    """A flag or GPU figure the plan cannot work with."""


# ---- step 1: GPU-dependent defaults --------------------------------------------------------------------------------

def gpu_capacity_defaults(gpu_memory_mib, tp_size):
    """(chunked_prefill_size, decode CUDA graph max_bs) for a GPU size: memory_hook.py handle_gpu_memory_settings."""
    if gpu_memory_mib < 20 * 1024:
        return 2048, 8
    if gpu_memory_mib < 35 * 1024:
        return 4096, 48 if tp_size < 4 else 160
    if gpu_memory_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_memory_mib < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def decode_cuda_graph_batch_sizes(max_bs, speculative):
    """cuda_graph_hook.py: generate_decode_cuda_graph_batch_sizes (no padding flags)."""
    if speculative:
        sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
                 + list(range(272, max_bs + 1, 16)))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [size for size in sizes if size <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def prefill_cuda_graph_batch_sizes(max_tokens):
    """cuda_graph_hook.py: generate_prefill_cuda_graph_batch_sizes."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [size for size in sizes if size <= max_tokens]


def vlm_fraction_factor(vision):
    """memory_hook.py: adjust_mem_fraction_for_vlm - the factor a vision tower multiplies mem_fraction_static by."""
    if not vision:
        return 1.0
    complexity = vision.get("depth", 24) * vision.get("hidden_size", 1024) ** 2 / float(24 * 1024 ** 2)
    adjustment = max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))
    return 0.95 * adjustment


def reserve_mib(gpu_memory_mib, tp_size, chunked_prefill_size, decode_max_bs, prefill_graph_sizes, cuda_graph):
    """memory_hook.py: the activation + CUDA graph reserve (MiB) that the default mem_fraction_static leaves free."""
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + tp_size / 8.0 * 1024
    if cuda_graph:
        # reserve_for_graph_mb: decode graphs 2 MB per batch size slot, prefill graphs 8 MB per captured size.
        reserved += decode_max_bs * 2 + len(prefill_graph_sizes) * 8
    if gpu_memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


# ---- step 4: the state pool ------------------------------------------------------------------------------------------

def mamba_state_bytes_per_request(dims, tp_size, ssm_dtype=None, conv_dtype="bfloat16"):
    """(conv, ssm) bytes of one state slot on one TP rank: mamba_utils.py Mamba2StateShape.create + mamba_cache_per_req.

    GDN (qwen3_next.py: mamba2_cache_params): conv state (conv_dim / tp, kernel - 1) with conv_dim = value_dim +
    2 * n_groups * key_head_dim (n_groups padded up to the TP size), temporal state (value heads / tp, value head dim,
    key head dim) in the SSM dtype, for every linear-attention layer.
    """
    linear = dims["linear"]
    if not linear:
        return 0, 0
    groups = linear["num_key_heads"]
    if groups % tp_size:
        groups += tp_size - groups  # extra_groups_for_head_shards
    conv_dim = linear["num_value_heads"] * linear["value_head_dim"] + 2 * groups * linear["key_head_dim"]
    if conv_dim % tp_size or linear["num_value_heads"] % tp_size:
        raise PlanInputError("the linear-attention heads do not divide by tp_size=%d" % tp_size)
    layers = len(dims["linear_attention_layers"])
    conv = conv_dim // tp_size * (linear["conv_kernel"] - 1) * dtype_bytes(conv_dtype) * layers
    ssm_width = dtype_bytes(ssm_dtype or linear["ssm_dtype"], 4)
    ssm = linear["num_value_heads"] // tp_size * linear["value_head_dim"] * linear["key_head_dim"] * ssm_width * layers
    return conv, ssm


def mamba_slots_per_request(strategy, disable_overlap_schedule, disable_radix_cache):
    """kv_cache_configurator.py: _calculate_mamba_ratio (SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK off)."""
    if disable_radix_cache:
        return 1
    tracking = 0
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        # allocation_sizing.py: get_mamba_tracking_slots.
        tracking = 1 if strategy == "extra_buffer_lazy" or disable_overlap_schedule else 2
    return MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + tracking


def size_state_pool(rest_bytes, per_req, ratio, slots, requests, draft_tokens, explicit_size=None):
    """kv_cache_configurator.py: _handle_max_mamba_cache for one TP rank (no PP, no ReplaySSM, no fused draft).

    Returns ``(max_mamba_cache_size, intermediate_bytes, state_bytes, rest_after_bytes)``; the size is 0 or below
    where SGLang raises "Not enough GPU memory for hybrid (mamba/linear-attention) state cache".
    """
    speculative = bool(draft_tokens)
    intermediate = 0
    if explicit_size is not None:
        size = explicit_size
        if speculative:
            capped = min(max(1, requests), size // slots)
            intermediate = per_req * (capped + 1) * draft_tokens
    else:
        budget = rest_bytes * ratio / (1.0 + ratio)
        if speculative:
            size = int((budget - per_req * (1 + draft_tokens)) // (per_req * (1 + draft_tokens / float(slots))))
            capped = min(max(1, requests), size // slots)
            intermediate = per_req * (capped + 1) * draft_tokens
        else:
            size = int((budget - per_req) // per_req)
    state = (size + 1) * per_req if size > 0 else 0
    return size, intermediate, state, rest_bytes - intermediate - state


# ---- step 5: the KV pool ---------------------------------------------------------------------------------------------

def kv_cell_bytes(dims, tp_size, kv_dtype_bytes, draft_layers):
    """pool_configurator.py: DefaultPoolConfigurator._compute_cell_size for MHA/GQA full-attention layers, plus the
    EAGLE/MTP draft's ``int(cell * draft_layers / layers)``. Returns ``(target, draft)`` bytes per token."""
    layers = len(dims["full_attention_layers"])
    kv_heads = max(1, dims["num_kv_heads"] // tp_size)  # ModelConfig.get_num_kv_heads
    target = kv_heads * (dims["head_dim"] + dims["v_head_dim"]) * layers * kv_dtype_bytes
    draft = int(target * draft_layers / layers) if draft_layers and layers else 0
    return target, draft


# ---- the whole plan --------------------------------------------------------------------------------------------------

def resolve_flags(flags, dims, gpu_memory_mib):
    """The flags as SGLang resolves them for this model and GPU, with where each derived value came from."""
    unknown = sorted(set(flags or {}) - set(FLAG_DEFAULTS))
    if unknown:
        raise PlanInputError("unknown flag(s) for the plan: %s" % ", ".join(unknown))
    resolved = dict(FLAG_DEFAULTS)
    resolved.update({key: value for key, value in (flags or {}).items() if value is not None})
    tp = resolved["tp_size"]
    if not isinstance(tp, int) or tp < 1:
        raise PlanInputError("tp_size must be a positive integer")
    algorithm = resolved["speculative_algorithm"]
    speculative = bool(algorithm) and str(algorithm).upper() not in ("NONE",)
    if speculative and str(algorithm).upper() not in EAGLE_FAMILY:
        raise PlanInputError("the plan models the EAGLE family (NEXTN/EAGLE/EAGLE3/STANDALONE) only, not %s" % algorithm)
    if speculative:
        # speculative_hook.py: _handle_eagle_family - (3, 1, 4) by default; with topk 1, draft tokens = steps + 1.
        steps = resolved["speculative_num_steps"] or 3
        topk = resolved["speculative_eagle_topk"] or 1
        resolved["speculative_num_steps"], resolved["speculative_eagle_topk"] = steps, topk
        resolved["speculative_num_draft_tokens"] = steps + 1 if topk == 1 else (resolved["speculative_num_draft_tokens"] or 4)
    else:
        resolved["speculative_num_draft_tokens"] = None
    requested = flags.get("max_running_requests") if flags else None
    chunked, decode_max_bs = gpu_capacity_defaults(gpu_memory_mib, tp)
    if resolved["chunked_prefill_size"] is None:
        resolved["chunked_prefill_size"] = chunked
    if resolved["cuda_graph_max_bs"] is None:
        # handle_gpu_memory_settings runs before the speculative hook: only a user-set limit caps max_bs here.
        resolved["cuda_graph_max_bs"] = min(decode_max_bs, requested) if requested else decode_max_bs
    if resolved["max_running_requests"] is None and speculative:
        resolved["max_running_requests"] = DEFAULT_SPEC_MAX_RUNNING_REQUESTS
    if dims["linear"] and not resolved["disable_radix_cache"] and resolved["mamba_radix_cache_strategy"] == "auto":
        # model_hook.py: handle_mamba_radix_cache - auto is extra_buffer with the overlap schedule (or paging).
        resolved["mamba_radix_cache_strategy"] = "no_buffer" if resolved["disable_overlap_schedule"] else "extra_buffer"
    if resolved["context_length"] is None:
        resolved["context_length"] = dims["context_length"]
    return resolved, speculative


def _weights_per_rank(dims, weights, tp, speculative, language_only):
    vision = 0 if language_only else weights["vision"]
    target = (weights["language"] + vision) // tp
    draft = 0
    if speculative and dims["mtp_layers"]:
        # The MTP head's own weights, plus its not-yet-freed embed_tokens and lm_head copies (bf16, vocab-parallel).
        draft = weights["mtp"] // tp + 2 * (weights["embedding_bytes"] // tp)
    return target, draft


def plan_memory(dims, weights, gpu, flags, measured=None):
    """Size SGLang's pools for one TP rank and judge whether the configuration fits.

    ``dims``: model_config.parse_model_config; ``weights``: model_config.weight_bytes; ``gpu``: ``{"memory_mib":
    total memory of one GPU, "count": GPUs, "cuda_context_mib": memory taken before the weights load}``;
    ``flags``: server flags (keys of FLAG_DEFAULTS). ``measured`` (optional) replaces estimates with a log's figures:
    ``pre_model_load_bytes`` (free memory before loading) and ``available_after_load_bytes``.

    Returns a dict with ``fits``, ``binding`` (the first pool that does not fit, or the one closest to its limit),
    ``reasons``, ``resolved`` flags, ``breakdown`` (bytes per rank), ``pools`` (what SGLang would print) and
    ``sglang_version``. Raises PlanInputError for inputs the plan cannot use.
    """
    gpu_memory_mib = gpu.get("memory_mib")
    if not gpu_memory_mib or gpu_memory_mib <= 0:
        raise PlanInputError("the GPU memory size (memory_mib) is unknown")
    resolved, speculative = resolve_flags(flags or {}, dims, gpu_memory_mib)
    tp = resolved["tp_size"]
    count = gpu.get("count")
    if count is not None and count < tp:
        raise PlanInputError("tp_size=%d needs %d GPUs, %d present" % (tp, tp, count))
    draft_tokens = resolved["speculative_num_draft_tokens"] if speculative else 0
    cuda_graph = not resolved["disable_cuda_graph"]
    prefill_sizes = prefill_cuda_graph_batch_sizes(resolved["chunked_prefill_size"])
    reserve = reserve_mib(gpu_memory_mib, tp, resolved["chunked_prefill_size"], resolved["cuda_graph_max_bs"],
                          prefill_sizes, cuda_graph)
    vision = None if resolved["language_only"] else dims["vision"]
    default_fraction = round((gpu_memory_mib - reserve) / gpu_memory_mib, 3) * vlm_fraction_factor(vision)
    fraction = resolved["mem_fraction_static"]
    fraction_source = "given"
    if fraction is None:
        fraction, fraction_source = default_fraction, "SGLang default for this GPU and model"
    resolved["mem_fraction_static"] = fraction

    measured = measured or {}
    target_weights, draft_weights = _weights_per_rank(dims, weights, tp, speculative, resolved["language_only"])
    pre = measured.get("pre_model_load_bytes")
    if pre is None:
        pre = (gpu_memory_mib - gpu.get("cuda_context_mib", DEFAULT_CUDA_CONTEXT_MIB)) * MIB
    available = measured.get("available_after_load_bytes")
    if available is None:
        available = pre - target_weights - draft_weights
    else:
        target_weights, draft_weights = pre - available, 0
    slack = pre * (1 - fraction)
    mm_reservation = VLM_CACHE_SIZE_MB * MIB if vision else 0
    rest = available - slack - mm_reservation

    reasons = []
    warnings = []
    result_pools = {"max_mamba_cache_size": None, "max_total_num_tokens": 0, "max_running_requests": 0}
    breakdown = {
        "gpu_memory_bytes": int(gpu_memory_mib * MIB),
        "pre_model_load_bytes": int(pre),
        "target_weights_bytes": int(target_weights),
        "draft_weights_bytes": int(draft_weights),
        "available_after_load_bytes": int(available),
        "mem_fraction_static": round(fraction, 4),
        "mem_fraction_static_source": fraction_source,
        "default_mem_fraction_static": round(default_fraction, 4),
        "outside_static_bytes": int(slack),
        "activation_reserve_bytes": int(reserve * MIB),
        "multimodal_reservation_bytes": int(mm_reservation),
        "pool_budget_bytes": int(rest),
        "mamba_state_bytes": 0,
        "mamba_conv_bytes": 0,
        "mamba_ssm_bytes": 0,
        "mamba_intermediate_bytes": 0,
        "mamba_per_request_bytes": 0,
        "mamba_slots_per_request": 0,
        "kv_cell_bytes": 0,
        "kv_draft_cell_bytes": 0,
        "kv_bytes": 0,
        "free_after_pools_bytes": 0,
    }
    plan = {"sglang_version": SGLANG_VERSION, "resolved": resolved, "breakdown": breakdown, "pools": result_pools,
            "reasons": reasons, "warnings": warnings, "fits": False, "binding": POOL_WEIGHTS, "limits": {}}
    if rest <= 0:
        minimum = 1 - available / float(pre)
        reasons.append("weights: %.2f GiB of weights leave no room for pools under mem_fraction_static=%.3f; raise it "
                       "above %.3f (SGLang: 'Loaded weights leave no GPU memory for the KV cache')"
                       % ((target_weights + draft_weights) / GIB, fraction, math.ceil(minimum * 1000) / 1000.0))
        return plan

    requests = resolved["max_running_requests"]
    if dims["linear"]:
        conv, ssm = mamba_state_bytes_per_request(dims, tp, resolved["mamba_ssm_dtype"])
        per_req = conv + ssm
        slots = mamba_slots_per_request(resolved["mamba_radix_cache_strategy"], resolved["disable_overlap_schedule"],
                                        resolved["disable_radix_cache"])
        explicit = resolved["max_mamba_cache_size"]
        if explicit is None and resolved["disable_radix_cache"] and requests:
            explicit = max(1, requests)
        size, intermediate, state, rest = size_state_pool(rest, per_req, resolved["mamba_full_memory_ratio"], slots,
                                                          requests or 1, draft_tokens, explicit)
        breakdown.update({"mamba_per_request_bytes": per_req, "mamba_slots_per_request": slots,
                          "mamba_state_bytes": int(state), "mamba_intermediate_bytes": int(intermediate),
                          "mamba_conv_bytes": conv * (size + 1) if size > 0 else 0,
                          "mamba_ssm_bytes": ssm * (size + 1) if size > 0 else 0})
        result_pools["max_mamba_cache_size"] = size
        if size <= 0:
            plan["binding"] = POOL_MAMBA
            reasons.append("mamba: the state pool gets %d slots (pool budget %.2f GiB, %.2f MiB per slot); SGLang raises "
                           "'Not enough GPU memory for hybrid (mamba/linear-attention) state cache'"
                           % (size, breakdown["pool_budget_bytes"] / GIB, per_req / MIB))
            return plan

    target_cell, draft_cell = kv_cell_bytes(dims, tp, dtype_bytes(resolved["kv_cache_dtype"], dtype_bytes(
        dims["weight_dtype"] if dims["weight_dtype"] not in ("fp8",) else "bfloat16")), dims["mtp_layers"] if speculative else 0)
    cell = target_cell + draft_cell
    page = resolved["page_size"]
    tokens = int(max(rest, 0) // cell) // page * page if cell else 0
    if resolved["max_total_tokens"]:
        tokens = min(tokens, resolved["max_total_tokens"])
    breakdown.update({"kv_cell_bytes": target_cell, "kv_draft_cell_bytes": draft_cell, "kv_bytes": tokens * cell,
                      "free_after_pools_bytes": int(pre - target_weights - draft_weights - breakdown["mamba_state_bytes"]
                                                    - breakdown["mamba_intermediate_bytes"] - tokens * cell)})
    result_pools["max_total_num_tokens"] = tokens
    if tokens <= 0:
        plan["binding"] = POOL_KV
        reasons.append("kv: no token fits the KV pool (SGLang: 'Not enough memory. Please try to increase "
                       "--mem-fraction-static')")
        return plan

    # resolve_max_num_reqs: the request cap, the token cap (half the pool), the state-pool cap.
    estimated = max(min(int(tokens / float(resolved["context_length"]) * 512), 4096), 2048)
    running = min(max(1, requests), tokens // 2) if requests else min(estimated, tokens // 2)
    mamba_cap = None
    if dims["linear"]:
        mamba_cap = result_pools["max_mamba_cache_size"] // breakdown["mamba_slots_per_request"]
        running = min(running, mamba_cap)
    result_pools["max_running_requests"] = running
    if running <= 0:
        plan["binding"] = POOL_MAMBA
        reasons.append("mamba: %d state slots serve no request at %d slots per request (SGLang: 'Hybrid "
                       "(mamba/linear-attention) state cache is too small to serve any requests')"
                       % (int(result_pools["max_mamba_cache_size"]), breakdown["mamba_slots_per_request"]))
        return plan

    # The running server: fits only without a silent cut and with room for graphs, activations and one long request.
    limits = {
        POOL_RESERVE: slack / float(reserve * MIB) if reserve else float("inf"),
        POOL_KV: tokens / float(resolved["context_length"]),
    }
    if requests:
        limits[POOL_MAMBA] = (mamba_cap / float(requests)) if mamba_cap is not None else float("inf")
        limits["kv_requests"] = (tokens // 2) / float(requests)
    plan["limits"] = {key: round(value, 4) for key, value in limits.items() if value != float("inf")}
    if slack < reserve * MIB:
        # A heuristic, not a limit: SGLang's default is conservative, and public runs above it start fine.
        warnings.append("activation_reserve: %.2f GiB stay outside the static pools, SGLang's default keeps %.2f GiB for "
                        "activations and CUDA graphs (mem_fraction_static %.3f > default %.3f); CUDA graph capture or a "
                        "long prefill may run out of memory" % (slack / GIB, reserve / 1024.0, fraction, default_fraction))
    if requests and mamba_cap is not None and mamba_cap < requests:
        reasons.append("mamba: the state pool (%d slots, %d per request) serves %d of max_running_requests=%d; SGLang "
                       "would cap it ('max_running_requests is capped to %d by the mamba state cache')"
                       % (int(result_pools["max_mamba_cache_size"]), breakdown["mamba_slots_per_request"], mamba_cap,
                          int(requests), mamba_cap))
    if requests and tokens // 2 < requests:
        reasons.append("kv: %d tokens serve %d of max_running_requests=%d" % (tokens, tokens // 2, int(requests)))
    if tokens < resolved["context_length"]:
        reasons.append("kv: %d tokens cannot hold one request of context_length=%d"
                       % (tokens, int(resolved["context_length"])))
    plan["fits"] = not reasons
    order = [POOL_MAMBA, POOL_KV]
    failing = [name for name in order if any(reason.startswith(name + ":") for reason in reasons)]
    if failing:
        plan["binding"] = failing[0]
    else:
        tight = {name: value for name, value in limits.items() if name in (POOL_RESERVE, POOL_MAMBA, POOL_KV)}
        plan["binding"] = min(tight, key=tight.get)
    return plan


# ---- suggestions -----------------------------------------------------------------------------------------------------

def _replan(dims, weights, gpu, flags, measured, **changes):
    changed = dict(flags)
    changed.update(changes)
    return plan_memory(dims, weights, gpu, changed, measured)


def _serves_requests(plan):
    """True when SGLang starts and no pool cuts max_running_requests (the context criterion aside)."""
    if plan["pools"]["max_running_requests"] <= 0:
        return False
    return not any(reason.startswith(prefix) for reason in plan["reasons"]
                   for prefix in ("weights:", "mamba:", "kv: %d tokens serve" % plan["pools"]["max_total_num_tokens"]))


def suggest(dims, weights, gpu, flags, measured=None, plan=None):
    """What would make a configuration fit, each knob tried with the other flags unchanged.

    Returns ``max_running_requests`` (the largest the pools serve), ``mamba_full_memory_ratio`` (the smallest ratio,
    in steps of 0.05, at which the state pool serves every configured request), ``mamba_ssm_dtype`` (``bfloat16``
    when halving the SSM state lets the pools serve every request), ``context_length`` (the largest context the KV
    pool holds with the suggested max_running_requests) and ``fits_with``: a set of changes that together fit
    (checked by planning it), or None.
    """
    plan = plan or plan_memory(dims, weights, gpu, flags, measured)
    suggestions = {"max_running_requests": None, "mamba_full_memory_ratio": None, "mamba_ssm_dtype": None,
                   "context_length": None, "fits_with": None}
    if plan["fits"]:
        return suggestions
    requested = plan["resolved"]["max_running_requests"] or 1
    for candidate in range(requested, 0, -1):
        if _serves_requests(_replan(dims, weights, gpu, flags, measured, max_running_requests=candidate)):
            suggestions["max_running_requests"] = candidate
            break
    if dims["linear"]:
        for hundredths in range(5, 2001, 5):
            ratio = hundredths / 100.0
            if _serves_requests(_replan(dims, weights, gpu, flags, measured, mamba_full_memory_ratio=ratio)):
                suggestions["mamba_full_memory_ratio"] = ratio
                break
        if dtype_bytes(flags.get("mamba_ssm_dtype") or dims["linear"]["ssm_dtype"], 4) > 2 and _serves_requests(
                _replan(dims, weights, gpu, flags, measured, mamba_ssm_dtype="bfloat16")):
            suggestions["mamba_ssm_dtype"] = "bfloat16"
    changes = {}
    if suggestions["max_running_requests"] is not None and suggestions["max_running_requests"] != requested:
        changes["max_running_requests"] = suggestions["max_running_requests"]
    base = _replan(dims, weights, gpu, flags, measured, **changes)
    tokens = base["pools"]["max_total_num_tokens"]
    if tokens and tokens < base["resolved"]["context_length"]:
        suggestions["context_length"] = tokens
        changes["context_length"] = tokens
    if changes and _replan(dims, weights, gpu, flags, measured, **changes)["fits"]:
        suggestions["fits_with"] = changes
    return suggestions


def summary_line(plan, suggestions=None):
    """One sentence: the verdict, the pools per rank and, when it does not fit, the first reason and the suggestions."""
    pools, breakdown = plan["pools"], plan["breakdown"]
    text = "%s: weights %.2f GiB + draft %.2f GiB, mamba %s slots (%.2f GiB + %.2f GiB intermediate), KV %d tokens " \
           "(%.2f GiB), max_running_requests %d, mem_fraction_static %.3f" % (
               "fits" if plan["fits"] else "does not fit", breakdown["target_weights_bytes"] / GIB,
               breakdown["draft_weights_bytes"] / GIB, pools["max_mamba_cache_size"], breakdown["mamba_state_bytes"] / GIB,
               breakdown["mamba_intermediate_bytes"] / GIB, pools["max_total_num_tokens"], breakdown["kv_bytes"] / GIB,
               pools["max_running_requests"], breakdown["mem_fraction_static"])
    if not plan["fits"]:
        text += "; binding %s: %s" % (plan["binding"], plan["reasons"][0])
        together = (suggestions or {}).get("fits_with")
        if together:
            text += "; fits with " + ", ".join("%s=%s" % item for item in sorted(together.items()))
        single = ["%s=%s" % (key, value) for key, value in sorted((suggestions or {}).items())
                  if value is not None and key not in ("fits_with", "context_length")]
        if single:
            text += "; the state pool serves every request with " + " or ".join(single)
    return text


# ---- plan vs the running server --------------------------------------------------------------------------------------

def compare_with_startup(plan, actual):
    """The prediction error per pool: the plan's pools against the sizes SGLang printed at start.

    ``actual``: sglang_log.parse_pool_lines. Returns ``{pool: {"planned", "actual", "error", "relative_error"}}`` for
    ``max_mamba_cache_size``, ``max_total_num_tokens``, ``max_running_requests`` and ``available_gpu_mem_gib`` where
    both sides have a value; ``relative_error`` is (planned - actual) / actual, None when actual is 0.
    """
    planned_free = plan["breakdown"].get("free_after_pools_bytes")
    planned = {
        "max_mamba_cache_size": plan["pools"].get("max_mamba_cache_size"),
        "max_total_num_tokens": plan["pools"].get("max_total_num_tokens"),
        "max_running_requests": plan["pools"].get("max_running_requests"),
        "available_gpu_mem_gib": None,
    }
    comparison = {}
    for key, planned_value in planned.items():
        actual_value = (actual or {}).get(key)
        if key == "max_total_num_tokens" and actual_value is None:
            actual_value = (actual or {}).get("kv_tokens")
        if key == "max_running_requests" and (actual or {}).get("capped_running_requests") is not None:
            actual_value = min(actual_value or actual["capped_running_requests"], actual["capped_running_requests"])
        if key == "available_gpu_mem_gib" and actual_value is not None and planned_free is not None:
            # After the pools SGLang still captures graphs; the plan's figure is the memory left after the pools.
            planned_value = round(planned_free / GIB, 2)
        if planned_value is None or actual_value is None:
            continue
        error = planned_value - actual_value
        comparison[key] = {"planned": planned_value, "actual": actual_value,
                           "error": round(error, 4) if isinstance(error, float) else error,
                           "relative_error": round(error / float(actual_value), 4) if actual_value else None}
    return comparison
