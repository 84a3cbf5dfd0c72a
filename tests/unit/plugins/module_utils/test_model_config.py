# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_config: a model's dimensions from config.json, and its weight bytes."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import model_config

DATA = pathlib.Path(__file__).parent / "data"
QWEN36 = json.loads((DATA / "models" / "qwen3.6-27b-from-model-card.json").read_text())


def test_hybrid_layers_follow_the_full_attention_interval():
    dims = model_config.parse_model_config(QWEN36)
    assert dims["num_layers"] == 64
    assert dims["full_attention_layers"] == list(range(3, 64, 4))
    assert len(dims["linear_attention_layers"]) == 48
    assert dims["linear"]["ssm_dtype"] == "float32"
    assert (dims["num_kv_heads"], dims["head_dim"], dims["mtp_layers"], dims["is_multimodal"]) == (4, 256, 1, True)


def test_listed_layer_types_win_and_must_match_the_count():
    config = json.loads(json.dumps(QWEN36))
    config["text_config"]["layer_types"] = ["linear_attention", "full_attention"] * 32
    assert model_config.parse_model_config(config)["full_attention_layers"][:2] == [1, 3]
    config["text_config"]["layer_types"] = ["full_attention"] * 3
    with pytest.raises(model_config.ModelConfigError, match="3 layer_types for 64 layers"):
        model_config.parse_model_config(config)


def test_dense_model_has_no_state():
    dense = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288,
             "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
    dims = model_config.parse_model_config(dense)
    assert dims["linear"] is None and dims["linear_attention_layers"] == [] and not dims["is_multimodal"]
    assert len(dims["full_attention_layers"]) == 36


def test_parameter_estimate_matches_the_published_checkpoint():
    # Public figures for Qwen3.6-27B: model.safetensors.index.json total_size 55.56 GB in bf16 (about 27.78 B
    # parameters, http://www.eadst.com/blog/325) and an MTP head of about 849 MB in bf16
    # (https://huggingface.cross-road.ai/bowmanslayer/Qwen3.6-27B-Text-Only-W4A16-g128-MTP-ToolCalling).
    params = model_config.estimate_parameters(model_config.parse_model_config(QWEN36))
    assert params["total"] == pytest.approx(27.78e9, rel=0.01)
    assert params["mtp"] * 2 == pytest.approx(849e6, rel=0.01)


def test_index_total_wins_and_is_split_by_the_estimate():
    dims = model_config.parse_model_config(QWEN36)
    index = model_config.parse_safetensors_index({"metadata": {"total_size": 55_560_000_000},
                                                  "weight_map": {"mtp.fc.weight": "a", "model.visual.x": "b"}})
    weights = model_config.weight_bytes(dims, index)
    assert weights["total"] == 55_560_000_000 and "index" in weights["source"]
    assert weights["mtp"] + weights["vision"] + weights["language"] == weights["total"]
    no_mtp = model_config.weight_bytes(dims, dict(index, has_mtp=False))
    assert no_mtp["mtp"] == 0


@pytest.mark.parametrize("bad, message", [
    ({"metadata": {}}, "total_size"),
    ({"metadata": {"total_size": True}}, "total_size"),
    ([], "not a JSON object"),
])
def test_bad_index_is_refused(bad, message):
    with pytest.raises(model_config.ModelConfigError, match=message):
        model_config.parse_safetensors_index(bad)


@pytest.mark.parametrize("key, value", [("hidden_size", 0), ("num_attention_heads", "24"), ("linear_num_value_heads", None)])
def test_missing_or_bad_dimensions_are_named(key, value):
    config = json.loads(json.dumps(QWEN36))
    config["text_config"][key] = value
    with pytest.raises(model_config.ModelConfigError, match=key):
        model_config.parse_model_config(config)


def test_dtype_names():
    assert model_config.dtype_bytes("torch.float32") == 4
    assert model_config.dtype_bytes("auto", 2) == 2
    with pytest.raises(model_config.ModelConfigError):
        model_config.dtype_bytes("int3")


# ---- mixture of experts, quantized checkpoints, exact bytes from the shards' headers (issue 27) -----------------------

def verbatim(name):
    return json.loads((DATA / "models" / name).read_text())


def test_moe_counts_every_expert_and_matches_the_weights_sglang_loaded():
    # Qwen3-30B-A3B-FP8 (verbatim config): 48 sparse layers x 128 experts x 3 x 2048 x 768, fp8 with block scales,
    # routers and lm_head in bf16. SGLang loaded it as "mem usage=29.15 GB" (qwen3-30b-a3b-fp8-h100-...log).
    dims = model_config.parse_model_config(verbatim("qwen3-30b-a3b-fp8-aiconfigurator.json"))
    assert dims["moe"]["num_experts"] == 128 and dims["moe"]["sparse_layers"] == list(range(48))
    weights = model_config.weight_bytes(dims)
    assert weights["format"] == "fp8 e4m3, block 128x128 scales"
    assert weights["total"] / 2 ** 30 == pytest.approx(29.15, rel=0.01)
    assert weights["router"] == 48 * 2048 * 128 * 2
    # The same model in bf16: about twice the bytes, the same parameters.
    bf16 = model_config.parse_model_config(verbatim("qwen3-30b-a3b-aiconfigurator.json"))
    assert model_config.estimate_parameters(bf16)["total"] == model_config.estimate_parameters(dims)["total"]
    assert model_config.weight_bytes(bf16)["total"] == pytest.approx(2 * weights["total"], rel=0.03)


