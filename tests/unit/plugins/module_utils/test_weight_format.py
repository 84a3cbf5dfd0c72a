# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""weight_format: the bytes a checkpoint stores per linear layer, for the quantization formats SGLang loads.

The fp8, MXFP4 and NVFP4 cases read verbatim public configs (data/models/, sources in data/sglang_startup/README.md).
No verbatim AWQ, GPTQ, compressed-tensors or bitsandbytes config was found (README, "Searched for and not found"): those
cases are labelled synthetic configs with the fields each format's documentation names, and check the arithmetic of the
tensors the format stores.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import weight_format

MODELS = pathlib.Path(__file__).parent / "data" / "models"


def verbatim(name):
    return json.loads((MODELS / name).read_text())


# A down_proj of Qwen3-30B-A3B's experts: 768 in, 2048 out.
K, N = 768, 2048


def test_unquantized_is_the_dtype_width():
    fmt = weight_format.parse_weight_format(None, 2)
    assert fmt.method == "unquantized" and fmt.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N * 2


def test_fp8_block_scales_and_the_modules_it_leaves_in_bf16():
    config = verbatim("qwen3-30b-a3b-fp8-aiconfigurator.json")["quantization_config"]
    fmt = weight_format.parse_weight_format(config, 2)
    assert fmt.description == "fp8 e4m3, block 128x128 scales"
    # e4m3 weight plus one float32 weight_scale_inv per 128 x 128 block.
    assert fmt.linear_bytes("model.layers.3.mlp.experts.7.down_proj", K, N) == K * N + (N // 128) * (K // 128) * 4
    # The routers are listed one by one in modules_to_not_convert; lm_head too.
    assert fmt.linear_bytes("model.layers.3.mlp.gate", 2048, 128) == 2048 * 128 * 2
    assert fmt.linear_bytes("lm_head", 2048, 151936) == 2048 * 151936 * 2
    # "model.layers.1.mlp.gate" names layer 1's router only, not layer 10's or 11's, and not an expert's gate_proj.
    assert fmt.quantizes("model.layers.10.mlp.experts.0.gate_proj")
    assert not fmt.quantizes("model.layers.10.mlp.gate") and not fmt.quantizes("model.layers.1.mlp.gate")


def test_fp8_per_tensor_and_static_activation_scales():
    fmt = weight_format.parse_weight_format({"quant_method": "fp8", "activation_scheme": "static"}, 2)
    assert fmt.linear_bytes("model.layers.0.self_attn.q_proj", K, N) == K * N + 4 + 4


def test_mxfp4_quantizes_the_experts_only():
    config = verbatim("openai-gpt-oss-20b-aiconfigurator.json")["quantization_config"]
    fmt = weight_format.parse_weight_format(config, 2)
    # Two 4-bit values a byte and a uint8 e8m0 scale per 32 along the input.
    assert fmt.linear_bytes("model.layers.5.mlp.experts.3.down_proj", 2880, 2880) == 2880 * 2880 // 2 + 2880 // 32 * 2880
    for name in ("model.layers.5.self_attn.q_proj", "model.layers.5.mlp.router", "lm_head"):
        assert not fmt.quantizes(name), name


def test_modelopt_nvfp4_from_hf_quant_config():
    quant = verbatim("nvidia-qwen3-235b-a22b-nvfp4-hf-quant-config-aiconfigurator.json")
    fmt = weight_format.parse_weight_format(dict(quant["quantization"], quant_method="modelopt"), 2)
    assert fmt.description == "Model Optimizer NVFP4, group 16"
    assert fmt.linear_bytes("model.layers.90.mlp.experts.1.up_proj", 4096, 1536) == 4096 * 1536 // 2 + 4096 // 16 * 1536 + 8
    assert not fmt.quantizes("model.layers.93.mlp.gate") and not fmt.quantizes("lm_head")
    assert fmt.quantizes("model.layers.93.self_attn.q_proj")


# ---- synthetic configs with each format's documented fields ----------------------------------------------------------

def test_awq_4bit_group_128():
    fmt = weight_format.parse_weight_format({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                             "version": "gemm", "modules_to_not_convert": ["visual"]}, 2)
    groups = K // 128
    # qweight int32 [K, N/8], qzeros int32 [K/128, N/8], fp16 scales [K/128, N].
    assert fmt.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N // 2 + groups * N // 2 + groups * N * 2
    assert not fmt.quantizes("model.visual.blocks.0.attn.qkv") and not fmt.quantizes("lm_head")


def test_gptq_per_channel_with_act_order_and_lm_head():
    fmt = weight_format.parse_weight_format({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": True,
                                             "lm_head": True}, 2)
    # One group over the input rows: one scale and zero per output column, plus g_idx (int32 per input row).
    assert fmt.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N // 2 + N // 2 + N * 2 + K * 4
    assert fmt.quantizes("lm_head")
    only = weight_format.parse_weight_format({"quant_method": "gptq", "bits": 8, "group_size": 128,
                                              "modules_in_block_to_quantize": [["mlp.gate_proj", "mlp.up_proj"]]}, 2)
    assert only.quantizes("model.layers.4.mlp.up_proj") and not only.quantizes("model.layers.4.self_attn.q_proj")


def test_compressed_tensors_w4a16_group_and_ignore_regex():
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                  "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}},
              "ignore": ["lm_head", "re:.*mlp.gate$"]}
    fmt = weight_format.parse_weight_format(config, 2)
    assert fmt.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N // 2 + (K // 128) * N * 2
    assert not fmt.quantizes("model.layers.7.mlp.gate") and fmt.quantizes("model.layers.7.mlp.gate_proj")
    nvfp4 = dict(config, format="nvfp4-pack-quantized", config_groups={"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}})
    assert weight_format.parse_weight_format(nvfp4, 2).linear_bytes("x.down_proj", K, N) == K * N // 2 + K // 16 * N + 4


def test_bitsandbytes_4bit_double_quantization_and_8bit():
    nf4 = weight_format.parse_weight_format({"quant_method": "bitsandbytes", "load_in_4bit": True,
                                             "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                                             "llm_int8_skip_modules": ["lm_head"]}, 2)
    blocks = K * N // 64
    assert nf4.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N // 2 + blocks + -(-blocks // 256) * 4 + 64 + 64
    int8 = weight_format.parse_weight_format({"quant_method": "bitsandbytes", "load_in_8bit": True}, 2)
    assert int8.linear_bytes("model.layers.0.mlp.down_proj", K, N) == K * N + N * 4


@pytest.mark.parametrize("config, message", [
    ({"quant_method": "hqq"}, "does not model quant_method 'hqq' (modelled: fp8, awq, gptq"),
    ({"quant_method": "gguf"}, "does not model quant_method 'gguf'"),
    ({"quant_method": "gptq", "bits": 5}, "bits=5 is not modelled (modelled: 2, 3, 4, 8)"),
    ({"quant_method": "gptq", "bits": 4, "dynamic": {"-:.*lm_head": {}}}, "'dynamic' overrides is not modelled"),
    ({"quant_method": "awq", "bits": "4"}, "bits='4' is not an integer"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "is not two positive integers"),
    ({"quant_method": "compressed-tensors", "config_groups": {"a": {"weights": {"num_bits": 4}},
                                                              "b": {"weights": {"num_bits": 8}}}}, "mixed schemes"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo 'W4A8_AWQ' is not modelled"),
    ({"quant_method": "bitsandbytes"}, "neither load_in_4bit nor load_in_8bit"),
    ({"quant_method": "fp8", "modules_to_not_convert": "lm_head\nx"}, None),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int",
                                                                                "strategy": "group", "group_size": 128}}},
      "ignore": ["re:("]}, "invalid regular expression"),
    ("fp8", "is not an object"),
])
def test_formats_the_plan_does_not_model_are_refused_by_name(config, message):
    if message is None:
        # A newline in a pattern is just a pattern that names nothing.
        assert weight_format.parse_weight_format(config, 2).quantizes("lm_head") is False
        return
    with pytest.raises(weight_format.UnsupportedFormat, match=message.replace("(", r"\(").replace(")", r"\)")):
        fmt = weight_format.parse_weight_format(config, 2)
        fmt.quantizes("model.layers.0.mlp.gate")


@pytest.mark.parametrize("name, pattern, matched", [
    ("model.layers.1.mlp.gate", "model.layers.1.mlp.gate", True),
    ("model.layers.10.mlp.gate", "model.layers.1.mlp.gate", False),
    ("model.layers.1.mlp.gate_proj", "model.layers.1.mlp.gate", False),
    ("model.visual.blocks.0.attn.qkv", "visual", True),
    ("model.layers.0.self_attn.q_proj", "model.layers.*.self_attn", True),
    ("model.layers.0.mlp.experts.0.up_proj", "model.layers.*.self_attn", False),
    ("model.layers.3.mlp.gate", "re:.*\\.mlp\\.gate$", True),
    ("lm_head", "lm_head", True),
    ("model.lm_head_extra", "lm_head", False),
])
def test_module_patterns_match_whole_components(name, pattern, matched):
    assert weight_format.module_matches(name, pattern) is matched
