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
The shards' safetensors headers (tensor names, dtypes and shapes, read without the tensors) give every part exactly;
they are used when their sum agrees with the index's total (a stand-in or a damaged checkpoint does not).

Mixture-of-experts layers (Qwen2/3-MoE, Qwen3-Next and Qwen3.5/3.6 MoE, Mixtral, gpt-oss) count every routed expert
(``num_experts`` x 3 x hidden x ``moe_intermediate_size``), the shared expert and its gate, and the router; which
layers are sparse follows ``decoder_sparse_step``/``mlp_only_layers`` (Qwen) or ``first_k_dense_replace`` (DeepSeek
style). Quantized checkpoints count each linear layer as its format stores it (weight_format). Multi-head latent
attention (DeepSeek V2/V3, ``kv_lora_rank``) and sliding-window layers are refused: their KV pools are not modelled.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils import weight_format

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


# Bounds on what a config.json may ask the plan to enumerate (the largest public models have 256-512 experts and
# under 200 layers): a careless or hostile config is refused, not walked for minutes.
MAX_LAYERS = 1024
MAX_EXPERTS = 4096


def layer_types(text_config):
    """Each layer's kind, ``full_attention`` or ``linear_attention``.

    ``layer_types`` when the config lists them; else Qwen3-Next's rule, a full-attention layer every
    ``full_attention_interval`` layers (``sglang/srt/configs/qwen3_next.py``: Qwen3NextConfig.layers_block_type);
    else every layer is full attention (a dense model).
    """
    count = _positive_int(text_config, "num_hidden_layers")
    if count > MAX_LAYERS:
        raise ModelConfigError("config.json has %d layers, more than the %d the plan reads" % (count, MAX_LAYERS))
    listed = text_config.get("layer_types")
    if listed:
        if len(listed) != count:
            raise ModelConfigError("config.json lists %d layer_types for %d layers" % (len(listed), count))
        kinds = []
        for kind in listed:
            if kind == "sliding_attention":
                raise ModelConfigError("config.json has sliding-window attention layers: SGLang's separate pools for "
                                       "them are not modelled by the plan")
            if kind not in (FULL_ATTENTION, LINEAR_ATTENTION):
                raise ModelConfigError("config.json layer type %r is not supported by the plan" % (kind,))
            kinds.append(kind)
        return kinds
    interval = text_config.get("full_attention_interval")
    if interval and any(key in text_config for key in ("linear_num_value_heads", "linear_num_key_heads")):
        return [FULL_ATTENTION if (index + 1) % interval == 0 else LINEAR_ATTENTION for index in range(count)]
    return [FULL_ATTENTION] * count


