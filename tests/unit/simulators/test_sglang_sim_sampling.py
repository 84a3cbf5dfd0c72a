# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which sampling parameters the simulator counts as the Qwen3.6 card's, and the text it writes."""
from __future__ import annotations

import json
import random

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SPEC_ARGS, http
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


# ---- what the server supplies, per endpoint (docs/sampling.md) -------------------------------------------------------

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CARD_GENERATION_CONFIG = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
                          "presence_penalty": 1.5, "do_sample": True}


def test_chat_takes_five_keys_from_generation_config_never_presence_penalty():
    values = sampling.effective_sampling({"temperature": 0.7}, "model", CARD_GENERATION_CONFIG)
    assert values == {"temperature": 0.7, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
                      "presence_penalty": 0.0, "frequency_penalty": 0.0}
    assert sampling.model_default_sampling("model", CARD_GENERATION_CONFIG) == {
        "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 20, "top_p": 0.95, "min_p": 0.0}
    assert sampling.model_default_sampling("openai", CARD_GENERATION_CONFIG) == {}


def test_completions_take_nothing_from_the_server():
    assert sampling.completion_sampling({"temperature": 0.7}) == dict(sampling.NEUTRAL_DEFAULTS, temperature=0.7)


def test_generate_takes_preferred_params_per_key_under_the_request():
    preferred = sampling.parse_preferred('{"temperature": 1.0, "top_p": 0.95, "top_k": 20, "presence_penalty": 1.5}')
    values = sampling.native_sampling({"temperature": 0.7}, preferred)
    assert (values["temperature"], values["top_p"], values["top_k"], values["presence_penalty"]) == (0.7, 0.95, 20, 1.5)
    assert sampling.parse_preferred("[1]") is None and sampling.parse_preferred("") is None


def test_generation_config_is_read_from_a_model_directory(tmp_path):
    assert sampling.load_generation_config(str(tmp_path), {"temperature": 9}) == {}
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_k": 20}')
    assert sampling.load_generation_config(str(tmp_path), {"temperature": 9}) == {"temperature": 0.6, "top_k": 20}
    assert sampling.load_generation_config("Qwen/Qwen3.6-27B", {"temperature": 9}) == {"temperature": 9}


def _model_dir(tmp_path, generation_config):
    model = tmp_path / "Qwen3.6-27B"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Qwen3_5ForConditionalGeneration"]}')
    (model / "generation_config.json").write_text(json.dumps(generation_config))
    return str(model)


@pytest.fixture
def card_server(start_sim, tmp_path):
    model = _model_dir(tmp_path, CARD_GENERATION_CONFIG)
    sim = start_sim(["--model-path", model, "--tp-size", "2", "--max-running-requests", "4"] + SPEC_ARGS
                    + ["--preferred-sampling-params", '{"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, '
                       '"presence_penalty": 1.5, "repetition_penalty": 1.0}'],
                    SGLANG_SIM_FAULT="degenerate")
    sim.wait_ready()
    return sim


def test_incident_request_gets_the_servers_values_and_still_loops(card_server):
    # The startup line names the keys the server applies to chat requests.
    logged = [line for line in card_server.log().splitlines() if "Using default chat sampling params" in line]
    assert logged and logged[0].endswith("{'repetition_penalty': 1.0, 'temperature': 1.0, 'top_k': 20, 'top_p': 0.95, "
                                         "'min_p': 0.0}")
    # The incident: temperature 0.7 and nothing else. top_p/top_k/min_p/repetition_penalty come from the server, but
    # 0.7 is the client's own value and is off the card in thinking mode: the loop still happens.
    status, body = card_server.chat({"messages": QUESTION, "temperature": 0.7, "max_tokens": 60})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    assert "The user's question is 2+2." in body["choices"][0]["message"]["reasoning_content"]
    # A client that sends nothing gets the card's values from generation_config.json and does not loop.
    status, body = card_server.chat({"messages": QUESTION, "max_tokens": 400})
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop"


def test_preferred_params_reach_generate_but_not_the_openai_endpoints(card_server):
    question = {"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 40, "temperature": 0.7, "top_p": 0.8}}
    # Non-thinking /generate with the non-thinking card values: presence_penalty 1.5 comes from the server.
    status, _headers, raw = http("POST", card_server.url + "/generate", question)
    assert status == 200 and "The user's question" not in json.loads(raw)["text"]
    # /v1/completions gets nothing from the server: presence_penalty stays 0.0, off the non-thinking card.
    status, _headers, raw = http("POST", card_server.url + "/v1/completions",
                                 {"prompt": "What is 2+2?", "temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_tokens": 40})
    assert status == 200 and "The user's question" in json.loads(raw)["choices"][0]["text"]
