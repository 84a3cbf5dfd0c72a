# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which sampling parameters the simulator counts as the Qwen3.6 card's, and the text it writes."""
from __future__ import annotations

import random

import pytest

from sglang_sim import sampling
from sglang_sim.knobs import DEFAULT_GENERATION_CONFIG

THINKING_GENERAL = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
THINKING_CODING = dict(THINKING_GENERAL, temperature=0.6)
NON_THINKING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "presence_penalty": 1.5, "repetition_penalty": 1.0,
                "chat_template_kwargs": {"enable_thinking": False}}


def profile(request, defaults="model"):
    return sampling.card_profile(request, defaults, DEFAULT_GENERATION_CONFIG)


@pytest.mark.parametrize("request_body, expected", [
    (THINKING_GENERAL, "thinking-general"),
    (THINKING_CODING, "thinking-coding"),
    (NON_THINKING, "non-thinking"),
    (dict(THINKING_GENERAL, presence_penalty=1.5), "thinking-general"),
    ({}, "thinking-general"),  # --sampling-defaults model fills temperature/top_p/top_k from generation_config.json
])
def test_card_values_match(request_body, expected):
    assert profile(request_body) == expected


@pytest.mark.parametrize("request_body", [
    {"temperature": 0.7},                                    # the incident: 0.7 in thinking mode, nothing else
    {"temperature": 0.0},                                    # greedy
    dict(THINKING_GENERAL, top_k=-1),
    dict(THINKING_GENERAL, presence_penalty=2.5),
    dict(THINKING_GENERAL, repetition_penalty=1.1),
    dict(NON_THINKING, presence_penalty=0.0),                # non-thinking needs the card's presence penalty
    dict(NON_THINKING, chat_template_kwargs={}),             # the non-thinking values with thinking on
    dict(THINKING_GENERAL, chat_template_kwargs={"enable_thinking": False}),
])
def test_off_card_values(request_body):
    assert profile(request_body) is None


def test_openai_defaults_are_off_card_without_explicit_values():
    assert profile({}, defaults="openai") is None
    assert profile(THINKING_GENERAL, defaults="openai") == "thinking-general"


def test_loop_phrase_names_the_question():
    assert sampling.loop_phrase("What is 2+2?") == "The user's question is 2+2. "
    tokens = sampling.loop_tokens("What is 2+2?", 30)
    assert len(tokens) == 30
    assert "".join(tokens).startswith("The user's question is 2+2. The user's question is 2+2. ")


def distinct_ratio(words, n):
    grams = [tuple(words[index:index + n]) for index in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams)


def test_varied_text_has_high_distinct_n_and_loop_low():
    varied = "".join(sampling.varied_tokens(random.Random(7), 300)).split()
    looping = "".join(sampling.loop_tokens("What is 2+2?", 300)).split()
    assert distinct_ratio(varied, 3) > 0.9
    assert distinct_ratio(looping, 3) < 0.05


def test_effective_sampling_never_takes_presence_penalty_from_generation_config():
    values = sampling.effective_sampling({}, "model", {"temperature": 0.6, "presence_penalty": 1.5})
    assert values["temperature"] == 0.6
    assert values["presence_penalty"] == 0.0