def parse_model_config(config, hf_quant_config=None):
    """The dimensions SGLang sizes its pools from, read from a parsed ``config.json`` dict.

    Returns a dict: ``architecture``, ``num_layers``, ``full_attention_layers`` / ``linear_attention_layers`` (ids),
    ``hidden_size``, ``vocab_size``, ``num_attention_heads``, ``num_kv_heads``, ``head_dim``, ``v_head_dim``,
    ``intermediate_size``, ``attn_output_gate``, ``linear`` (None for a dense model, else the GDN dimensions and
    ``ssm_dtype``), ``mtp_layers``, ``tie_word_embeddings``, ``context_length``, ``weight_dtype``, ``is_multimodal``
    and ``vision`` (depth, hidden and intermediate size, out_hidden_size; None without a vision tower), ``moe``
    (None for a dense model) and ``quantization_config`` (config.json's, else ``hf_quant_config``'s: the parsed
    hf_quant_config.json of a Model Optimizer checkpoint). Raises ModelConfigError for what the plan does not model.
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
        depth = vision_config.get("depth", 0)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_LAYERS:
            raise ModelConfigError("config.json vision_config depth=%r is not a layer count" % (depth,))
        for key in ("hidden_size", "intermediate_size", "out_hidden_size", "spatial_merge_size"):
            value = vision_config.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ModelConfigError("config.json vision_config %s=%r is not a size" % (key, value))
        vision = {
            "depth": vision_config.get("depth", 0),
            "hidden_size": vision_config.get("hidden_size", 0),
            "intermediate_size": vision_config.get("intermediate_size", 0),
            "out_hidden_size": vision_config.get("out_hidden_size", hidden),
            "spatial_merge_size": vision_config.get("spatial_merge_size", 2),
        }
    weight_dtype = text.get("dtype") or text.get("torch_dtype") or config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    if str(weight_dtype).replace("torch.", "").lower() not in DTYPE_BYTES:
        raise ModelConfigError("config.json torch_dtype %r is not supported by the plan" % (weight_dtype,))
    if text.get("kv_lora_rank"):
        raise ModelConfigError("config.json describes multi-head latent attention (kv_lora_rank, DeepSeek V2/V3 style): "
                               "its compressed KV cache is not modelled by the plan")
    quantization = config.get("quantization_config") or text.get("quantization_config") or None
    if quantization is None and hf_quant_config is not None:
        # Model Optimizer checkpoints keep it in hf_quant_config.json; SGLang reads that file when config.json has none.
        if not isinstance(hf_quant_config, dict) or not isinstance(hf_quant_config.get("quantization"), dict):
            raise ModelConfigError("hf_quant_config.json has no quantization object")
        quantization = dict(hf_quant_config["quantization"], quant_method="modelopt")
    moe = _moe(text, len(kinds))
    # Every layer sparse (Qwen3.5 MoE): no dense MLP, and config.json may have no intermediate_size.
    dense_layers = len(kinds) - (len(moe["sparse_layers"]) if moe else 0)
    intermediate = _positive_int(text, "intermediate_size") if dense_layers or "intermediate_size" in text else None
    try:
        # Refused here, with the format named, rather than planned at the wrong bytes per weight.
        weight_format.parse_weight_format(quantization, dtype_bytes(weight_dtype))
    except weight_format.UnsupportedFormat as exc:
        raise ModelConfigError(str(exc)) from None
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
        "intermediate_size": intermediate,
        "attn_output_gate": bool(text.get("attn_output_gate", False)),
        "linear": linear,
        "mtp_layers": int(mtp_layers),
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        "context_length": _positive_int(text, "max_position_embeddings", 4096),
        "weight_dtype": weight_dtype,
        "is_multimodal": vision is not None,
        "vision": vision,
        "moe": moe,
        "quantization_config": quantization,
    }


def _moe(text, layers):
    """The mixture-of-experts dimensions, or None for a dense model: ``num_experts``, ``experts_per_token``,
    ``moe_intermediate_size``, ``shared_intermediate_size`` (0 without a shared expert), ``shared_expert_gate`` and
    ``sparse_layers`` (ids)."""
    experts = text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts")
    if not experts:
        return None
    experts = _positive_int(text, next(key for key in ("num_experts", "num_local_experts", "n_routed_experts")
                                       if text.get(key)))
    if experts > MAX_EXPERTS:
        raise ModelConfigError("config.json has %d experts, more than the %d the plan reads" % (experts, MAX_EXPERTS))
    inter = text.get("moe_intermediate_size") or text.get("intermediate_size")
    if isinstance(inter, bool) or not isinstance(inter, int) or inter <= 0:
        raise ModelConfigError("config.json has experts but no positive moe_intermediate_size")
    shared = _positive_int(text, "shared_expert_intermediate_size", 0) if text.get("shared_expert_intermediate_size") else 0
    if not shared and text.get("n_shared_experts"):
        shared = _positive_int(text, "n_shared_experts") * inter
    skipped = text.get("mlp_only_layers") or []
    if not isinstance(skipped, list) or not all(isinstance(index, int) and not isinstance(index, bool) for index in skipped):
        raise ModelConfigError("config.json mlp_only_layers is not a list of layer numbers")
    skipped = set(skipped)
    if "first_k_dense_replace" in text:
        first = text.get("first_k_dense_replace") or 0
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ModelConfigError("config.json first_k_dense_replace=%r is not a layer count" % (first,))
        every = _positive_int(text, "moe_layer_freq", 1)
        sparse = [index for index in range(layers) if index >= first and index % every == 0]
    else:
        step = _positive_int(text, "decoder_sparse_step", 1)
        sparse = [index for index in range(layers) if index not in skipped and (index + 1) % step == 0]
    return {"num_experts": experts, "experts_per_token": text.get("num_experts_per_tok"),
            "moe_intermediate_size": inter, "shared_intermediate_size": int(shared),
            # Qwen2-MoE/Qwen3-Next/Qwen3.5 gate the shared expert with one output; DeepSeek's shared experts are not.
            "shared_expert_gate": bool(shared) and "shared_expert_intermediate_size" in text,
            "sparse_layers": sparse}


_EXPERT_INDEX = re.compile(r"\.experts\.[0-9]+\.")


def _names_an_expert(pattern):
    """Whether a skip pattern may tell one expert from another (anything after "experts" but all of them)."""
    if "experts" not in pattern:
        return False
    tail = pattern.split("experts", 1)[1]
    return tail not in ("", ".", ".*") and not tail.startswith(".*.")


# Parts of a checkpoint: what the plan puts where (the draft's MTP head, the vision tower, the language model).
PART_LANGUAGE, PART_MTP, PART_VISION = "language", "mtp", "vision"


def _attention_modules(dims, prefix):
    hidden, head_dim, heads, kv = dims["hidden_size"], dims["head_dim"], dims["num_attention_heads"], dims["num_kv_heads"]
    q_out = heads * head_dim * (2 if dims["attn_output_gate"] else 1)
    return [(prefix + ".self_attn.q_proj", hidden, q_out, "attention"),
            (prefix + ".self_attn.k_proj", hidden, kv * head_dim, "kv"),
            (prefix + ".self_attn.v_proj", hidden, kv * dims["v_head_dim"], "kv"),
            (prefix + ".self_attn.o_proj", heads * dims["v_head_dim"], hidden, "attention")]


def _linear_attention_modules(dims, prefix):
    hidden, linear = dims["hidden_size"], dims["linear"]
    key_dim = linear["num_key_heads"] * linear["key_head_dim"]
    value_dim = linear["num_value_heads"] * linear["value_head_dim"]
    conv_dim = 2 * key_dim + value_dim
    # in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (Qwen3.5 names), out_proj; the depthwise conv is no linear layer.
    return [(prefix + ".linear_attn.in_proj_qkv", hidden, conv_dim, "linear_attention"),
            (prefix + ".linear_attn.in_proj_z", hidden, value_dim, "linear_attention"),
            (prefix + ".linear_attn.in_proj_b", hidden, linear["num_value_heads"], "linear_attention"),
            (prefix + ".linear_attn.in_proj_a", hidden, linear["num_value_heads"], "linear_attention"),
            (prefix + ".linear_attn.out_proj", value_dim, hidden, "linear_attention")]


def _mlp_modules(dims, prefix, sparse):
    hidden, moe = dims["hidden_size"], dims["moe"]
    if not sparse:
        inter = dims["intermediate_size"]
        return [(prefix + ".mlp." + name, k, n, "mlp") for name, k, n in
                (("gate_proj", hidden, inter), ("up_proj", hidden, inter), ("down_proj", inter, hidden))]
    inter, experts = moe["moe_intermediate_size"], moe["num_experts"]
    modules = [(prefix + ".mlp.gate", hidden, experts, "router")]
    modules += [(prefix + ".mlp.experts.%d.%s" % (expert, name), k, n, "experts") for expert in range(experts)
                for name, k, n in (("gate_proj", hidden, inter), ("up_proj", hidden, inter), ("down_proj", inter, hidden))]
    shared = moe["shared_intermediate_size"]
    if shared:
        modules += [(prefix + ".mlp.shared_expert." + name, k, n, "shared_experts") for name, k, n in
                    (("gate_proj", hidden, shared), ("up_proj", hidden, shared), ("down_proj", shared, hidden))]
        if moe["shared_expert_gate"]:
            modules.append((prefix + ".mlp.shared_expert_gate", hidden, 1, "router"))
    return modules


def _vision_modules(vision):
    if not vision or not vision["depth"]:
        return []
    hidden, inter = vision["hidden_size"], vision["intermediate_size"]
    merged = hidden * vision["spatial_merge_size"] ** 2
    modules = []
    for block in range(vision["depth"]):
        prefix = "model.visual.blocks.%d" % block
        modules += [(prefix + ".attn.qkv", hidden, 3 * hidden, "vision"), (prefix + ".attn.proj", hidden, hidden, "vision"),
                    (prefix + ".mlp.linear_fc1", hidden, inter, "vision"), (prefix + ".mlp.linear_fc2", inter, hidden, "vision")]
    return modules + [("model.visual.merger.linear_fc1", merged, merged, "vision"),
                      ("model.visual.merger.linear_fc2", merged, vision["out_hidden_size"], "vision")]


def linear_modules(dims):
    """Every linear layer of the checkpoint: ``(name, in_features, out_features, kind, part)`` with Hugging Face
    (Qwen) module names, the names quantization configs skip modules by. The embeddings are not linear layers;
    ``lm_head`` is listed unless it is tied to them."""
    modules = []
    sparse = set(dims["moe"]["sparse_layers"]) if dims["moe"] else set()
    full = set(dims["full_attention_layers"])
    for layer in range(dims["num_layers"]):
        prefix = "model.layers.%d" % layer
        mixer = _attention_modules(dims, prefix) if layer in full else _linear_attention_modules(dims, prefix)
        modules += [module + (PART_LANGUAGE,) for module in mixer + _mlp_modules(dims, prefix, layer in sparse)]
    hidden = dims["hidden_size"]
    for layer in range(dims["mtp_layers"]):
        # An MTP layer (sglang/srt/models/qwen3_5_mtp.py): fc over [embedding; hidden] plus one full-attention layer,
        # with the model's MLP (its experts for an MoE model).
        prefix = "mtp.layers.%d" % layer
        mtp = [("mtp.fc" if layer == 0 else "mtp.fc.%d" % layer, 2 * hidden, hidden, "mlp")]
        mtp += _attention_modules(dims, prefix) + _mlp_modules(dims, prefix, bool(dims["moe"]))
        modules += [module + (PART_MTP,) for module in mtp]
    modules += [module + (PART_VISION,) for module in _vision_modules(dims["vision"])]
    if not dims["tie_word_embeddings"]:
        modules.append(("lm_head", hidden, dims["vocab_size"], "lm_head", PART_LANGUAGE))
    return modules


def _conv_params(dims):
    if not dims["linear"]:
        return 0
    linear = dims["linear"]
    conv_dim = 2 * linear["num_key_heads"] * linear["key_head_dim"] + linear["num_value_heads"] * linear["value_head_dim"]
    return len(dims["linear_attention_layers"]) * conv_dim * linear["conv_kernel"]


def estimate_parameters(dims):
    """Parameter counts by part: ``embeddings`` (input and output), ``layers``, ``mtp``, ``vision``, ``total``, and
    ``experts`` (the routed experts' share of ``layers``)."""
    counts = {"embeddings": dims["vocab_size"] * dims["hidden_size"], "layers": _conv_params(dims), "mtp": 0,
              "vision": 0, "experts": 0}
    for _name, k, n, kind, part in linear_modules(dims):
        if kind == "lm_head":
            counts["embeddings"] += k * n
        elif part == PART_LANGUAGE:
            counts["layers"] += k * n
            counts["experts"] += k * n if kind == "experts" else 0
        else:
            counts[part] += k * n
    if dims["tie_word_embeddings"]:
        counts["embeddings"] = dims["vocab_size"] * dims["hidden_size"]
    counts["total"] = counts["embeddings"] + counts["layers"] + counts["mtp"] + counts["vision"]
    return counts


def estimate_bytes(dims):
    """Checkpoint bytes by part and kind, each linear layer counted as its format stores it: ``{"parts": {language,
    mtp, vision}, "kinds": {embedding, lm_head, attention, kv, linear_attention, mlp, experts, shared_experts,
    router, vision}, "total", "format"}``."""
    width = dtype_bytes(dims["weight_dtype"])
    fmt = weight_format.parse_weight_format(dims.get("quantization_config"), width)
    embedding = dims["vocab_size"] * dims["hidden_size"] * width
    parts = {PART_LANGUAGE: embedding + _conv_params(dims) * width, PART_MTP: 0, PART_VISION: 0}
    kinds = {"embedding": embedding}
    # Experts of one layer are stored alike unless a pattern names one of them: one computation per layer and shape.
    alike = not any(_names_an_expert(pattern) for pattern in fmt.skip + list(fmt.quantize_only or []))
    cache = {}
    for name, k, n, kind, part in linear_modules(dims):
        if alike and kind == "experts":
            key = (_EXPERT_INDEX.sub(".experts.0.", name), k, n)
            size = cache.get(key)
            if size is None:
                size = cache[key] = fmt.linear_bytes(key[0], k, n)
        else:
            size = fmt.linear_bytes(name, k, n)
        parts[part] += size
        kinds[kind] = kinds.get(kind, 0) + size
    return {"parts": parts, "kinds": kinds, "total": sum(parts.values()), "format": fmt.as_dict(),
            "format_description": fmt.description}


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
        "has_mtp": any(tensor_part(name) == PART_MTP for name in names) if names else None,
        "has_vision": any(tensor_part(name) == PART_VISION for name in names) if names else None,
    }


