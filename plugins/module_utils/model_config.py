# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model's dimensions from its Hugging Face ``config.json`` (and safetensors index), as SGLang sizes memory from them.

Pure functions on parsed JSON. Hybrid linear-attention models (Qwen3-Next, Qwen3.5/3.6: Gated DeltaNet layers with
a fixed-size state per request next to full-attention layers with a KV cache per token) and dense models are both
read; multimodal checkpoints keep the language model under ``text_config``, as SGLang reads them
(``sglang/srt/configs/qwen3_5.py``: Qwen3_5Config.text_config).

The parameter count is an estimate from the dimensions (what the layers hold, norms and biases left out); the
safetensors index's ``metadata.total_size`` is the exact byte count of the checkpoint and wins for the total when
given. The estimate is still used to split the total into the MTP head, the vision tower and the language model.
"""

from __future__ import annotations

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "half": 2, "fp16": 2,
    "float8_e4m3fn": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e5m2": 1,
}

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"


class ModelConfigError(ValueError):
    """config.json lacks a dimension the plan needs, or holds a value that cannot be right."""


def dtype_bytes(name, default=2):
    """Bytes per element of a torch dtype name (``bfloat16``, ``torch.float32``); ``default`` for None/auto."""
    if name in (None, "", "auto"):
        return default
    key = str(name).replace("torch.", "").lower()
    if key not in DTYPE_BYTES:
        raise ModelConfigError("unknown dtype %r" % (name,))
    return DTYPE_BYTES[key]


def _positive_int(text_config, key, default=None):
    value = text_config.get(key, default)
    if value is None:
        raise ModelConfigError("config.json has no %s" % key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError("config.json %s=%r is not a positive integer" % (key, value))
    return value


def layer_types(text_config):
    """Each layer's kind, ``full_attention`` or ``linear_attention``.

    ``layer_types`` when the config lists them; else Qwen3-Next's rule, a full-attention layer every
    ``full_attention_interval`` layers (``sglang/srt/configs/qwen3_next.py``: Qwen3NextConfig.layers_block_type);
    else every layer is full attention (a dense model).
    """
    count = _positive_int(text_config, "num_hidden_layers")
    listed = text_config.get("layer_types")
    if listed:
        if len(listed) != count:
            raise ModelConfigError("config.json lists %d layer_types for %d layers" % (len(listed), count))
        kinds = []
        for kind in listed:
            if kind not in (FULL_ATTENTION, LINEAR_ATTENTION):
                raise ModelConfigError("config.json layer type %r is not supported by the plan" % (kind,))
            kinds.append(kind)
        return kinds
    interval = text_config.get("full_attention_interval")
    if interval and any(key in text_config for key in ("linear_num_value_heads", "linear_num_key_heads")):
        return [FULL_ATTENTION if (index + 1) % interval == 0 else LINEAR_ATTENTION for index in range(count)]
    return [FULL_ATTENTION] * count


def parse_model_config(config):
    """The dimensions SGLang sizes its pools from, read from a parsed ``config.json`` dict.

    Returns a dict: ``architecture``, ``num_layers``, ``full_attention_layers`` / ``linear_attention_layers`` (ids),
    ``hidden_size``, ``vocab_size``, ``num_attention_heads``, ``num_kv_heads``, ``head_dim``, ``v_head_dim``,
    ``intermediate_size``, ``attn_output_gate``, ``linear`` (None for a dense model, else the GDN dimensions and
    ``ssm_dtype``), ``mtp_layers``, ``tie_word_embeddings``, ``context_length``, ``weight_dtype``, ``is_multimodal``
    and ``vision`` (depth, hidden and intermediate size, out_hidden_size; None without a vision tower).
    """
    if not isinstance(config, dict):
        raise ModelConfigError("config.json is not a JSON object")
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        raise ModelConfigError("config.json text_config is not an object")
    architectures = config.get("architectures") or text.get("architectures") or []
    hidden = _positive_int(text, "hidden_size")
    heads = _positive_int(text, "num_attention_heads")
    kinds = layer_types(text)
    head_dim = text.get("head_dim") or hidden // heads
    linear = None
    if LINEAR_ATTENTION in kinds:
        linear = {
            "num_key_heads": _positive_int(text, "linear_num_key_heads"),
            "num_value_heads": _positive_int(text, "linear_num_value_heads"),
            "key_head_dim": _positive_int(text, "linear_key_head_dim"),
            "value_head_dim": _positive_int(text, "linear_value_head_dim"),
            "conv_kernel": _positive_int(text, "linear_conv_kernel_dim", 4),
            # sglang/srt/configs/mamba_utils.py: mamba2_state_dtype - text_config's mamba_ssm_dtype, else float32.
            "ssm_dtype": text.get("mamba_ssm_dtype") or config.get("mamba_ssm_dtype") or "float32",
        }
        dtype_bytes(linear["ssm_dtype"])
    mtp_layers = text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0
    vision_config = config.get("vision_config")
    vision = None
    if isinstance(vision_config, dict) and not config.get("language_model_only"):
        vision = {
            "depth": vision_config.get("depth", 0),
            "hidden_size": vision_config.get("hidden_size", 0),
            "intermediate_size": vision_config.get("intermediate_size", 0),
            "out_hidden_size": vision_config.get("out_hidden_size", hidden),
            "spatial_merge_size": vision_config.get("spatial_merge_size", 2),
        }
    weight_dtype = text.get("dtype") or text.get("torch_dtype") or config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    quantization = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(quantization, dict) and str(quantization.get("quant_method", "")).lower() == "fp8":
        weight_dtype = "fp8"
    return {
        "architecture": architectures[0] if architectures else None,
        "model_type": config.get("model_type"),
        "num_layers": len(kinds),
        "full_attention_layers": [index for index, kind in enumerate(kinds) if kind == FULL_ATTENTION],
        "linear_attention_layers": [index for index, kind in enumerate(kinds) if kind == LINEAR_ATTENTION],
        "hidden_size": hidden,
        "vocab_size": _positive_int(text, "vocab_size", config.get("vocab_size")),
        "num_attention_heads": heads,
        "num_kv_heads": _positive_int(text, "num_key_value_heads", heads),
        "head_dim": head_dim,
        "v_head_dim": text.get("v_head_dim") or head_dim,
        "intermediate_size": _positive_int(text, "intermediate_size"),
        "attn_output_gate": bool(text.get("attn_output_gate", False)),
        "linear": linear,
        "mtp_layers": int(mtp_layers),
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        "context_length": _positive_int(text, "max_position_embeddings", 4096),
        "weight_dtype": weight_dtype,
        "is_multimodal": vision is not None,
        "vision": vision,
    }


def _full_attention_layer_params(dims):
    hidden, head_dim = dims["hidden_size"], dims["head_dim"]
    q_out = dims["num_attention_heads"] * head_dim * (2 if dims["attn_output_gate"] else 1)
    kv_out = dims["num_kv_heads"] * (head_dim + dims["v_head_dim"])
    return hidden * (q_out + kv_out) + dims["num_attention_heads"] * dims["v_head_dim"] * hidden


def _linear_attention_layer_params(dims):
    hidden, linear = dims["hidden_size"], dims["linear"]
    key_dim = linear["num_key_heads"] * linear["key_head_dim"]
    value_dim = linear["num_value_heads"] * linear["value_head_dim"]
    conv_dim = 2 * key_dim + value_dim
    # in_proj_qkv, in_proj_z, in_proj_b and in_proj_a, the depthwise conv, out_proj.
    return (hidden * (conv_dim + value_dim + 2 * linear["num_value_heads"]) + conv_dim * linear["conv_kernel"]
            + value_dim * hidden)


def _mlp_params(dims):
    return 3 * dims["hidden_size"] * dims["intermediate_size"]


def _vision_params(vision):
    if not vision or not vision["depth"]:
        return 0
    hidden, inter = vision["hidden_size"], vision["intermediate_size"]
    merged = hidden * vision["spatial_merge_size"] ** 2
    return vision["depth"] * (4 * hidden * hidden + 2 * hidden * inter) + merged * merged + merged * vision["out_hidden_size"]


def estimate_parameters(dims):
    """Parameter counts by part: ``embeddings`` (input and output), ``layers``, ``mtp``, ``vision``, ``total``."""
    hidden, vocab = dims["hidden_size"], dims["vocab_size"]
    embeddings = vocab * hidden * (1 if dims["tie_word_embeddings"] else 2)
    per_layer = _mlp_params(dims)
    layers = len(dims["full_attention_layers"]) * (per_layer + _full_attention_layer_params(dims))
    if dims["linear"]:
        layers += len(dims["linear_attention_layers"]) * (per_layer + _linear_attention_layer_params(dims))
    # An MTP layer (sglang/srt/models/qwen3_5_mtp.py): fc over [embedding; hidden] plus one full-attention layer.
    mtp = dims["mtp_layers"] * (2 * hidden * hidden + per_layer + _full_attention_layer_params(dims))
    vision = _vision_params(dims["vision"])
    return {"embeddings": embeddings, "layers": layers, "mtp": mtp, "vision": vision,
            "total": embeddings + layers + mtp + vision}


def parse_safetensors_index(index):
    """``metadata.total_size`` (bytes) and whether MTP (``mtp.*``) and vision (``*visual*``) tensors are present."""
    if not isinstance(index, dict):
        raise ModelConfigError("model.safetensors.index.json is not a JSON object")
    total = (index.get("metadata") or {}).get("total_size")
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise ModelConfigError("model.safetensors.index.json has no positive metadata.total_size")
    names = list((index.get("weight_map") or {}).keys())
    return {
        "total_bytes": total,
        "has_mtp": any(name.startswith("mtp.") or ".mtp." in name for name in names) if names else None,
        "has_vision": any("visual" in name for name in names) if names else None,
    }


def weight_bytes(dims, index=None):
    """Checkpoint bytes by part: ``total``, ``mtp``, ``vision``, ``language`` and their ``source``.

    With an index the total is exact and split by the estimated shares of MTP and vision; without one every figure
    is the estimate times the weight dtype's width.
    """
    params = estimate_parameters(dims)
    width = dtype_bytes(dims["weight_dtype"])
    if index is None:
        total = params["total"] * width
        source = "estimated from config.json (%d parameters x %d bytes)" % (params["total"], width)
        mtp, vision = params["mtp"] * width, params["vision"] * width
    else:
        total = index["total_bytes"]
        source = "model.safetensors.index.json metadata.total_size"
        share = total / float(params["total"])
        mtp = int(params["mtp"] * share) if index.get("has_mtp") is not False else 0
        vision = int(params["vision"] * share) if index.get("has_vision") is not False else 0
    return {"total": int(total), "mtp": int(mtp), "vision": int(vision), "language": int(total - mtp - vision),
            "embedding_bytes": dims["vocab_size"] * dims["hidden_size"] * 2, "source": source}
