# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Will an SGLang server fit its GPUs? The memory arithmetic SGLang does at start, done before it starts.

Pure functions. Two releases' arithmetic is followed step by step below, SGLang 0.5.23's (the default) and 0.5.9's;
every other release from 0.4.0 on is planned with its own behaviours, each of which changed in one release
(sglang_releases: the request pool, what caps an explicit max_running_requests, how the state pool shares its budget
with the draft's intermediate state, the tracking slots, where the draft loads, the multimodal reservation, the GPU
defaults and the default mem_fraction_static). Every step names the SGLang function it mirrors (paths under
``sglang/srt/``).

SGLang 0.5.23:

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

SGLang 0.5.9 (``model_executor/model_runner.py`` and ``model_executor/model_runner_kv_cache_mixin.py`` of that
release, read in its wheel; a public backport quotes them too: "BACKPORT: from sglang v0.5.9
model_runner_kv_cache_mixin.py"); the per-request state size is 0.5.23's, step 1 is 0.5.3's (sglang_releases):

2. Weights: only the target is loaded before the pools are sized; the draft worker loads after them, so its weights
   come out of the memory outside the static pools (a warning when they and the activation reserve exceed it).
3. The budget: ``ModelRunner.profile_max_num_token`` - free memory after the target's load minus
   ``pre_model_load_memory * (1 - mem_fraction_static)``; no multimodal reservation.
4. The state pool: ``handle_max_mamba_cache`` - the draft's intermediate state (``mamba_cache_per_req *
   max_running_requests * speculative_num_draft_tokens``) comes off the budget first, then the ratio split, no
   padding slot. It raises nothing of its own: a pool of no slots cannot be allocated and the server does not start.
5. The KV pool: ``profile_max_num_token`` / ``init_memory_pool`` - the target's full-attention layers only (the
   draft has a KV pool of its own), ``--max-total-tokens``, page rounding; no token raises "Not enough memory.
   Please try to increase --mem-fraction-static.".
6. Concurrency: ``init_memory_pool`` - ``max_running_requests`` (or the estimate from the KV pool, capped at half of
   it) capped by the state pool: 1 slot per request without the radix cache, 3 + 1 with ``extra_buffer`` and
   speculative decoding, 3 + 2 with ``extra_buffer`` otherwise, 3 else; an explicit value is not capped by the KV
   pool.

0.5.9 also resolves the ``auto`` cache strategy to ``no_buffer``, caps an explicit max_running_requests by nothing but
the state pool, has the GPU defaults of 0.5.3 and keeps 2 GiB more outside the pools for a speculative draft. The
releases between changed this in steps (0.5.10, 0.5.13, 0.5.14, 0.5.17, 0.5.18, 0.5.20, 0.5.22): sglang_releases.

Two verdicts. A plan *fits* when SGLang would start: ``reasons`` names what stops it (the weights leave no room, a
state pool of no slots, a KV pool of no tokens, no request served). A plan that fits *serves what was requested*
when it also has no ``shortfalls``: no pool cuts the configured ``max_running_requests`` (SGLang only logs a warning
and serves fewer) and the KV pool holds one request of the full context length. Less memory outside the static pools
than the activation and CUDA graph reserve of SGLang's own default (``mem_fraction_static`` above the default) is a
warning: the default is conservative, and public runs above it start. Sizes are per TP rank, in bytes unless a key
says otherwise.
"""

from __future__ import annotations

import math

from ansible_collections.llmops.serving.plugins.module_utils import sglang_releases
from ansible_collections.llmops.serving.plugins.module_utils.model_config import dtype_bytes

MIB = 1 << 20
GIB = 1 << 30

# The default arithmetic: the release this collection installs. Any release from sglang_releases.OLDEST on is planned
# with its behaviours (sglang_releases.behaviours).
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

# The shortfall that does not cut max_running_requests: one request of the full context.
CONTEXT_SHORTFALL = "cannot hold one request of context_length"

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
    "ep_size": 1,
    "ep_num_redundant_experts": 0,
}


class PlanInputError(ValueError):
    """A flag or GPU figure the plan cannot work with."""


# The type of each flag's value: inventories and `-e name=value` hand numbers and booleans over as strings.
FLAG_TYPES = {
    "tp_size": int, "mem_fraction_static": float, "max_running_requests": int, "mamba_full_memory_ratio": float,
    "mamba_radix_cache_strategy": str, "mamba_ssm_dtype": str, "max_mamba_cache_size": int,
    "disable_radix_cache": bool, "disable_overlap_schedule": bool, "context_length": int, "kv_cache_dtype": str,
    "speculative_algorithm": str, "speculative_num_steps": int, "speculative_eagle_topk": int,
    "speculative_num_draft_tokens": int, "chunked_prefill_size": int, "cuda_graph_max_bs": int,
    "disable_cuda_graph": bool, "max_total_tokens": int, "page_size": int, "language_only": bool, "ep_size": int,
    "ep_num_redundant_experts": int,
}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def coerce_flags(flags):
    """``flags`` with each value converted to its flag's type (None stays None); PlanInputError names a bad one."""
    coerced = {}
    for name, value in (flags or {}).items():
        kind = FLAG_TYPES.get(name)
        if kind is None:
            raise PlanInputError("unknown flag(s) for the plan: %s" % name)
        if value is None or (isinstance(value, str) and value.strip() == "" and kind is not str):
            coerced[name] = None
            continue
        try:
            if kind is bool:
                if isinstance(value, bool):
                    coerced[name] = value
                elif str(value).strip().lower() in _TRUE + _FALSE:
                    coerced[name] = str(value).strip().lower() in _TRUE
                else:
                    raise ValueError(value)
            elif kind is int:
                if isinstance(value, bool) or float(value) != int(float(value)):
                    raise ValueError(value)
                coerced[name] = int(float(value))
            elif kind is float:
                if isinstance(value, bool):
                    raise ValueError(value)
                coerced[name] = float(value)
            else:
                coerced[name] = str(value)
        except (TypeError, ValueError):
            raise PlanInputError("flag %s must be %s, not %r" % (name, kind.__name__, value)) from None
    return coerced


