# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What SGLang 0.5.23 resolves and refuses after parsing, for the simulated model, in SGLang's order and words.

SGLang parses in prepare_server_args and resolves at start (launch_server.py: run_server -> ServerArgs.resolve_once
-> arg_groups/pipeline.py: run_resolution_pipeline; then engine.py: check_server_args). A refused combination makes
the server exit at start with SGLang's exception; the simulator raises the same exception type with the same text,
from functions named after SGLang's (each cites its source). Modelled:

- serving_hook.py: handle_missing_default_values - tokenizer_path and served_model_name default to model_path, a
  random seed, the device from utils/common.py: get_device: "cuda" when torch sees a CUDA device (sglang_sim/cuda.py:
  the driver stand-in), else `RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is
  available.`; only CUDA devices are simulated.
- model_hook.py: handle_mamba_radix_cache (+ overrides.py: _mamba_radix_cache_resolution, mamba_hook.py:
  validate_mamba_no_buffer / validate_mamba_extra_buffer) for the hybrid Qwen3_5ForConditionalGeneration:
  `auto` becomes extra_buffer (overlap schedule on) or no_buffer; `no_buffer` with the overlap schedule is refused.
- speculative_hook.py: handle_speculative_decoding - the algorithm is uppercased, NEXTN (and EAGLE) resolve to EAGLE
  (_resolve_speculative_algorithm_alias), an unknown name is refused (speculative/spec_info.py:
  SpeculativeAlgorithm.from_string); _handle_eagle_family - max_running_requests 48, (3, 1, 4) when no step count is
  given (topk or draft tokens without steps: bare AssertionError), draft tokens forced to steps + 1 with topk 1,
  `--speculative-num-steps` without `--speculative-eagle-topk`: the TypeError SGLang's comparison raises.
- validation_hook.py: check_server_args - a colon in served_model_name, tp_size divisible by nnodes, no dp_size > 1
  with nnodes > 1.