# safetensors dtypes and their bits per element (the format's Dtype list).
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6,
    "F6_E3M2": 6,
}


def tensor_part(name):
    """The part a checkpoint tensor belongs to, by its name: ``mtp`` (``mtp.*``, ``model.mtp.*``), ``vision``
    (``visual``, ``vision_tower``, ``vision_model``) or ``language``."""
    parts = name.split(".")
    if parts[0] == "mtp" or "mtp" in parts[:2]:
        return PART_MTP
    if any(part in ("visual", "vision_tower", "vision_model") for part in parts[:3]):
        return PART_VISION
    return PART_LANGUAGE


def tensor_kind(name):
    """``embedding``, ``lm_head``, ``kv``, ``router``, ``experts`` or ``other`` for a checkpoint tensor name."""
    if "embed_tokens" in name:
        return "embedding"
    if name.startswith("lm_head") or ".lm_head." in name:
        return "lm_head"
    if ".k_proj." in name or ".v_proj." in name:
        return "kv"
    if name.endswith(".mlp.gate.weight") or ".mlp.router." in name or "shared_expert_gate" in name or \
            ".block_sparse_moe.gate." in name:
        return "router"
    if ".experts." in name:
        return "experts"
    return "other"


def header_bytes(headers):
    """Exact bytes by part and kind from safetensors headers (``{shard: header dict}``); ModelConfigError for an
    entry that is not a tensor of a known dtype whose data size matches its shape."""
    parts = {PART_LANGUAGE: 0, PART_MTP: 0, PART_VISION: 0}
    kinds = {}
    for shard, header in headers.items():
        if not isinstance(header, dict):
            raise ModelConfigError("the safetensors header of %s is not an object" % shard)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if not isinstance(entry, dict):
                raise ModelConfigError("%s: tensor %.200s has no description" % (shard, name))
            bits = SAFETENSORS_DTYPE_BITS.get(entry.get("dtype"))
            shape, offsets = entry.get("shape"), entry.get("data_offsets")
            if bits is None or not isinstance(shape, list) or not all(
                    isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape) or not (
                    isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
                raise ModelConfigError("%s: tensor %.200s has an unknown dtype or a bad shape" % (shard, name))
            count = 1
            for size in shape:
                count *= size
            size = offsets[1] - offsets[0]
            if size != (count * bits + 7) // 8:
                raise ModelConfigError("%s: tensor %.200s holds %d bytes, its shape and dtype need %d"
                                       % (shard, name, size, (count * bits + 7) // 8))
            parts[tensor_part(name)] += size
            kind = tensor_kind(name)
            kinds[kind] = kinds.get(kind, 0) + size
    return {"parts": parts, "kinds": kinds, "total": sum(parts.values())}


# The shards' headers are believed only when they sum to the index's total within this share: a checkpoint whose
# headers hold less than its index announces (a stand-in, a damaged copy) is planned from the index.
HEADER_AGREEMENT = 0.01


def weight_bytes(dims, index=None, headers=None):
    """Checkpoint bytes by part: ``total``, ``mtp``, ``vision``, ``language``, ``embedding_bytes`` (the bf16 input
    embedding, which the MTP draft holds a copy of), ``kv_proj`` and ``router`` (the kinds that tensor parallelism
    replicates), ``experts``, ``format`` (how the linear layers are stored) and ``source``.

    From the shards' safetensors ``headers`` when they agree with the index (exact); else the index's total split by
    the estimate's shares; else the estimate from config.json and the quantization format.
    """
    estimate = estimate_bytes(dims)
    found = header_bytes(headers) if headers else None
    if found is not None and index is not None and \
            abs(found["total"] - index["total_bytes"]) > HEADER_AGREEMENT * index["total_bytes"]:
        note = "the shards' headers hold %d bytes, the index says %d" % (found["total"], index["total_bytes"])
        found = None
    else:
        note = None
    if found is not None:
        parts, kinds, source = found["parts"], found["kinds"], "safetensors headers (%d shard(s))" % len(headers)
    elif index is not None:
        share = index["total_bytes"] / float(estimate["total"])
        parts = {part: int(size * share) for part, size in estimate["parts"].items()}
        if index.get("has_mtp") is False:
            parts[PART_MTP] = 0
        if index.get("has_vision") is False:
            parts[PART_VISION] = 0
        parts[PART_LANGUAGE] = index["total_bytes"] - parts[PART_MTP] - parts[PART_VISION]
        kinds = {kind: int(size * share) for kind, size in estimate["kinds"].items()}
        source = "model.safetensors.index.json metadata.total_size" + (" (%s)" % note if note else "")
    else:
        parts, kinds = estimate["parts"], estimate["kinds"]
        source = "estimated from config.json (%s)" % estimate["format_description"]
    total = sum(parts.values())
    return {"total": int(total), "mtp": int(parts[PART_MTP]), "vision": int(parts[PART_VISION]),
            "language": int(parts[PART_LANGUAGE]),
            "embedding_bytes": dims["vocab_size"] * dims["hidden_size"] * 2,
            "kv_proj": int(kinds.get("kv", 0)), "router": int(kinds.get("router", 0)),
            "experts": int(kinds.get("experts", 0)), "format": estimate["format_description"],
            "estimated_total": int(estimate["total"]), "source": source}