# ---- step 1: GPU-dependent defaults --------------------------------------------------------------------------------

def gpu_capacity_defaults(gpu_memory_mib, tp_size, bands="0.5.20", small_gpu_graph_bs=24):
    """(chunked_prefill_size, decode CUDA graph max_bs) for a GPU size: memory_hook.py handle_gpu_memory_settings.
    ``bands``: the 0.5.20 table (the default) or the 0.5.3 one, whose 20-35 GiB band is 2048 and
    ``small_gpu_graph_bs`` (24, 16 before 0.5.5) below TP 4, 80 from it."""
    if gpu_memory_mib < 20 * 1024:
        return 2048, 8
    if gpu_memory_mib < 35 * 1024:
        if bands == "0.5.3":
            return 2048, small_gpu_graph_bs if tp_size < 4 else 80
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


def reserve_parts_mib(gpu_memory_mib, tp_size, chunked_prefill_size, decode_max_bs, prefill_graph_sizes, cuda_graph,
                      speculative_mib=0):
    """memory_hook.py: the reserve (MiB) that the default mem_fraction_static leaves free, in its two parts:
    ``(activation, cuda_graph)``. Activations: 512 MB, 1.5 MB per token of the chunked prefill (at least 2048), 128 MB
    per TP rank for communication buffers; the 10 GB floor of GPUs above 60 GB is counted there. CUDA graphs
    (reserve_for_graph_mb): 2 MB per decode batch size up to ``cuda_graph_max_bs``, 8 MB per captured prefill size;
    none with ``--disable-cuda-graph``. ``speculative_mib``: the draft's reserve of releases before 0.5.14, added
    after the floor, counted with the activations."""
    activation = 512 + max(chunked_prefill_size, 2048) * 1.5 + tp_size / 8.0 * 1024
    graphs = decode_max_bs * 2 + len(prefill_graph_sizes) * 8 if cuda_graph else 0
    if gpu_memory_mib > 60 * 1024 and activation + graphs < 10 * 1024:
        activation = 10 * 1024 - graphs
    return activation + speculative_mib, graphs


def reserve_mib(gpu_memory_mib, tp_size, chunked_prefill_size, decode_max_bs, prefill_graph_sizes, cuda_graph):
    """memory_hook.py: the activation + CUDA graph reserve (MiB) that the default mem_fraction_static leaves free."""
    return sum(reserve_parts_mib(gpu_memory_mib, tp_size, chunked_prefill_size, decode_max_bs, prefill_graph_sizes,
                                 cuda_graph))