The values SGLang derives from the GPU (memory fraction, chunked prefill size, decode CUDA graph max batch size) follow
memory_hook.py for the GPU size get_nvgpu_memory_capacity reads from nvidia-smi (the driver stand-in's); the pools are
sized at start (sglang_sim/memory.py). The other speculative algorithms are not simulated (NotSimulatedError).

``cuda`` (sglang_sim/cuda.py: Cuda) is what torch sees, as the launcher resolves. None resolves as on a CUDA device
without asking torch, as roles/sglang's flag validator runs SGLang where no GPU is visible (override_platform(is_cuda=True),
device "cuda"): that is how the `sglang` stand-in resolves; the GPU size is then the installed driver's when it answers,
else an RTX A6000's.
"""
from __future__ import annotations

import logging
import random

from sglang_sim import cuda as cuda_mod, memory

SIMULATED_ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
NO_ACCELERATOR = "No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available."
DEFAULT_CONTEXT_LENGTH = 262144
DEFAULT_SPEC_MAX_RUNNING_REQUESTS = 48
# speculative/spec_info.py: SpeculativeAlgorithm members, and spec_registry.py: _RESERVED_ALIASES.
SPECULATIVE_ALGORITHMS = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE")
RESERVED_ALIASES = ("NEXTN",)
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")

logger = logging.getLogger("sglang_sim.resolution")


class NotSimulatedError(RuntimeError):
    """A setting SGLang accepts that the simulator cannot stand in for."""


def _attention_backends(args):
    # overrides.py: attention_backends_of (prefill/decode backends fall back to attention_backend).
    return (args.get("prefill_attention_backend") or args.get("attention_backend"),
            args.get("decode_attention_backend") or args.get("attention_backend"))


def get_device(cuda):
    """utils/common.py: get_device - "cuda" when torch sees a CUDA device; the other accelerators and CPU backends
    are not simulated, so without one no accelerator is available (cuda None: assumed, see the module's doc)."""
    if cuda is None or cuda.is_available():
        return "cuda"
    raise RuntimeError(NO_ACCELERATOR)


def get_device_memory_capacity(cuda):
    """utils/common.py: get_device_memory_capacity for CUDA - get_nvgpu_memory_capacity (nvidia-smi's smallest
    memory.total, MiB), else _cuda_mem_fallback; assumed CUDA (cuda None): the installed driver's figure when it
    answers, else an RTX A6000's."""
    capacity = (cuda if cuda is not None else cuda_mod.Cuda.load()).memory_capacity_mib()
    return capacity if capacity is not None else float(memory.DEFAULT_GPU_MEMORY_MIB)


def handle_missing_default_values(args, cuda=None):
    """serving_hook.py: handle_missing_default_values (get_device only for an unset --device, as SGLang: an explicit
    `--device cuda` without a GPU fails later, in the scheduler's torch.cuda.set_device)."""
    if args["tokenizer_path"] is None:
        args["tokenizer_path"] = args["model_path"]
    if args["served_model_name"] is None:
        args["served_model_name"] = args["model_path"]
    if args["device"] is None:
        args["device"] = get_device(cuda)
    args["device"] = args["device"].split(":")[0]
    if cuda is not None and args["device"] != "cuda":
        raise NotSimulatedError(f"sglang-sim simulates CUDA devices only, not --device {args['device']}")
    if args["random_seed"] is None:
        args["random_seed"] = random.randint(0, 1 << 30)


def handle_gpu_memory_settings(args, cuda=None):
    """memory_hook.py: handle_gpu_memory_settings - chunked prefill, decode graph max bs and mem_fraction_static from
    the GPU's size (get_device_memory_capacity, sglang_sim/memory.py); runs before the speculative hook, as in SGLang."""
    gpu_mib = get_device_memory_capacity(cuda)
    chunked, decode_max_bs = memory.defaults_for_gpu(gpu_mib, max(1, args["tp_size"]))
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = chunked
    if args["cuda_graph_max_bs_decode"] is None:
        requested = args["max_running_requests"]
        args["cuda_graph_max_bs_decode"] = min(decode_max_bs, requested) if requested else decode_max_bs
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = memory.default_mem_fraction(gpu_mib, max(1, args["tp_size"]),
                                                                  args["chunked_prefill_size"],
                                                                  args["cuda_graph_max_bs_decode"])
    if args["mamba_full_memory_ratio"] is None:
        args["mamba_full_memory_ratio"] = 0.9  # the field's fallback (arg_groups/fields/exec_.py)


def handle_mamba_radix_cache(args):
    """model_hook.py: handle_mamba_radix_cache for the hybrid (Gated DeltaNet) architecture."""
    if args["disable_radix_cache"]:
        return
    args["uses_mamba_radix_cache"] = True
    # overrides.py: supports_mamba_cache_extra_buffer (the architecture supports it on the triton backend).
    supports_extra_buffer = args["linear_attn_backend"] == "triton"
    if args["mamba_radix_cache_strategy"] == "auto":
        wants_overlap = not args["disable_overlap_schedule"]
        wants_paging = args["page_size"] is not None and args["page_size"] > 1
        if (wants_overlap or wants_paging) and supports_extra_buffer:
            args["mamba_radix_cache_strategy"] = "extra_buffer"
        else:
            args["mamba_radix_cache_strategy"] = "no_buffer"
            args["disable_overlap_schedule"] = True
    if args["mamba_radix_cache_strategy"] in ("extra_buffer", "extra_buffer_lazy"):
        validate_mamba_extra_buffer(args, supports_extra_buffer)
    else:
        validate_mamba_no_buffer(args)


def validate_mamba_extra_buffer(args, supports_extra_buffer):
    """mamba_hook.py: validate_mamba_extra_buffer (the CUDA platform supports state snapshots)."""
    assert supports_extra_buffer, f"extra_buffer is not supported for {SIMULATED_ARCHITECTURE}; use no_buffer."
    if args["mamba_radix_cache_strategy"] == "extra_buffer_lazy":
        assert args["disaggregation_mode"] == "null", (
            "extra_buffer_lazy unsupported under PD disaggregation; use "
            "--mamba-radix-cache-strategy extra_buffer."
        )
    if args["speculative_num_draft_tokens"] is not None:
        assert args["mamba_track_interval"] >= args["speculative_num_draft_tokens"]
    if args["page_size"] is not None:
        assert args["mamba_track_interval"] % args["page_size"] == 0


def validate_mamba_no_buffer(args):
    """mamba_hook.py: validate_mamba_no_buffer."""
    assert args["page_size"] in (1, None), "no_buffer only supports page_size=1."
    assert args["disable_overlap_schedule"], (
        "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
    )
    assert args["attention_backend"] != "trtllm_mha", "no_buffer do not support trtllm_mha attention backend."


def speculative_algorithm_from_string(name):
    """speculative/spec_info.py: SpeculativeAlgorithm.from_string (no plugin algorithms are registered)."""
    if name is None:
        return "NONE"
    upper = name.upper()
    if upper in SPECULATIVE_ALGORITHMS:
        return upper
    if upper in RESERVED_ALIASES:
        return "EAGLE"
    raise ValueError(f"Unknown speculative algorithm name: {name}")


def handle_speculative_decoding(args):
    """speculative_hook.py: handle_speculative_decoding."""
    if args["speculative_draft_model_path"] is not None and args["speculative_draft_model_revision"] is None:
        args["speculative_draft_model_revision"] = "main"
    if args["speculative_algorithm"] is not None:
        args["speculative_algorithm"] = args["speculative_algorithm"].upper()
    # _resolve_speculative_algorithm_alias: NEXTN (the built-in MTP head) runs as EAGLE (no Gemma4 drafts here).
    if args["speculative_algorithm"] in ("NEXTN", "EAGLE"):
        args["speculative_algorithm"] = "EAGLE"
    if args["speculative_algorithm"] is None:
        return
    algorithm = speculative_algorithm_from_string(args["speculative_algorithm"])
    if algorithm in EAGLE_FAMILY:
        _handle_eagle_family(args)
    elif algorithm != "NONE":
        raise NotSimulatedError(f"sglang-sim simulates the EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE) only, "
                                f"not --speculative-algorithm {args['speculative_algorithm']}")


def _handle_eagle_family(args):
    """speculative_hook.py: _handle_eagle_family, for a model without a separate draft checkpoint."""
    if args["max_running_requests"] is None:
        args["max_running_requests"] = DEFAULT_SPEC_MAX_RUNNING_REQUESTS
        logger.warning("Max running requests is reset to 48 for speculative decoding. You can override this by "
                       "explicitly setting --max-running-requests.")
    if args["disable_overlap_schedule"]:
        logger.warning("Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.")
    if args["enable_mixed_chunk"] and args["speculative_algorithm"] == "STANDALONE":
        args["enable_mixed_chunk"] = False
        logger.warning("Mixed chunked prefill is disabled: %s speculative decoding does not support it.",
                       args["speculative_algorithm"])
    if not args["speculative_adaptive"] and args["speculative_num_steps"] is None:
        assert args["speculative_eagle_topk"] is None and args["speculative_num_draft_tokens"] is None
        # _auto_choose_speculative_params: (3, 1, 4) for this architecture and for STANDALONE.
        args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"] = 3, 1, 4
    if "trtllm_mha" in _attention_backends(args):
        if args["speculative_eagle_topk"] > 1:
            raise ValueError("trtllm_mha backend only supports topk = 1 for speculative decoding.")
    if args["speculative_use_rejection_sampling"]:
        _check_rejection_sampling(args)
    if args["speculative_eagle_topk"] == 1 and args["speculative_num_draft_tokens"] != args["speculative_num_steps"] + 1:
        logger.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                       "speculative_eagle_topk == 1")
        args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
    page_size = 1 if args["page_size"] is None else args["page_size"]  # overrides.py: _page_size_default ran before
    if (args["speculative_eagle_topk"] > 1 and page_size > 1
            and args["attention_backend"] not in _PAGE_TREE_SPEC_BACKENDS):
        raise ValueError(
            f"speculative_eagle_topk > 1 with page_size > 1 is only supported on "
            f"{_PAGE_TREE_SPEC_BACKENDS}; got attention_backend="
            f"{args['attention_backend']!r}. Use page_size == 1 or one of those backends."
        )
    if args["speculative_num_draft_tokens"] is None:
        raise NotSimulatedError("sglang-sim needs --speculative-num-draft-tokens when --speculative-eagle-topk > 1")


