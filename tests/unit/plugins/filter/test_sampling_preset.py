from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.sampling_preset import sampling_preset


def test_thinking_general_is_the_model_card_row():
    preset = sampling_preset("thinking_general")
    assert preset["sampling"] == {
        "temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    }
    assert preset["chat_template_kwargs"] is None


def test_non_thinking_turns_thinking_off_and_sets_presence_penalty():
    preset = sampling_preset("non_thinking")
    assert preset["sampling"]["presence_penalty"] == 1.5
    assert preset["chat_template_kwargs"] == {"enable_thinking": False}


def test_overrides_replace_and_null_removes():
    preset = sampling_preset("thinking_coding", {"temperature": 0.5, "min_p": None, "seed": 7})
    assert preset["sampling"]["temperature"] == 0.5
    assert "min_p" not in preset["sampling"]
    assert preset["sampling"]["seed"] == 7


def test_unknown_mode_is_an_error():
    with pytest.raises(AnsibleFilterError, match="unknown sampling mode"):
        sampling_preset("greedy")