def largest_graph_batch_size(room_mib, activation_mib, prefill_graph_sizes, max_bs):
    """The largest cuda_graph_max_bs (at most ``max_bs``) whose graph reserve fits ``room_mib`` next to the
    activations, or 0 when even batch size 1 does not (then only --disable-cuda-graph or more room helps)."""
    left = room_mib - activation_mib - len(prefill_graph_sizes) * 8
    return int(max(0, min(max_bs, left // 2)))


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


def size_state_pool(rest_bytes, per_req, ratio, slots, requests, draft_tokens, explicit_size=None, padded=True):
    """kv_cache_configurator.py: _handle_max_mamba_cache for one TP rank (no PP, no ReplaySSM, no fused draft).

    The joint solve of the state pool with the draft's intermediate state (0.5.13); ``padded``: the pool's padding
    slot and the intermediate state's extra row counted in the budget (0.5.17, sgl-project/sglang#32184) - before,
    ``handle_max_mamba_cache`` budgeted ``max_mamba_cache_size`` slots and ``capped_reqs`` rows. Returns
    ``(max_mamba_cache_size, intermediate_bytes, state_bytes, rest_after_bytes)``; the size is 0 or below where SGLang
    raises "Not enough GPU memory for hybrid (mamba/linear-attention) state cache".
    """
    speculative = bool(draft_tokens)
    pad = 1 if padded else 0
    intermediate = 0
    if explicit_size is not None:
        size = explicit_size
        if speculative:
            capped = min(max(1, requests), size // slots)
            intermediate = per_req * (capped + pad) * draft_tokens
    else:
        budget = rest_bytes * ratio / (1.0 + ratio)
        if speculative:
            size = int((budget - pad * per_req * (1 + draft_tokens)) // (per_req * (1 + draft_tokens / float(slots))))
            capped = min(max(1, requests), size // slots)
            intermediate = per_req * (capped + pad) * draft_tokens
        else:
            size = int((budget - pad * per_req) // per_req)
    state = (size + pad) * per_req if size > 0 else 0
    return size, intermediate, state, rest_bytes - intermediate - state


def mamba_slots_per_request_0_5_9(strategy, disable_radix_cache, speculative):
    """SGLang 0.5.9 model_runner.py: init_memory_pool's ratio - 1 slot without the radix cache, else 3 plus 1
    (MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_OVERLAP, speculative decoding) or 2 (..._OVERLAP) with ``extra_buffer``."""
    if disable_radix_cache:
        return 1
    additional = 0
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        additional = 1 if speculative else 2
    return MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + additional


def size_state_pool_0_5_9(rest_bytes, per_req, ratio, requests, draft_tokens, explicit_size=None):
    """SGLang 0.5.9 model_runner_kv_cache_mixin.py: handle_max_mamba_cache for one TP rank (no DP attention).

    The draft's intermediate state is sized from ``max_running_requests`` and taken off the budget before the ratio
    split; the pool has no padding slot. Returns ``(max_mamba_cache_size, intermediate_bytes, state_bytes,
    rest_after_bytes)``; a size of 0 or below is a pool SGLang 0.5.9 cannot allocate.
    """
    intermediate = per_req * requests * draft_tokens if draft_tokens else 0
    budget = rest_bytes - intermediate
    if explicit_size is not None:
        size = explicit_size
    else:
        size = int(budget * ratio / (1.0 + ratio) // per_req)
    state = size * per_req if size > 0 else 0
    return size, intermediate, state, budget - state


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

def resolve_flags(flags, dims, gpu_memory_mib, release=None):
    """The flags as SGLang resolves them for this model and GPU (and release: sglang_releases.behaviours, the
    newest known when None)."""
    release = release or sglang_releases.behaviours(SGLANG_VERSION)
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
    chunked, decode_max_bs = gpu_capacity_defaults(gpu_memory_mib, tp, release["gpu_bands"], release["small_gpu_graph_bs"])
    if resolved["chunked_prefill_size"] is None:
        resolved["chunked_prefill_size"] = chunked
    if resolved["cuda_graph_max_bs"] is None:
        # 0.5.22: a default max_bs is capped at --max-running-requests. handle_gpu_memory_settings runs before the
        # speculative hook: only a user-set limit caps it.
        capped = requested and release["graph_bs_capped_by_requests"]
        resolved["cuda_graph_max_bs"] = min(decode_max_bs, requested) if capped else decode_max_bs
    if resolved["max_running_requests"] is None and speculative:
        resolved["max_running_requests"] = DEFAULT_SPEC_MAX_RUNNING_REQUESTS
    if dims["linear"] and not resolved["disable_radix_cache"] and resolved["mamba_radix_cache_strategy"] == "auto":
        # model_hook.py: handle_mamba_radix_cache - auto is extra_buffer with the overlap schedule (or paging) since
        # 0.5.14; no_buffer before (server_args.py: "TODO: when extra_buffer is more verified ...").
        auto_extra = release["auto_strategy"] == "extra_buffer" and not resolved["disable_overlap_schedule"]
        resolved["mamba_radix_cache_strategy"] = "extra_buffer" if auto_extra else "no_buffer"
    if resolved["context_length"] is None:
        resolved["context_length"] = dims["context_length"]
    return resolved, speculative


def _weights_per_rank(dims, weights, tp, speculative, language_only, redundant_experts=0):
    """(target, draft) weight bytes on one TP rank. Tensor parallelism splits every linear layer except what it
    replicates: the MoE routers (whole on every rank) and the K/V projections of KV heads fewer than the ranks
    (``max(1, kv_heads // tp)`` heads a rank, ModelConfig.get_num_kv_heads). Expert parallelism splits the experts
    across the same ranks, which leaves a rank the same share; ``--ep-num-redundant-experts`` adds copies."""
    vision = 0 if language_only else weights["vision"]
    router, kv = weights.get("router", 0), weights.get("kv_proj", 0)
    kv_heads = dims["num_kv_heads"]
    experts = weights.get("experts", 0)
    extra_experts = experts * redundant_experts / float(dims["moe"]["num_experts"]) if dims.get("moe") else 0
    target = int((weights["language"] + vision - router - kv + extra_experts) / tp + router
                 + kv * max(1, kv_heads // tp) / float(kv_heads))
    draft = 0
    if speculative and dims["mtp_layers"]:
        # The MTP head's own weights, plus its not-yet-freed embed_tokens and lm_head copies (bf16, vocab-parallel).
        draft = weights["mtp"] // tp + 2 * (weights["embedding_bytes"] // tp)
    return target, draft


def plan_memory(dims, weights, gpu, flags, measured=None, arithmetic=SGLANG_VERSION):
    """Size SGLang's pools for one TP rank and judge whether the server starts and serves what was requested.

    ``dims``: model_config.parse_model_config; ``weights``: model_config.weight_bytes; ``gpu``: ``{"memory_mib":
    total memory of one GPU, "count": GPUs, "cuda_context_mib": memory taken before the weights load, "co_tenants":
    other servers on the same GPUs, each ``{"name", "mem_fraction_static"}`` (None: SGLang's default for this GPU)}``;
    ``flags``: server flags (keys of FLAG_DEFAULTS). ``measured`` (optional) replaces estimates with a log's figures:
    ``pre_model_load_bytes`` (free memory before loading) and ``available_after_load_bytes``. ``arithmetic``: the SGLang
    release whose sizing is followed (0.4.0 or later; sglang_releases says what changed when).

    Returns a dict with ``fits`` (SGLang would start), ``reasons`` (what stops it), ``shortfalls`` (what a started
    server cuts from the request), ``serves_requested`` (fits and no shortfall), ``binding`` (the first pool in
    reasons, else in shortfalls, else the one closest to its limit), ``warnings``, ``limits``, ``resolved`` flags,
    ``breakdown`` (bytes per rank), ``pools`` (what SGLang would print), ``sglang_version`` (the release) and
    ``release`` (its behaviours the plan used).
    Raises PlanInputError for inputs the plan cannot use.

    Co-tenants: SGLang sizes its static pools from the memory FREE when it starts (pre_model_load_memory), so a server
    that starts while another holds its static share of the GPU (mem_fraction_static of what was free for it) gets
    that much less; the plan assumes the co-tenants run, and a refusal names them first.
    """
    plan = _plan_memory(dims, weights, gpu, flags, measured, arithmetic)
    held = plan["breakdown"]["co_tenant_bytes"]
    if held:
        names = ", ".join("%s (mem_fraction_static %s)" % (tenant.get("name"), tenant.get("mem_fraction_static") or "default")
                          for tenant in gpu.get("co_tenants") or [])
        said = ("shared GPUs: %s hold about %.2f GiB of each GPU, leaving %.2f GiB of %.2f GiB when this server starts"
                % (names, held / GIB, plan["breakdown"]["pre_model_load_bytes"] / GIB, plan["breakdown"]["gpu_memory_bytes"] / GIB))
        if not plan["fits"]:
            plan["reasons"].insert(0, said)
        else:
            plan["warnings"].insert(0, said)
    return plan


def _plan_memory(dims, weights, gpu, flags, measured, arithmetic):
    try:
        release = sglang_releases.behaviours(arithmetic, hybrid=bool(dims["linear"]))
    except sglang_releases.UnknownRelease as exc:
        raise PlanInputError(str(exc)) from None
    # The draft loads after the pools and has its own KV pool (SGLang before 0.5.14).
    late_draft = not release["draft_before_pools"]
    said = "SGLang %s" % release["release"]
    gpu_memory_mib = gpu.get("memory_mib")
    if not gpu_memory_mib or gpu_memory_mib <= 0:
        raise PlanInputError("the GPU memory size (memory_mib) is unknown")
    resolved, speculative = resolve_flags(flags or {}, dims, gpu_memory_mib, release)
    tp = resolved["tp_size"]
    count = gpu.get("count")
    if count is not None and count < tp:
        raise PlanInputError("tp_size=%d needs %d GPUs, %d present" % (tp, tp, count))
    if str(gpu.get("platform") or "cuda").lower() != "cuda":
        raise PlanInputError("the plan follows SGLang on NVIDIA GPUs (CUDA); %s builds size their pools differently and "
                             "are not modelled" % gpu["platform"])
    ep, redundant = resolved["ep_size"], resolved["ep_num_redundant_experts"]
    if ep < 1 or tp % ep or redundant < 0:
        raise PlanInputError("ep_size=%d must divide tp_size=%d (and ep_num_redundant_experts=%d be 0 or more)"
                             % (ep, tp, redundant))
    if (ep > 1 or redundant) and not dims.get("moe"):
        raise PlanInputError("ep_size and ep_num_redundant_experts need a mixture-of-experts model")
    if dims.get("moe") and (dims["moe"]["num_experts"] + redundant) % ep:
        raise PlanInputError("%d experts (+%d redundant) do not divide by ep_size=%d"
                             % (dims["moe"]["num_experts"], redundant, ep))
    draft_tokens = resolved["speculative_num_draft_tokens"] if speculative else 0
    cuda_graph = not resolved["disable_cuda_graph"]
    # Prefill CUDA graphs are captured, and reserved for, by default since 0.5.10.
    prefill_sizes = prefill_cuda_graph_batch_sizes(resolved["chunked_prefill_size"]) if release["prefill_graph_reserve"] else []
    spec_reserve = 0
    if speculative and release["speculative_reserve_mib"]:
        spec_reserve = 6144 if str(resolved["speculative_algorithm"]).upper() == "STANDALONE" else release["speculative_reserve_mib"]
    activation_mib, graph_mib = reserve_parts_mib(
        gpu_memory_mib, tp, resolved["chunked_prefill_size"], resolved["cuda_graph_max_bs"],
        prefill_sizes, cuda_graph, spec_reserve)
    reserve = activation_mib + graph_mib
    vision = None if resolved["language_only"] else dims["vision"]
    default_fraction = round((gpu_memory_mib - reserve) / gpu_memory_mib, 3) * vlm_fraction_factor(vision)
    fraction = resolved["mem_fraction_static"]
    fraction_source = "given"
    if fraction is None:
        if not release["default_fraction"]:
            raise PlanInputError("%s picks mem_fraction_static from a table the plan does not model (it models the "
                                 "reserve formula of 0.5.3 and later): give mem_fraction_static" % said)
        fraction, fraction_source = default_fraction, "SGLang default for this GPU and model"
    resolved["mem_fraction_static"] = fraction

    measured = measured or {}
    target_weights, draft_weights = _weights_per_rank(dims, weights, tp, speculative, resolved["language_only"], redundant)
    pre = measured.get("pre_model_load_bytes")
    held = 0
    if pre is None:
        free = (gpu_memory_mib - gpu.get("cuda_context_mib", DEFAULT_CUDA_CONTEXT_MIB)) * MIB
        # Each co-tenant keeps its static share of what was free when it started (this server's view is worst-case:
        # the others started first).
        for tenant in gpu.get("co_tenants") or []:
            held += float(tenant.get("mem_fraction_static") or default_fraction) * free
        pre = free - held
    available = measured.get("available_after_load_bytes")
    if available is None:
        # 0.5.9 loads the draft after the target's pools are sized: its weights are not in the budget.
        available = pre - target_weights - (0 if late_draft else draft_weights)
    elif late_draft:
        target_weights = pre - available
    else:
        target_weights, draft_weights = pre - available, 0
    slack = pre * (1 - fraction)
    mm_reservation = VLM_CACHE_SIZE_MB * MIB if vision and release["multimodal_reservation"] else 0
    rest = available - slack - mm_reservation

    reasons = []
    shortfalls = []
    warnings = []
    result_pools = {"max_mamba_cache_size": None, "max_total_num_tokens": 0, "max_running_requests": 0}
    breakdown = {
        "gpu_memory_bytes": int(gpu_memory_mib * MIB),
        "co_tenant_bytes": int(held),
        "pre_model_load_bytes": int(pre),
        "target_weights_bytes": int(target_weights),
        "draft_weights_bytes": int(draft_weights),
        "available_after_load_bytes": int(available),
        "mem_fraction_static": round(fraction, 4),
        "mem_fraction_static_source": fraction_source,
        "default_mem_fraction_static": round(default_fraction, 4),
        "outside_static_bytes": int(slack),
        "activation_reserve_bytes": int(reserve * MIB),
        "activation_bytes": int(activation_mib * MIB),
        "cuda_graph_bytes": int(graph_mib * MIB),
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
        "request_pool_bytes": 0,
        "free_after_pools_bytes": 0,
    }
    plan = {"sglang_version": release["release"], "release": release, "resolved": resolved, "breakdown": breakdown, "pools": result_pools,
            "reasons": reasons, "shortfalls": shortfalls, "warnings": warnings, "fits": False,
            "serves_requested": False, "binding": POOL_WEIGHTS, "limits": {}, "graph_suggestion": None}
    warnings.extend(release["notes"])
    if late_draft and draft_weights and draft_weights + reserve * MIB > slack:
        warnings.append("draft_weights: " + said + " loads the draft's %.2f GiB after the pools, out of the %.2f GiB "
                        "outside the static pools; %.2f GiB stay for activations and CUDA graphs, SGLang's default keeps "
                        "%.2f GiB; loading the draft or capturing CUDA graphs may run out of memory"
                        % (draft_weights / GIB, slack / GIB, (slack - draft_weights) / GIB, reserve / 1024.0))
    if pre <= 0:
        reasons.append("weights: no GPU memory is free when this server starts")
        return plan
    if available <= 0:
        reasons.append("weights: %.2f GiB of weights do not fit the %.2f GiB free when this server starts; no "
                       "mem_fraction_static makes room (more or larger GPUs, a higher tp_size, or fewer co-tenants)"
                       % ((pre - available) / GIB, pre / GIB))
        return plan
    if rest <= 0:
        minimum = 1 - available / float(pre)
        reasons.append("weights: %.2f GiB of weights leave no room for pools under mem_fraction_static=%.3f; raise it "
                       "above %.3f (%s)" % ((pre - available) / GIB, fraction, math.ceil(minimum * 1000) / 1000.0,
                                            said + " sizes its pools from a negative budget" if late_draft else
                                            "SGLang: 'Loaded weights leave no GPU memory for the KV cache'"))
        return plan

    requests = resolved["max_running_requests"]
    if dims["linear"]:
        conv, ssm = mamba_state_bytes_per_request(dims, tp, resolved["mamba_ssm_dtype"])
        per_req = conv + ssm
        explicit = resolved["max_mamba_cache_size"]
        if explicit is None and resolved["disable_radix_cache"] and requests:
            explicit = max(1, requests)
        if release["extra_buffer_slots"] == "by_speculative":
            slots = mamba_slots_per_request_0_5_9(resolved["mamba_radix_cache_strategy"], resolved["disable_radix_cache"],
                                                  speculative)
        else:
            slots = mamba_slots_per_request(resolved["mamba_radix_cache_strategy"], resolved["disable_overlap_schedule"],
                                            resolved["disable_radix_cache"])
        if release["state_pool"] == "subtract_first":
            size, intermediate, state, rest = size_state_pool_0_5_9(rest, per_req, resolved["mamba_full_memory_ratio"],
                                                                    requests or 0, draft_tokens, explicit)
            allocated = size
        else:
            padded = release["state_pool"] == "joint_padded"
            size, intermediate, state, rest = size_state_pool(rest, per_req, resolved["mamba_full_memory_ratio"], slots,
                                                              requests or 1, draft_tokens, explicit, padded)
            allocated = size + 1 if padded else size
        breakdown.update({"mamba_per_request_bytes": per_req, "mamba_slots_per_request": slots,
                          "mamba_state_bytes": int(state), "mamba_intermediate_bytes": int(intermediate),
                          "mamba_conv_bytes": conv * allocated if size > 0 else 0,
                          "mamba_ssm_bytes": ssm * allocated if size > 0 else 0})
        result_pools["max_mamba_cache_size"] = size
        if size <= 0:
            plan["binding"] = POOL_MAMBA
            if release["state_pool"] == "subtract_first" and intermediate and explicit is None:
                reasons.append("mamba: the draft's intermediate state for %d requests x %d draft tokens (%.2f GiB) leaves "
                               "no state pool in the %.2f GiB pool budget (%s sizes it from "
                               "max_running_requests)" % (int(requests), draft_tokens, intermediate / GIB,
                                                          breakdown["pool_budget_bytes"] / GIB, said))
            else:
                reasons.append("mamba: the state pool gets %d slots (pool budget %.2f GiB, %.2f MiB per slot); %s"
                               % (size, breakdown["pool_budget_bytes"] / GIB, per_req / MIB,
                                  said + " cannot allocate it" if release["state_pool"] == "subtract_first" else
                                  "SGLang raises 'Not enough GPU memory for hybrid (mamba/linear-attention) state "
                                  "cache'"))
            return plan

    # The KV cache is in the checkpoint's dtype (bf16 for fp8 and 4-bit checkpoints) unless --kv-cache-dtype says.
    kv_dtype = dtype_bytes(resolved["kv_cache_dtype"], dtype_bytes(dims["weight_dtype"]))
    # Before 0.5.14 the draft has a KV pool of its own, sized after the target's.
    target_cell, draft_cell = kv_cell_bytes(dims, tp, kv_dtype, dims["mtp_layers"] if speculative and not late_draft else 0)
    cell = target_cell + draft_cell
    page = resolved["page_size"]
    tokens = int(max(rest, 0) // cell) if cell else 0
    if resolved["max_total_tokens"]:
        tokens = min(tokens, resolved["max_total_tokens"])
    # Rounded to whole pages: after the cap (0.4.4 to 0.5.10) or before and again after it (0.5.11), the same number.
    tokens = tokens // page * page
    breakdown.update({"kv_cell_bytes": target_cell, "kv_draft_cell_bytes": draft_cell, "kv_bytes": tokens * cell,
                      "free_after_pools_bytes": int(pre - target_weights - draft_weights - breakdown["mamba_state_bytes"]
                                                    - breakdown["mamba_intermediate_bytes"] - tokens * cell)})
    result_pools["max_total_num_tokens"] = tokens
    if tokens <= 0:
        plan["binding"] = POOL_KV
        reasons.append("kv: no token fits the KV pool (%s: 'Not enough memory. Please try to increase "
                       "--mem-fraction-static%s')" % (said, "." if late_draft else ""))
        return plan

    running, mamba_cap = _running_requests(resolved, tokens, size if dims["linear"] else None,
                                           breakdown["mamba_slots_per_request"], release)
    result_pools["max_running_requests"] = running
    # ReqToTokenPool: a row of int32 token indices per request slot, the context length + 4 long, allocated with the
    # KV pool out of the memory outside it (1 GiB for 2049 slots of a 128K context).
    request_pool = (running + (1 if release["request_pool_plus_one"] else 0)) * (resolved["context_length"] + 4) * 4
    breakdown["request_pool_bytes"] = int(request_pool) if running > 0 else 0
    breakdown["free_after_pools_bytes"] -= breakdown["request_pool_bytes"]
    if running <= 0:
        plan["binding"] = POOL_MAMBA
        reasons.append("mamba: %d state slots serve no request at %d slots per request (%s)"
                       % (int(size), breakdown["mamba_slots_per_request"],
                          said + " caps max_running_requests to 0" if release["state_pool"] == "subtract_first" else
                          "SGLang: 'Hybrid (mamba/linear-attention) state cache is too small to serve any requests'"))
        return plan

    # SGLang starts. What it serves of the request: every running request, and one request of the full context.
    limits = {
        POOL_RESERVE: slack / float(reserve * MIB) if reserve else float("inf"),
        POOL_KV: tokens / float(resolved["context_length"]),
    }
    if requests:
        limits[POOL_MAMBA] = (mamba_cap / float(requests)) if mamba_cap is not None else float("inf")
        if release["explicit_requests"] == "half_kv":
            limits["kv_requests"] = (tokens // 2) / float(requests)
    plan["limits"] = {key: round(value, 4) for key, value in limits.items() if value != float("inf")}
    if slack < reserve * MIB:
        # A heuristic, not a limit: SGLang's default is conservative, and public runs above it start fine. The line
        # names both parts and what would make room, the usual out-of-memory of 24 GB cards being the graph capture.
        room_mib = slack / float(MIB)
        graph_bs = largest_graph_batch_size(room_mib, activation_mib, prefill_sizes, resolved["cuda_graph_max_bs"])
        ways = ["mem_fraction_static=%.3f" % (math.floor((1 - reserve * MIB / float(pre)) * 1000) / 1000.0)]
        if cuda_graph and 0 < graph_bs < resolved["cuda_graph_max_bs"]:
            ways.insert(0, "cuda_graph_max_bs=%d" % graph_bs)
        plan["graph_suggestion"] = {
            "cuda_graph_max_bs": graph_bs if cuda_graph and 0 < graph_bs < resolved["cuda_graph_max_bs"] else None,
            "mem_fraction_static": float(ways[-1].split("=")[1])}
        warnings.append("activation_reserve: %.2f GiB stay outside the static pools; SGLang's default keeps %.2f GiB "
                        "(activations %.2f GiB for a %d-token chunked prefill%s, CUDA graphs %.2f GiB for batch sizes "
                        "up to %d%s) with mem_fraction_static %.3f, this plan has %.3f; CUDA graph capture or a long "
                        "prefill may run out of memory; room with %s"
                        % (slack / GIB, reserve / 1024.0, (activation_mib - spec_reserve) / 1024.0,
                           int(resolved["chunked_prefill_size"]),
                           ", the speculative draft %.2f GiB" % (spec_reserve / 1024.0) if spec_reserve else "",
                           graph_mib / 1024.0, int(resolved["cuda_graph_max_bs"]),
                           "" if cuda_graph else ", disabled", default_fraction, fraction, " or ".join(ways)))
    if requests and mamba_cap is not None and mamba_cap < requests:
        shortfalls.append("mamba: the state pool (%d slots, %d per request) serves %d of max_running_requests=%d; %s"
                          % (int(size), breakdown["mamba_slots_per_request"], mamba_cap, int(requests),
                             "SGLang would cap it ('max_running_requests is capped to %d by the mamba state cache')"
                             % mamba_cap if release["mamba_cap_warning"] else
                             "%s caps max_running_requests to %d" % (said, mamba_cap)))
    if requests and release["explicit_requests"] == "half_kv" and tokens // 2 < requests:
        shortfalls.append("kv: %d tokens serve %d of max_running_requests=%d" % (tokens, tokens // 2, int(requests)))
    if tokens < resolved["context_length"]:
        shortfalls.append("kv: %d tokens %s=%d" % (tokens, CONTEXT_SHORTFALL, int(resolved["context_length"])))
    plan["fits"] = True
    plan["serves_requested"] = not shortfalls
    short = [name for name in (POOL_MAMBA, POOL_KV) if any(text.startswith(name + ":") for text in shortfalls)]
    if short:
        plan["binding"] = short[0]
    else:
        tight = {name: value for name, value in limits.items() if name in (POOL_RESERVE, POOL_MAMBA, POOL_KV)}
        plan["binding"] = min(tight, key=tight.get)
    return plan


def _running_requests(resolved, tokens, mamba_size, slots, release):
    """(max_running_requests, state-pool cap or None) as the release resolves them (sglang_releases: the request pool
    of one more than the estimate up to 0.4.6; an explicit value as given, capped by the estimate from 0.5.10, by half
    the KV pool from 0.5.14; without one, the estimate and half the KV pool), then the state pool's cap."""
    requests = resolved["max_running_requests"]
    estimated = max(min(int(tokens / float(resolved["context_length"]) * 512), 4096), 2048)
    pool = estimated + 1 if release["request_pool_plus_one"] else estimated
    rule = release["explicit_requests"]
    if not requests:
        running = min(pool, tokens // 2)
    elif rule == "half_kv":
        running = min(max(1, requests), tokens // 2)
    elif rule == "estimate":
        running = min(requests, estimated)
    else:
        running = requests
    mamba_cap = None
    if mamba_size is not None:
        mamba_cap = mamba_size // slots
        running = min(running, mamba_cap)
    return running, mamba_cap


# ---- suggestions -----------------------------------------------------------------------------------------------------

def _replan(dims, weights, gpu, flags, measured, arithmetic, **changes):
    changed = dict(flags)
    changed.update(changes)
    return plan_memory(dims, weights, gpu, changed, measured, arithmetic)


def _serves_requests(plan):
    """True when SGLang starts and no pool cuts max_running_requests (the context shortfall aside)."""
    return plan["fits"] and not any(CONTEXT_SHORTFALL not in text for text in plan["shortfalls"])


def suggest(dims, weights, gpu, flags, measured=None, plan=None, arithmetic=None):
    """What would make a configuration serve what was requested, each knob tried with the other flags unchanged.

    The pools' keys are None when the plan already serves what was requested. Returns ``max_running_requests`` (the largest the
    pools serve), ``mamba_full_memory_ratio`` (the smallest ratio, in steps of 0.05, at which the state pool serves
    every configured request), ``mamba_ssm_dtype`` (``bfloat16`` when halving the SSM state lets the pools serve every
    request), ``context_length`` (the largest context the KV pool holds with the suggested max_running_requests) and
    ``fits_with``: a set of changes with which the plan serves what was requested (checked by planning it), or None;
    and, when less than SGLang's activation and CUDA graph reserve stays outside the static pools,
    ``cuda_graph_max_bs`` (the largest whose graphs fit next to the activations) and ``mem_fraction_static`` (the
    largest that leaves the whole reserve). ``arithmetic`` defaults to the plan's, else to SGLANG_VERSION.
    """
    arithmetic = arithmetic or (plan["sglang_version"] if plan else SGLANG_VERSION)
    plan = plan or plan_memory(dims, weights, gpu, flags, measured, arithmetic)
    suggestions = {"max_running_requests": None, "mamba_full_memory_ratio": None, "mamba_ssm_dtype": None,
                   "context_length": None, "fits_with": None, "cuda_graph_max_bs": None, "mem_fraction_static": None}
    # Room for activations and CUDA graphs (the activation_reserve warning), independent of the pools' verdict.
    suggestions.update(plan.get("graph_suggestion") or {})
    if plan["serves_requested"]:
        return suggestions
    requested = plan["resolved"]["max_running_requests"] or 1
    for candidate in range(requested, 0, -1):
        if _serves_requests(_replan(dims, weights, gpu, flags, measured, arithmetic, max_running_requests=candidate)):
            suggestions["max_running_requests"] = candidate
            break
    if dims["linear"]:
        for hundredths in range(5, 2001, 5):
            ratio = hundredths / 100.0
            if _serves_requests(_replan(dims, weights, gpu, flags, measured, arithmetic, mamba_full_memory_ratio=ratio)):
                suggestions["mamba_full_memory_ratio"] = ratio
                break
        if dtype_bytes(flags.get("mamba_ssm_dtype") or dims["linear"]["ssm_dtype"], 4) > 2 and _serves_requests(
                _replan(dims, weights, gpu, flags, measured, arithmetic, mamba_ssm_dtype="bfloat16")):
            suggestions["mamba_ssm_dtype"] = "bfloat16"
    changes = {}
    if suggestions["max_running_requests"] is not None and suggestions["max_running_requests"] != requested:
        changes["max_running_requests"] = suggestions["max_running_requests"]
    base = _replan(dims, weights, gpu, flags, measured, arithmetic, **changes)
    tokens = base["pools"]["max_total_num_tokens"]
    if tokens and tokens < base["resolved"]["context_length"]:
        suggestions["context_length"] = tokens
        changes["context_length"] = tokens
    if changes and _replan(dims, weights, gpu, flags, measured, arithmetic, **changes)["serves_requested"]:
        suggestions["fits_with"] = changes
    return suggestions


def summary_line(plan, suggestions=None):
    """One sentence: the verdict, the pools per rank, the first reason (or shortfall) and the suggestions.

    The verdict is ``fits`` (starts and serves what was requested), ``fits (starts), but <first shortfall>`` or
    ``does not fit``.
    """
    pools, breakdown = plan["pools"], plan["breakdown"]
    figures = "weights %.2f GiB + draft %.2f GiB, mamba %s slots (%.2f GiB + %.2f GiB intermediate), KV %d tokens " \
              "(%.2f GiB), max_running_requests %d, mem_fraction_static %.3f" % (
                  breakdown["target_weights_bytes"] / GIB, breakdown["draft_weights_bytes"] / GIB,
                  pools["max_mamba_cache_size"], breakdown["mamba_state_bytes"] / GIB,
                  breakdown["mamba_intermediate_bytes"] / GIB, pools["max_total_num_tokens"], breakdown["kv_bytes"] / GIB,
                  pools["max_running_requests"], breakdown["mem_fraction_static"])
    if not plan["fits"]:
        text = "does not fit: %s; binding %s: %s" % (figures, plan["binding"], plan["reasons"][0])
    elif plan["shortfalls"]:
        text = "fits (starts), but %s; %s" % (plan["shortfalls"][0], figures)
    else:
        return "fits: " + figures
    together = (suggestions or {}).get("fits_with")
    if together:
        text += "; %s with " % ("serves every request" if plan["fits"] else "fits") + ", ".join(
            "%s=%s" % item for item in sorted(together.items()))
    single = ["%s=%s" % (key, value) for key, value in sorted((suggestions or {}).items())
              if value is not None and key in ("max_running_requests", "mamba_full_memory_ratio", "mamba_ssm_dtype")]
    if single:
        text += "; the state pool serves every request with " + " or ".join(single)
    return text


# ---- what the server serves of what was asked ------------------------------------------------------------------------

def serves(plan, actual=None):
    """What the server serves of what was requested: running requests and the context the KV pool holds.

    From the startup log when it has the figures (what SGLang allocated, after its own caps), else from the plan.
    ``running_requests`` of ``requested_running_requests``; ``kv_tokens`` against ``context_length`` (the context
    SGLang runs with: the flag, else the model's); ``full_context_requests``: requests of the full context the KV pool
    holds at once (0: not even one).
    """
    actual = actual or {}
    resolved = plan.get("resolved") or {}
    from_log = actual.get("max_running_requests") is not None and actual.get("max_total_num_tokens") is not None
    running = actual["max_running_requests"] if from_log else plan["pools"].get("max_running_requests")
    tokens = actual["max_total_num_tokens"] if from_log else plan["pools"].get("max_total_num_tokens")
    context = actual.get("context_len") if from_log and actual.get("context_len") else resolved.get("context_length")
    requested = resolved.get("max_running_requests")
    return {
        "running_requests": running,
        "requested_running_requests": requested,
        "kv_tokens": tokens,
        "context_length": context,
        "full_context_requests": (tokens // context) if tokens is not None and context else None,
        "source": "startup log" if from_log else "plan",
    }


def serves_line(figures):
    """'serves 4 of 4 requested running requests; the KV pool holds 148578 tokens, 1 request of the 131072-token
    context' (unknowns as '?')."""
    def shown(value):
        return "?" if value is None else str(value)
    return "serves %s of %s requested running requests; the KV pool holds %s tokens, %s request(s) of the %s-token " \
           "context" % (shown(figures["running_requests"]), shown(figures["requested_running_requests"]),
                        shown(figures["kv_tokens"]), shown(figures["full_context_requests"]),
                        shown(figures["context_length"]))


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