def test_dense_estimates_match_what_sglang_loaded():
    # Load weight begin/end of the corpus logs: Llama-3.1-8B 78.81 - 63.72 GB, Qwen3-8B "mem usage=15.28 GB".
    for name, loaded in (("meta-llama-3.1-8b-aiconfigurator.json", 78.81 - 63.72), ("qwen3-8b-aiconfigurator.json", 15.28)):
        weights = model_config.weight_bytes(model_config.parse_model_config(verbatim(name)))
        assert weights["total"] / 2 ** 30 == pytest.approx(loaded, rel=0.01), name


def test_mixtral_uses_intermediate_size_for_its_experts():
    dims = model_config.parse_model_config(verbatim("mixtral-8x7b-v0.1-aiconfigurator.json"))
    assert dims["moe"]["moe_intermediate_size"] == 14336 and dims["moe"]["shared_intermediate_size"] == 0
    # 32 layers x 8 experts x 3 x 4096 x 14336 = 45.1 B of the 46.7 B parameters.
    params = model_config.estimate_parameters(dims)
    assert params["experts"] == 32 * 8 * 3 * 4096 * 14336
    assert params["total"] == pytest.approx(46.70e9, rel=0.001)


def test_hybrid_moe_with_mtp_has_no_dense_mlp_and_an_moe_draft():
    dims = model_config.parse_model_config(verbatim("qwen3.5-35b-a3b-aiconfigurator.json"))
    assert dims["intermediate_size"] is None and len(dims["moe"]["sparse_layers"]) == 40
    assert dims["moe"]["shared_intermediate_size"] == 512 and dims["moe"]["shared_expert_gate"]
    names = [name for name, _k, _n, _kind, part in model_config.linear_modules(dims) if part == "mtp"]
    assert "mtp.layers.0.mlp.experts.255.down_proj" in names and "mtp.layers.0.mlp.shared_expert_gate" in names
    weights = model_config.weight_bytes(dims)
    assert weights["mtp"] > 0.02 * weights["total"] and weights["vision"] > 0


def test_nvfp4_quantization_comes_from_hf_quant_config():
    config = verbatim("nvidia-qwen3-235b-a22b-nvfp4-aiconfigurator.json")
    quant = verbatim("nvidia-qwen3-235b-a22b-nvfp4-hf-quant-config-aiconfigurator.json")
    plain = model_config.weight_bytes(model_config.parse_model_config(config))
    nvfp4 = model_config.weight_bytes(model_config.parse_model_config(config, quant))
    assert nvfp4["format"] == "Model Optimizer NVFP4, group 16"
    # 4.5 bits a weight for the quantized layers against 16; embeddings, routers and lm_head stay bf16.
    assert 0.27 < nvfp4["total"] / plain["total"] < 0.30
    with pytest.raises(model_config.ModelConfigError, match="hf_quant_config.json has no quantization object"):
        model_config.parse_model_config(config, {"producer": {"name": "modelopt"}})


@pytest.mark.parametrize("change, message", [
    ({"kv_lora_rank": 512}, "multi-head latent attention"),
    ({"quantization_config": {"quant_method": "exl2"}}, "does not model quant_method 'exl2'"),
    ({"torch_dtype": "int4"}, "torch_dtype 'int4' is not supported"),
    ({"num_experts": 8}, "no positive moe_intermediate_size"),
])
def test_what_the_plan_does_not_model_is_refused_by_name(change, message):
    config = {"architectures": ["X"], "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
              "vocab_size": 1000, "intermediate_size": 4096}
    config.update(change)
    if "num_experts" in change:
        config.pop("intermediate_size")
    with pytest.raises(model_config.ModelConfigError, match=message):
        model_config.parse_model_config(config)


def test_gpt_oss_sliding_window_layers_are_refused():
    with pytest.raises(model_config.ModelConfigError, match="sliding-window attention layers"):
        model_config.parse_model_config(verbatim("openai-gpt-oss-20b-aiconfigurator.json"))


def _header(tensors):
    offset, header = 0, {"__metadata__": {"format": "pt"}}
    for name, dtype, shape in tensors:
        count = 1
        for size in shape:
            count *= size
        size = (count * model_config.SAFETENSORS_DTYPE_BITS[dtype] + 7) // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return header


