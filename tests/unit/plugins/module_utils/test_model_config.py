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
