# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Will an SGLang server fit its GPUs? The memory arithmetic SGLang does at start, done before it starts.

Pure functions, for two arithmetics (``arithmetic``): SGLang 0.5.23's, the default, and SGLang 0.5.9's. Every step
names the SGLang function it mirrors (paths under ``sglang/srt/``).

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
release, as a public backport quotes them verbatim: "BACKPORT: from sglang v0.5.9 model_runner_kv_cache_mixin.py");
step 1, the per-request state size and the flag resolution are 0.5.23's:

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
6. Concurrency: ``init_memory_pool`` - ``max_running_requests`` (or the estimate from the KV pool) capped by the state
   pool: 1 slot per request without the radix cache, 3 + 1 with ``extra_buffer`` and speculative decoding, 3 + 2
   with ``extra_buffer`` otherwise, 3 else; no cap at half the KV pool.

The releases between 0.5.9 and 0.5.23 changed this in steps (the joint solve of the state pool with the intermediate
state; the +1 padding slot of sgl-project/sglang#32184; the draft's weights counted before the pools) and are not
modelled one by one.

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

from ansible_collections.llmops.serving.plugins.module_utils.model_config import dtype_bytes

MIB = 1 << 20
GIB = 1 << 30

ARITHMETIC_0_5_23 = "0.5.23"
ARITHMETIC_0_5_9 = "0.5.9"
ARITHMETICS = (ARITHMETIC_0_5_23, ARITHMETIC_0_5_9)
# The default arithmetic.
SGLANG_VERSION = ARITHMETIC_0_5_23

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
    "disable_cuda_graph": bool, "max_total_tokens": int, "page_size": int, "language_only": bool,
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


def plan_memory(dims, weights, gpu, flags, measured=None, arithmetic=SGLANG_VERSION):
    """Size SGLang's pools for one TP rank and judge whether the server starts and serves what was requested.

    ``dims``: model_config.parse_model_config; ``weights``: model_config.weight_bytes; ``gpu``: ``{"memory_mib":
    total memory of one GPU, "count": GPUs, "cuda_context_mib": memory taken before the weights load, "co_tenants":
    other servers on the same GPUs, each ``{"name", "mem_fraction_static"}`` (None: SGLang's default for this GPU)}``;
    ``flags``: server flags (keys of FLAG_DEFAULTS). ``measured`` (optional) replaces estimates with a log's figures:
    ``pre_model_load_bytes`` (free memory before loading) and ``available_after_load_bytes``. ``arithmetic``: the SGLang
    release whose sizing is followed, one of ARITHMETICS.

    Returns a dict with ``fits`` (SGLang would start), ``reasons`` (what stops it), ``shortfalls`` (what a started
    server cuts from the request), ``serves_requested`` (fits and no shortfall), ``binding`` (the first pool in
    reasons, else in shortfalls, else the one closest to its limit), ``warnings``, ``limits``, ``resolved`` flags,
    ``breakdown`` (bytes per rank), ``pools`` (what SGLang would print) and ``sglang_version`` (the arithmetic).
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
    if arithmetic not in ARITHMETICS:
        raise PlanInputError("arithmetic must be one of %s, not %s" % (", ".join(ARITHMETICS), arithmetic))
    legacy = arithmetic == ARITHMETIC_0_5_9
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
        available = pre - target_weights - (0 if legacy else draft_weights)
    elif legacy:
        target_weights = pre - available
    else:
        target_weights, draft_weights = pre - available, 0
    slack = pre * (1 - fraction)
    mm_reservation = VLM_CACHE_SIZE_MB * MIB if vision and not legacy else 0
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
    plan = {"sglang_version": arithmetic, "resolved": resolved, "breakdown": breakdown, "pools": result_pools,
            "reasons": reasons, "shortfalls": shortfalls, "warnings": warnings, "fits": False,
            "serves_requested": False, "binding": POOL_WEIGHTS, "limits": {}}
    if legacy and draft_weights and draft_weights + reserve * MIB > slack:
        warnings.append("draft_weights: SGLang 0.5.9 loads the draft's %.2f GiB after the pools, out of the %.2f GiB "
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
                                            "SGLang 0.5.9 sizes its pools from a negative budget" if legacy else
                                            "SGLang: 'Loaded weights leave no GPU memory for the KV cache'"))
        return plan

    requests = resolved["max_running_requests"]
    if dims["linear"]:
        conv, ssm = mamba_state_bytes_per_request(dims, tp, resolved["mamba_ssm_dtype"])
        per_req = conv + ssm
        explicit = resolved["max_mamba_cache_size"]
        if explicit is None and resolved["disable_radix_cache"] and requests:
            explicit = max(1, requests)
        if legacy:
            slots = mamba_slots_per_request_0_5_9(resolved["mamba_radix_cache_strategy"], resolved["disable_radix_cache"],
                                                  speculative)
            size, intermediate, state, rest = size_state_pool_0_5_9(rest, per_req, resolved["mamba_full_memory_ratio"],
                                                                    requests or 0, draft_tokens, explicit)
            allocated = size
        else:
            slots = mamba_slots_per_request(resolved["mamba_radix_cache_strategy"], resolved["disable_overlap_schedule"],
                                            resolved["disable_radix_cache"])
            size, intermediate, state, rest = size_state_pool(rest, per_req, resolved["mamba_full_memory_ratio"], slots,
                                                              requests or 1, draft_tokens, explicit)
            allocated = size + 1  # the padding slot
        breakdown.update({"mamba_per_request_bytes": per_req, "mamba_slots_per_request": slots,
                          "mamba_state_bytes": int(state), "mamba_intermediate_bytes": int(intermediate),
                          "mamba_conv_bytes": conv * allocated if size > 0 else 0,
                          "mamba_ssm_bytes": ssm * allocated if size > 0 else 0})
        result_pools["max_mamba_cache_size"] = size
        if size <= 0:
            plan["binding"] = POOL_MAMBA
            if legacy and intermediate and explicit is None:
                reasons.append("mamba: the draft's intermediate state for %d requests x %d draft tokens (%.2f GiB) leaves "
                               "no state pool in the %.2f GiB pool budget (SGLang 0.5.9 sizes it from "
                               "max_running_requests)" % (int(requests), draft_tokens, intermediate / GIB,
                                                          breakdown["pool_budget_bytes"] / GIB))
            else:
                reasons.append("mamba: the state pool gets %d slots (pool budget %.2f GiB, %.2f MiB per slot); %s"
                               % (size, breakdown["pool_budget_bytes"] / GIB, per_req / MIB,
                                  "SGLang 0.5.9 cannot allocate it" if legacy else "SGLang raises 'Not enough GPU memory "
                                  "for hybrid (mamba/linear-attention) state cache'"))
            return plan

    kv_dtype = dtype_bytes(resolved["kv_cache_dtype"], dtype_bytes(
        dims["weight_dtype"] if dims["weight_dtype"] not in ("fp8",) else "bfloat16"))
    # 0.5.9's draft has a KV pool of its own, sized after the target's.
    target_cell, draft_cell = kv_cell_bytes(dims, tp, kv_dtype, dims["mtp_layers"] if speculative and not legacy else 0)
    cell = target_cell + draft_cell
    page = resolved["page_size"]
    tokens = int(max(rest, 0) // cell) // page * page if cell else 0
    if resolved["max_total_tokens"]:
        tokens = min(tokens, resolved["max_total_tokens"])
        if legacy:
            tokens = tokens // page * page  # 0.5.9 rounds to pages after the cap
    breakdown.update({"kv_cell_bytes": target_cell, "kv_draft_cell_bytes": draft_cell, "kv_bytes": tokens * cell,
                      "free_after_pools_bytes": int(pre - target_weights - draft_weights - breakdown["mamba_state_bytes"]
                                                    - breakdown["mamba_intermediate_bytes"] - tokens * cell)})
    result_pools["max_total_num_tokens"] = tokens
    if tokens <= 0:
        plan["binding"] = POOL_KV
        reasons.append("kv: no token fits the KV pool (SGLang%s: 'Not enough memory. Please try to increase "
                       "--mem-fraction-static%s')" % ((" 0.5.9", ".") if legacy else ("", "")))
        return plan

    running, mamba_cap = _running_requests(resolved, tokens, size if dims["linear"] else None,
                                           breakdown["mamba_slots_per_request"], legacy)
    result_pools["max_running_requests"] = running
    if running <= 0:
        plan["binding"] = POOL_MAMBA
        reasons.append("mamba: %d state slots serve no request at %d slots per request (%s)"
                       % (int(size), breakdown["mamba_slots_per_request"],
                          "SGLang 0.5.9 caps max_running_requests to 0" if legacy else "SGLang: 'Hybrid "
                          "(mamba/linear-attention) state cache is too small to serve any requests'"))
        return plan

    # SGLang starts. What it serves of the request: every running request, and one request of the full context.
    limits = {
        POOL_RESERVE: slack / float(reserve * MIB) if reserve else float("inf"),
        POOL_KV: tokens / float(resolved["context_length"]),
    }
    if requests:
        limits[POOL_MAMBA] = (mamba_cap / float(requests)) if mamba_cap is not None else float("inf")
        if not legacy:
            limits["kv_requests"] = (tokens // 2) / float(requests)
    plan["limits"] = {key: round(value, 4) for key, value in limits.items() if value != float("inf")}
    if slack < reserve * MIB:
        # A heuristic, not a limit: SGLang's default is conservative, and public runs above it start fine.
        warnings.append("activation_reserve: %.2f GiB stay outside the static pools, SGLang's default keeps %.2f GiB for "
                        "activations and CUDA graphs (mem_fraction_static %.3f > default %.3f); CUDA graph capture or a "
                        "long prefill may run out of memory" % (slack / GIB, reserve / 1024.0, fraction, default_fraction))
    if requests and mamba_cap is not None and mamba_cap < requests:
        shortfalls.append("mamba: the state pool (%d slots, %d per request) serves %d of max_running_requests=%d; %s"
                          % (int(size), breakdown["mamba_slots_per_request"], mamba_cap, int(requests),
                             "SGLang 0.5.9 caps max_running_requests to %d" % mamba_cap if legacy else
                             "SGLang would cap it ('max_running_requests is capped to %d by the mamba state cache')"
                             % mamba_cap))
    if requests and not legacy and tokens // 2 < requests:
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


def _running_requests(resolved, tokens, mamba_size, slots, legacy):
    """(max_running_requests, state-pool cap or None). 0.5.23: KVCacheConfigurator.resolve_max_num_reqs (the request
    cap, half the KV pool, the state pool); 0.5.9: model_runner.py init_memory_pool (the request cap, the state pool)."""
    requests = resolved["max_running_requests"]
    estimated = max(min(int(tokens / float(resolved["context_length"]) * 512), 4096), 2048)
    if legacy:
        running = requests if requests else estimated
    else:
        running = min(max(1, requests), tokens // 2) if requests else min(estimated, tokens // 2)
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

    Empty (all None) when the plan already serves what was requested. Returns ``max_running_requests`` (the largest the
    pools serve), ``mamba_full_memory_ratio`` (the smallest ratio, in steps of 0.05, at which the state pool serves
    every configured request), ``mamba_ssm_dtype`` (``bfloat16`` when halving the SSM state lets the pools serve every
    request), ``context_length`` (the largest context the KV pool holds with the suggested max_running_requests) and
    ``fits_with``: a set of changes with which the plan serves what was requested (checked by planning it), or None.
    ``arithmetic`` defaults to the plan's, else to SGLANG_VERSION.
    """
    arithmetic = arithmetic or (plan["sglang_version"] if plan else SGLANG_VERSION)
    plan = plan or plan_memory(dims, weights, gpu, flags, measured, arithmetic)
    suggestions = {"max_running_requests": None, "mamba_full_memory_ratio": None, "mamba_ssm_dtype": None,
                   "context_length": None, "fits_with": None}
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
              if value is not None and key not in ("fits_with", "context_length")]
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