def test_headers_give_every_part_exactly_when_they_agree_with_the_index():
    dims = model_config.parse_model_config(QWEN36)
    headers = {"model-00001-of-00002.safetensors": _header([
        ("model.language_model.embed_tokens.weight", "BF16", [248320, 5120]),
        ("model.language_model.layers.0.mlp.experts.0.down_proj.weight", "F8_E4M3", [5120, 17408]),
        ("model.language_model.layers.0.mlp.experts.0.down_proj.weight_scale_inv", "F32", [40, 136])]),
        "model-00002-of-00002.safetensors": _header([
            ("mtp.fc.weight", "BF16", [5120, 10240]), ("model.visual.blocks.0.attn.qkv.weight", "BF16", [3456, 1152]),
            ("lm_head.weight", "BF16", [248320, 5120])])}
    found = model_config.header_bytes(headers)
    index = {"total_bytes": found["total"], "has_mtp": True, "has_vision": True}
    weights = model_config.weight_bytes(dims, index, headers)
    assert weights["source"] == "safetensors headers (2 shard(s))"
    assert weights["mtp"] == 5120 * 10240 * 2 and weights["vision"] == 3456 * 1152 * 2
    assert weights["experts"] == 5120 * 17408 + 40 * 136 * 4
    # A stand-in (or a damaged copy) whose headers hold far less than the index says is planned from the index.
    announced = {"total_bytes": 55_560_000_000, "has_mtp": True, "has_vision": True}
    weights = model_config.weight_bytes(dims, announced, headers)
    assert weights["total"] == 55_560_000_000 and "the shards' headers hold" in weights["source"]


@pytest.mark.parametrize("entry, message", [
    ({"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}, "unknown dtype or a bad shape"),
    ({"dtype": "BF16", "shape": [2, -1], "data_offsets": [0, 4]}, "unknown dtype or a bad shape"),
    ({"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 16]}, "holds 16 bytes, its shape and dtype need 32"),
    ("x", "has no description"),
])
def test_a_header_that_does_not_add_up_is_refused(entry, message):
    with pytest.raises(model_config.ModelConfigError, match=message):
        model_config.header_bytes({"s.safetensors": {"t": entry}})


@pytest.mark.parametrize("change, message", [
    ({"num_hidden_layers": 10 ** 6}, "1000000 layers, more than the 1024"),
    ({"num_experts": 10 ** 7, "moe_intermediate_size": 8}, "10000000 experts, more than the 4096"),
    ({"vision_config": {"depth": 10 ** 9}}, "vision_config depth=1000000000 is not a layer count"),
])
def test_a_config_that_asks_for_millions_of_modules_is_refused_quickly(change, message):
    config = {"architectures": ["X"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 100, "intermediate_size": 128}
    config.update(change)
    with pytest.raises(model_config.ModelConfigError, match=message):
        model_config.parse_model_config(config)


def test_a_pattern_that_names_one_expert_is_honoured():
    config = verbatim("qwen3-30b-a3b-fp8-aiconfigurator.json")
    all_fp8 = model_config.weight_bytes(model_config.parse_model_config(config))
    one = json.loads(json.dumps(config))
    one["quantization_config"]["modules_to_not_convert"].append("model.layers.0.mlp.experts.5")
    regex = json.loads(json.dumps(config))
    regex["quantization_config"] = {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*experts\\.1[0-9]\\."],
                                    "config_groups": {"g": {"targets": ["Linear"], "weights": {
                                        "num_bits": 8, "type": "float", "strategy": "channel"}}}}
    expert = 3 * 2048 * 768
    assert model_config.weight_bytes(model_config.parse_model_config(one))["experts"] - all_fp8["experts"] == pytest.approx(
        expert, rel=0.01)                   # one expert in bf16: twice its fp8 bytes, less its scales
    experts_in_bf16 = model_config.weight_bytes(model_config.parse_model_config(regex))["experts"]
    # Experts 10-19 of each of the 48 layers stay bf16, the other 118 are fp8 with a bf16 scale per row.
    assert experts_in_bf16 == 48 * (10 * expert * 2 + 118 * (expert + 2 * (768 + 768 + 2048) * 2 // 2))


@pytest.mark.parametrize("change, message", [
    ({"num_experts": 4, "moe_intermediate_size": 8, "decoder_sparse_step": 0}, "decoder_sparse_step=0 is not a positive"),
    ({"num_experts": 4, "moe_intermediate_size": 8, "mlp_only_layers": [[1]]}, "mlp_only_layers is not a list"),
    ({"num_experts": 4, "moe_intermediate_size": 8, "first_k_dense_replace": "1"}, "first_k_dense_replace='1'"),
    ({"num_experts": 4, "moe_intermediate_size": 8, "n_shared_experts": "2"}, "n_shared_experts='2'"),
    ({"vision_config": {"depth": 2, "hidden_size": "1152"}}, "vision_config hidden_size='1152' is not a size"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x128"}}}}}, "block_structure='128x128'"),
])
def test_a_malformed_config_is_refused_by_name_not_crashed_on(change, message):
    config = {"architectures": ["X"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 100, "intermediate_size": 128}
    config.update(change)
    with pytest.raises(model_config.ModelConfigError, match=message):
        model_config.weight_bytes(model_config.parse_model_config(config))
