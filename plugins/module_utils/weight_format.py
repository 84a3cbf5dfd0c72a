# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a checkpoint stores a linear layer's weight: the bytes of one ``in_features x out_features`` layer for each
quantization format SGLang loads, read from ``config.json``'s ``quantization_config``.

The tensors counted per format are the ones the format's checkpoints hold (and SGLang keeps on the GPU after loading):

- unquantized: ``weight`` in the checkpoint dtype.
- ``fp8`` (Hugging Face fine-grained FP8, e.g. Qwen's ``-FP8``): an e4m3 ``weight`` plus a float32 ``weight_scale_inv``
  per ``weight_block_size`` block, or one float32 scale per tensor (and an ``input_scale`` with
  ``activation_scheme: static``).
- ``awq``: ``qweight`` (int32, 32/bits values each), ``qzeros`` (int32, per group) and fp16 ``scales`` per group of
  ``group_size`` input rows.
- ``gptq``: ``qweight``, ``qzeros`` (per group), fp16 ``scales`` (per group) and the int32 ``g_idx`` (one per input
  row); ``group_size: -1`` is one group over all input rows; ``lm_head: true`` quantizes the output head too;
  ``modules_in_block_to_quantize`` limits it to the listed modules.
- ``compressed-tensors`` (llm-compressor): per config group, int weights packed into int32 (``pack-quantized``) or
  one byte each, fp8 weights one byte each, NVFP4 (4-bit float, group 16) with an fp8 scale per group; bf16 scales
  per tensor, channel or group; a zero point per scale when not symmetric.
- ``modelopt`` (NVIDIA Model Optimizer, ``quant_algo`` FP8 or NVFP4): fp8 weights with per-tensor scales, or NVFP4
  weights (two per byte) with an fp8 scale per 16 and float32 global scales.
- ``mxfp4`` (gpt-oss): 4-bit weights (two per byte) and a uint8 e8m0 scale per 32.
- ``bitsandbytes``: 4-bit (nf4/fp4, two per byte, a float32 ``absmax`` per 64 - with double quantization a uint8 per
  64 and a float32 per 256 blocks) or 8-bit (one byte each and a float32 scale per output row).

Which modules a format leaves unquantized comes from the config (``modules_to_not_convert``, ``ignored_layers``,
``ignore``, ``exclude_modules``, ``llm_int8_skip_modules``); embeddings are never quantized and the output head only
where the format says so. Other ``quant_method`` values are refused by name (UnsupportedFormat): the plan does not
guess the bytes of a format it does not model.
"""

from __future__ import annotations

import fnmatch
import math
import re

UNQUANTIZED = "unquantized"
MODELLED = ("fp8", "awq", "gptq", "compressed-tensors", "modelopt", "mxfp4", "bitsandbytes")


class UnsupportedFormat(ValueError):
    """The checkpoint's quantization format is not one the plan models (the message names it and what is)."""


def _int(value, name, allowed=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnsupportedFormat("quantization_config %s=%r is not an integer" % (name, value))
    if allowed is not None and value not in allowed:
        raise UnsupportedFormat("quantization_config %s=%r is not modelled (modelled: %s)"
                                % (name, value, ", ".join(str(item) for item in allowed)))
    return value


def _patterns(value, name):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise UnsupportedFormat("quantization_config %s is not a list of module names" % name)
    return list(value)


def module_matches(name, pattern):
    """Whether a module name (``model.layers.3.mlp.gate``) is named by a skip pattern: ``re:<regex>`` (matched from
    the start, as compressed-tensors does), a glob with ``*`` (modelopt, gpt-oss), else a dotted name that equals the
    module, one of its parents, or its dotted tail (``lm_head``, ``visual``, ``mlp.gate``) - never a partial component:
    ``model.layers.1`` does not name ``model.layers.10``."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], name) is not None
        except re.error:
            raise UnsupportedFormat("quantization_config has an invalid regular expression %r" % pattern) from None
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    dotted, module = "." + pattern.strip(".") + ".", "." + name + "."
    return dotted in module


class PatternSet:
    """Skip patterns compiled for many lookups: plain dotted names in a set (a module is named when one of its runs
    of consecutive components is in it: the same rule as module_matches), globs and ``re:`` expressions one by one."""

    def __init__(self, patterns):
        self.plain = set()
        self.other = []
        for pattern in patterns:
            if pattern.startswith("re:") or "*" in pattern or "?" in pattern:
                module_matches("x", pattern)      # an invalid expression is refused here, not on first use
                self.other.append(pattern)
            else:
                self.plain.add(pattern.strip("."))

    def __bool__(self):
        return bool(self.plain or self.other)

    def names(self, name):
        if self.plain:
            parts = name.split(".")
            for start in range(len(parts)):
                for end in range(start + 1, len(parts) + 1):
                    if ".".join(parts[start:end]) in self.plain:
                        return True
        return any(module_matches(name, pattern) for pattern in self.other)


class WeightFormat:
    """One checkpoint's storage of linear weights; ``linear_bytes(name, k, n)`` is the bytes of one layer."""

    def __init__(self, method, description, dtype_bytes, skip=(), quantize_only=None, lm_head=False, **scheme):
        self.method = method
        self.description = description
        self.dtype_bytes = dtype_bytes
        self.skip = list(skip)
        self.quantize_only = quantize_only
        self._skip = PatternSet(self.skip)
        self._only = PatternSet(quantize_only) if quantize_only is not None else None
        self.lm_head = lm_head
        self.scheme = scheme

    def quantizes(self, name):
        """Whether the module's weight is stored quantized."""
        if self.method == UNQUANTIZED:
            return False
        if name == "lm_head" or name.endswith(".lm_head"):
            return self.lm_head and not self._skip.names(name)
        if self._skip.names(name):
            return False
        if self._only is not None:
            return self._only.names(name)
        return True

    def linear_bytes(self, name, in_features, out_features):
        """Bytes of the module's stored weight and its scales, zero points and indices."""
        k, n = in_features, out_features
        if not self.quantizes(name):
            return k * n * self.dtype_bytes
        scheme = self.scheme
        kind = scheme["kind"]
        if kind == "int":
            bits, group = scheme["bits"], scheme.get("group") or k
            groups = math.ceil(k / float(group))
            weight = math.ceil(k * n * bits / 8.0) if scheme.get("packed", True) else k * n
            scales = groups * n * scheme.get("scale_bytes", 2)
            zeros = math.ceil(groups * n * bits / 8.0) if scheme.get("zeros") else 0
            g_idx = k * 4 if scheme.get("g_idx") else 0
            return weight + scales + zeros + g_idx
        if kind == "fp8":
            block = scheme.get("block")
            if block:
                scales = math.ceil(n / float(block[0])) * math.ceil(k / float(block[1])) * 4
            elif scheme.get("per_channel"):
                scales = n * scheme.get("scale_bytes", 4)
            else:
                scales = 4
            return k * n + scales + (4 if scheme.get("input_scale") else 0)
        if kind == "fp4":
            group = scheme["group"]
            return math.ceil(k * n / 2.0) + math.ceil(k / float(group)) * n + scheme.get("global_bytes", 0)
        if kind == "bnb4":
            blocks = math.ceil(k * n / 64.0)
            absmax = blocks + math.ceil(blocks / 256.0) * 4 + 16 * 4 if scheme.get("double") else blocks * 4
            return math.ceil(k * n / 2.0) + absmax + 16 * 4
        if kind == "bnb8":
            return k * n + n * 4
        raise UnsupportedFormat("weight storage %r is not modelled" % kind)

    def as_dict(self):
        return {"method": self.method, "description": self.description, "skip": self.skip,
                "quantize_only": self.quantize_only, "lm_head_quantized": self.lm_head}


def _fp8(config, dtype_bytes):
    block = config.get("weight_block_size")
    if block is not None:
        if not (isinstance(block, list) and len(block) == 2 and all(isinstance(item, int) and item > 0 for item in block)):
            raise UnsupportedFormat("quantization_config weight_block_size=%r is not two positive integers" % (block,))
    static = str(config.get("activation_scheme", "dynamic")).lower() == "static"
    skip = _patterns(config.get("modules_to_not_convert"), "modules_to_not_convert") + _patterns(
        config.get("ignored_layers"), "ignored_layers")
    text = "fp8 e4m3, %s scales" % ("block %dx%d" % tuple(block) if block else "per-tensor")
    return WeightFormat("fp8", text, dtype_bytes, skip, kind="fp8", block=block, input_scale=static)


def _awq(config, dtype_bytes):
    bits = _int(config.get("bits", config.get("w_bit", 4)), "bits", (4, 8))
    group = _int(config.get("group_size", config.get("q_group_size", 128)), "group_size")
    if group <= 0:
        raise UnsupportedFormat("quantization_config group_size=%d is not modelled for AWQ" % group)
    zeros = bool(config.get("zero_point", True))
    skip = _patterns(config.get("modules_to_not_convert"), "modules_to_not_convert")
    return WeightFormat("awq", "AWQ %d-bit, group %d%s" % (bits, group, ", zero points" if zeros else ""), dtype_bytes,
                        skip, kind="int", bits=bits, group=group, zeros=zeros, scale_bytes=2)


def _gptq(config, dtype_bytes):
    bits = _int(config.get("bits", 4), "bits", (2, 3, 4, 8))
    group = _int(config.get("group_size", 128), "group_size")
    if group == 0 or group < -1:
        raise UnsupportedFormat("quantization_config group_size=%d is not modelled for GPTQ" % group)
    if config.get("dynamic"):
        raise UnsupportedFormat("GPTQ with per-module 'dynamic' overrides is not modelled")
    only = config.get("modules_in_block_to_quantize")
    quantize_only = None
    if only:
        # A list of lists of module names inside each decoder block (GPTQModel / AutoGPTQ).
        flat = [name for group_names in only for name in (group_names if isinstance(group_names, list) else [group_names])]
        quantize_only = _patterns(flat, "modules_in_block_to_quantize")
    return WeightFormat("gptq", "GPTQ %d-bit, %s" % (bits, "per channel" if group == -1 else "group %d" % group),
                        dtype_bytes, _patterns(config.get("modules_to_not_convert"), "modules_to_not_convert"),
                        quantize_only, bool(config.get("lm_head", False)), kind="int", bits=bits,
                        group=None if group == -1 else group, zeros=True, g_idx=True, scale_bytes=2)


def _compressed_tensors(config, dtype_bytes):
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise UnsupportedFormat("compressed-tensors quantization_config has no config_groups")
    if len(groups) > 1:
        raise UnsupportedFormat("compressed-tensors with %d config groups (mixed schemes) is not modelled" % len(groups))
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        raise UnsupportedFormat("compressed-tensors config group has no weights scheme")
    targets = _patterns(group.get("targets") or ["Linear"], "targets")
    quantize_only = None if targets == ["Linear"] else [target for target in targets if target != "Linear"]
    skip = _patterns(config.get("ignore"), "ignore")
    bits = _int(weights.get("num_bits"), "num_bits", (4, 8))
    kind = str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy", "tensor")).lower()
    size = weights.get("group_size")
    fmt = str(config.get("format") or "")
    lm_head = any(module_matches("lm_head", target) for target in targets if target != "Linear")
    if kind == "float" and bits == 4:
        if strategy not in ("tensor_group", "group") or size not in (16, None):
            raise UnsupportedFormat("compressed-tensors 4-bit float with strategy %s, group %r is not modelled"
                                    % (strategy, size))
        return WeightFormat("compressed-tensors", "compressed-tensors NVFP4 (%s)" % (fmt or "nvfp4"), dtype_bytes, skip,
                            quantize_only, lm_head, kind="fp4", group=16, global_bytes=4)
    if kind == "float" and bits == 8:
        if strategy == "block":
            block = weights.get("block_structure")
            if not (isinstance(block, list) and len(block) == 2
                    and all(isinstance(item, int) and not isinstance(item, bool) and item > 0 for item in block)):
                raise UnsupportedFormat("compressed-tensors block_structure=%r is not two positive integers" % (block,))
            return WeightFormat("compressed-tensors", "compressed-tensors fp8, block %r" % (block,), dtype_bytes, skip,
                                quantize_only, lm_head, kind="fp8", block=block)
        if strategy not in ("tensor", "channel"):
            raise UnsupportedFormat("compressed-tensors fp8 with strategy %s is not modelled" % strategy)
        return WeightFormat("compressed-tensors", "compressed-tensors fp8, per %s" % strategy, dtype_bytes, skip,
                            quantize_only, lm_head, kind="fp8", per_channel=strategy == "channel", scale_bytes=2)
    if kind != "int":
        raise UnsupportedFormat("compressed-tensors weights of type %s is not modelled" % kind)
    if strategy == "group":
        group_size = _int(size, "group_size")
    elif strategy in ("channel", "tensor"):
        group_size = None
    else:
        raise UnsupportedFormat("compressed-tensors int weights with strategy %s are not modelled" % strategy)
    zeros = not weights.get("symmetric", True)
    packed = fmt == "pack-quantized" or bits == 4
    text = "compressed-tensors int%d, %s%s" % (bits, "group %d" % group_size if group_size else "per %s" % strategy,
                                               ", zero points" if zeros else "")
    # A per-tensor scale is counted as one per output row: n x 2 bytes, nothing next to the weight.
    return WeightFormat("compressed-tensors", text, dtype_bytes, skip, quantize_only, lm_head, kind="int", bits=bits,
                        group=group_size, zeros=zeros, packed=packed, scale_bytes=2)


def _modelopt(config, dtype_bytes):
    # config.json's quantization_config as Model Optimizer exports it (hf_quant_config.json's "quantization" flattened).
    inner = config.get("quantization") if isinstance(config.get("quantization"), dict) else config
    algorithm = str(inner.get("quant_algo") or "").upper()
    skip = _patterns(inner.get("exclude_modules"), "exclude_modules")
    if algorithm == "FP8":
        return WeightFormat("modelopt", "Model Optimizer FP8, per-tensor scales", dtype_bytes, skip, kind="fp8",
                            input_scale=True)
    if algorithm == "NVFP4":
        group = _int(inner.get("group_size", 16), "group_size", (16,))
        return WeightFormat("modelopt", "Model Optimizer NVFP4, group %d" % group, dtype_bytes, skip, kind="fp4",
                            group=group, global_bytes=8)
    raise UnsupportedFormat("Model Optimizer quant_algo %r is not modelled (modelled: FP8, NVFP4)" % (algorithm or None))


def _mxfp4(config, dtype_bytes):
    skip = _patterns(config.get("modules_to_not_convert"), "modules_to_not_convert")
    return WeightFormat("mxfp4", "MXFP4, e8m0 scale per 32", dtype_bytes, skip, kind="fp4", group=32)


def _bitsandbytes(config, dtype_bytes):
    skip = _patterns(config.get("llm_int8_skip_modules"), "llm_int8_skip_modules")
    if config.get("load_in_4bit"):
        double = bool(config.get("bnb_4bit_use_double_quant", False))
        kind = config.get("bnb_4bit_quant_type", "fp4")
        return WeightFormat("bitsandbytes", "bitsandbytes 4-bit %s%s" % (kind, ", double quantization" if double else ""),
                            dtype_bytes, skip, kind="bnb4", double=double)
    if config.get("load_in_8bit"):
        return WeightFormat("bitsandbytes", "bitsandbytes 8-bit", dtype_bytes, skip, kind="bnb8")
    raise UnsupportedFormat("bitsandbytes quantization_config with neither load_in_4bit nor load_in_8bit")


_PARSERS = {"fp8": _fp8, "awq": _awq, "gptq": _gptq, "compressed-tensors": _compressed_tensors,
            "modelopt": _modelopt, "modelopt_fp4": _modelopt, "mxfp4": _mxfp4, "bitsandbytes": _bitsandbytes}


def parse_weight_format(quantization_config, dtype_bytes=2):
    """The WeightFormat of a ``quantization_config`` (None or {}: unquantized in ``dtype_bytes``)."""
    if not quantization_config:
        return WeightFormat(UNQUANTIZED, "unquantized, %d bytes per weight" % dtype_bytes, dtype_bytes)
    if not isinstance(quantization_config, dict):
        raise UnsupportedFormat("quantization_config is not an object")
    method = str(quantization_config.get("quant_method") or "").lower()
    parser = _PARSERS.get(method)
    if parser is None:
        raise UnsupportedFormat("the memory plan does not model quant_method %r (modelled: %s)"
                                % (quantization_config.get("quant_method"), ", ".join(MODELLED)))
    return parser(quantization_config, dtype_bytes)