def _check_rejection_sampling(args):
    """speculative_hook.py: _handle_eagle_family, the speculative_use_rejection_sampling checks."""
    if args["speculative_algorithm"] not in ("EAGLE", "EAGLE3"):
        raise NotImplementedError(
            "--speculative-use-rejection-sampling is only supported for "
            "EAGLE / EAGLE3 / NEXTN, not "
            f"speculative_algorithm={args['speculative_algorithm']}."
        )
    if args["speculative_eagle_topk"] != 1:
        raise ValueError("--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.")
    if args["speculative_accept_threshold_single"] != 1.0 or args["speculative_accept_threshold_acc"] != 1.0:
        raise ValueError(
            "--speculative-use-rejection-sampling is incompatible with "
            "--speculative-accept-threshold-single / "
            "--speculative-accept-threshold-acc; rejection sampling ignores "
            "the accept thresholds."
        )


def check_server_args(args):
    """validation_hook.py: check_server_args (the checks that concern a single-node deployment)."""
    if args["ep_join_mode"] != "scale":
        assert (args["tp_size"] * args["pp_size"]) % args["nnodes"] == 0, "tp_size must be divisible by number of nodes"
    assert not (args["dp_size"] > 1 and args["nnodes"] != 1), (
        "multi-node data-parallel replicas are not supported; use attention DP "
        "(--attn-dp-size) across nodes"
    )
    assert args["base_gpu_id"] >= 0, "base_gpu_id must be non-negative"
    assert ":" not in args["served_model_name"], (
        "served_model_name cannot contain a colon (':') character. "
        "The colon is reserved for the 'model:adapter' syntax used in LoRA adapter specification. "
        f"Invalid value: '{args['served_model_name']}'"
    )
    assert args["schedule_conservativeness"] >= 0, "schedule_conservativeness must be non-negative"


def simulator_values(args):
    """Figures SGLang takes from the GPU and the checkpoint, fixed for the simulated card and model."""
    if args["max_running_requests"] is None:
        args["max_running_requests"] = 256
    if args["context_length"] is None:
        args["context_length"] = DEFAULT_CONTEXT_LENGTH
    if args["page_size"] is None:
        args["page_size"] = 1
    args["disable_cuda_graph"] = bool(args["disable_cuda_graph"] or args["cuda_graph_backend_decode"] == "disabled"
                                      or args["disable_decode_cuda_graph"])


def run_resolution_pipeline(args: dict, cuda=None) -> dict:
    """arg_groups/pipeline.py: run_resolution_pipeline, the modelled steps in SGLang's order; returns args."""
    handle_missing_default_values(args, cuda)
    handle_gpu_memory_settings(args, cuda)
    handle_mamba_radix_cache(args)
    handle_speculative_decoding(args)
    return args


def resolve(args: dict, cuda=None) -> dict:
    """What the server does before it logs server_args: resolve_once, check_server_args; plus the simulator's figures."""
    run_resolution_pipeline(args, cuda)
    check_server_args(args)
    simulator_values(args)
    return args
