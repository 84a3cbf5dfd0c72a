# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the server can supply: card_generation_config, preferred_sampling_params, sampling_protection filters and
sampling_presets' pure functions behind them."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.card_generation_config import card_generation_config
from ansible_collections.llmops.serving.plugins.filter.preferred_sampling_params import preferred_sampling_params
from ansible_collections.llmops.serving.plugins.filter.sampling_applied import sampling_applied
from ansible_collections.llmops.serving.plugins.filter.sampling_protection import sampling_protection
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def test_generation_config_keeps_other_keys_and_writes_five():
    original = {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "temperature": 0.6, "transformers_version": "x"}
    config = card_generation_config(original, "non_thinking")
    assert config == {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "transformers_version": "x", "do_sample": True,
                      "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}
    assert "presence_penalty" not in config and original["temperature"] == 0.6
    assert "top_k" not in card_generation_config({}, "thinking_general", {"top_k": None})
    with pytest.raises(AnsibleFilterError, match="unknown sampling mode"):
        card_generation_config({}, "creative")
    with pytest.raises(AnsibleFilterError, match="parsed generation_config.json"):
        card_generation_config("text", "thinking_general")


def test_preferred_params_json():
    text = preferred_sampling_params("non_thinking")
    assert text == '{"min_p":0.0,"presence_penalty":1.5,"repetition_penalty":1.0,"temperature":0.7,"top_k":20,"top_p":0.8}'
    assert json.loads(preferred_sampling_params("thinking_general", {"presence_penalty": 1.0}))["presence_penalty"] == 1.0


def test_protection_table():
    table = sampling_protection("non_thinking")
    chat, completions, generate = table["/v1/chat/completions"], table["/v1/completions"], table["/generate"]
    assert [key for key, row in chat.items() if row["protected"]] == ["temperature", "top_p", "top_k", "min_p", "repetition_penalty"]
    assert chat["presence_penalty"] == {"protected": False, "mechanism": None, "default": 0.0, "card": 1.5}
    assert not any(row["protected"] for row in completions.values())
    assert all(row["mechanism"] == "--preferred-sampling-params" for row in generate.values())
    assert not any(row["protected"] for row in sampling_protection("non_thinking", sampling_defaults="openai")
                   ["/v1/chat/completions"].values())
    with pytest.raises(AnsibleFilterError):
        sampling_protection("non_thinking", sampling_defaults="vllm")


def test_applied_by_server_from_the_startup_line():
    logged = {"repetition_penalty": 1.0, "temperature": 0.6, "top_k": 20, "top_p": 0.95}   # sgl-project/sglang#12726
    assert sampling_presets.applied_by_server(logged, "thinking_coding") == {
        "applied": ["temperature", "top_p", "top_k", "repetition_penalty"], "differs": {},
        "missing": ["min_p", "presence_penalty"]}
    assert sampling_presets.applied_by_server(logged, "thinking_general")["differs"] == {
        "temperature": {"server": 0.6, "card": 1.0}}
    assert sampling_presets.applied_by_server({}, "thinking_general")["applied"] == []


def test_sampling_applied_filter():
    assert sampling_applied({"temperature": 1.0, "top_p": 0.95}, "thinking_general")["applied"] == ["temperature", "top_p"]
    with pytest.raises(AnsibleFilterError):
        sampling_applied("x", "thinking_general")
