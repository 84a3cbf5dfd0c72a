# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's faults of a server that is up but wrong (wrong-drafts, rejected-drafts, tool-call-in-reasoning,
long-context-accept, hang-after), each against the healthy server, and what they rest on: greedy output fixed by the
prompt, output_ids and per-request speculative meta_info from /generate, tool calls in chat completions."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SPEC_ARGS, http
# A fixture, requested by the tests under this name.
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import start_sim_on_one_big_card as start_sim  # pylint: disable=unused-import

PROMPT = "Describe the river and the bridge near the old station."
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]
TOOL_ARGS = ["--tool-call-parser", "qwen3_coder"]


def generate(sim, text, max_new_tokens=32, temperature=0, timeout=30):
    status, _headers, raw = http("POST", sim.url + "/generate", {"text": text, "sampling_params": {
        "temperature": temperature, "max_new_tokens": max_new_tokens}}, timeout=timeout)
    return status, json.loads(raw)


def started(start_sim, args, gpu=0, **env):
    """A ready simulator on GPU ``gpu`` of the kit's two H200s (one server per GPU: a second one does not fit)."""
    sim = start_sim(list(args) + ["--base-gpu-id", str(gpu)], **env)
    sim.wait_ready()
    return sim


def test_greedy_is_a_function_of_the_prompt_and_speculation_is_lossless(start_sim):
    plain = started(start_sim, [])
    spec = started(start_sim, SPEC_ARGS, gpu=1)
    first = generate(plain, PROMPT)[1]
    assert generate(plain, PROMPT)[1]["output_ids"] == first["output_ids"]
    assert len(first["output_ids"]) == first["meta_info"]["completion_tokens"] == 32
    assert "spec_verify_ct" not in first["meta_info"], "no speculative meta_info without speculation"
    with_spec = generate(spec, PROMPT)[1]
    assert with_spec["output_ids"] == first["output_ids"] and with_spec["text"] == first["text"]
    meta = with_spec["meta_info"]
    assert meta["spec_verify_ct"] > 0 and meta["spec_accept_length"] == pytest.approx(32 / meta["spec_verify_ct"])
    assert meta["spec_accept_length"] > 2.0
    assert generate(plain, "Another prompt entirely.")[1]["output_ids"] != first["output_ids"]
    # Sampled output is not fixed by the prompt.
    assert generate(plain, PROMPT, temperature=1.0)[1]["output_ids"] != first["output_ids"]


def test_wrong_drafts_make_greedy_output_leave_the_target_after_a_few_tokens(start_sim):
    plain = started(start_sim, [])
    wrong = started(start_sim, SPEC_ARGS, gpu=1, SGLANG_SIM_FAULT="wrong-drafts")
    reference = generate(plain, PROMPT)[1]["output_ids"]
    lossy = generate(wrong, PROMPT)[1]["output_ids"]
    assert lossy[:4] == reference[:4] and lossy != reference
    assert generate(wrong, PROMPT)[1]["output_ids"] == lossy, "deterministic: the same wrong tokens each time"
    # Without speculation the fault has nothing to act on.
    plain.stop()
    unaffected = started(start_sim, [], SGLANG_SIM_FAULT="wrong-drafts")
    assert generate(unaffected, PROMPT)[1]["output_ids"] == reference


def test_rejected_drafts_accept_nothing_and_keep_the_output(start_sim):
    plain = started(start_sim, [])
    rejected = started(start_sim, SPEC_ARGS, gpu=1, SGLANG_SIM_FAULT="rejected-drafts")
    answer = generate(rejected, PROMPT)[1]
    assert answer["output_ids"] == generate(plain, PROMPT)[1]["output_ids"]
    assert answer["meta_info"]["spec_num_correct_drafts"] == 0
    assert answer["meta_info"]["spec_accept_length"] == pytest.approx(32 / 31), "the first token comes from prefill"


def test_long_context_accept_falls_past_the_threshold(start_sim):
    sim = started(start_sim, SPEC_ARGS, SGLANG_SIM_FAULT="long-context-accept", SGLANG_SIM_LONG_CONTEXT_TOKENS="500")
    short = generate(sim, PROMPT, max_new_tokens=64)[1]["meta_info"]
    long_text = " ".join(["word"] * 600)
    long = generate(sim, long_text, max_new_tokens=64)[1]["meta_info"]
    assert long["prompt_tokens"] == 600
    assert short["spec_accept_length"] > 2.0 and long["spec_num_correct_drafts"] == 0
    healthy = started(start_sim, SPEC_ARGS, gpu=1, SGLANG_SIM_LONG_CONTEXT_TOKENS="500")
    assert generate(healthy, long_text, max_new_tokens=64)[1]["meta_info"]["spec_accept_length"] > 2.0


def test_prompt_longer_than_the_context_is_refused(start_sim):
    sim = started(start_sim, ["--context-length", "64"])
    status, body = generate(sim, " ".join(["word"] * 64))
    assert status == 400
    assert body == {"error": {"message": "The input (64 tokens) is longer than the model's context length (64 tokens)."}}
    status, body = generate(sim, " ".join(["word"] * 63))
    assert status == 200
    status, _headers, raw = http("POST", sim.url + "/generate", {"sampling_params": {"max_new_tokens": 4}})
    assert status == 400 and b"Either text, input_ids or input_embeds should be provided." in raw


def tool_chat(sim, **extra):
    body = dict({"messages": WEATHER, "tools": TOOLS, "temperature": 0, "max_tokens": 400}, **extra)
    return sim.chat(body)


def test_tool_call_with_the_parser(start_sim):
    sim = started(start_sim, SPEC_ARGS + TOOL_ARGS)
    status, reply = tool_chat(sim)
    assert status == 200
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["index"] == 0
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert "<tool_call>" not in (choice["message"]["content"] or "") + choice["message"]["reasoning_content"]
    # tool_choice none: no call; no tools: no call.
    assert tool_chat(sim, tool_choice="none")[1]["choices"][0]["message"]["tool_calls"] is None
    assert sim.chat({"messages": WEATHER, "max_tokens": 400})[1]["choices"][0]["message"]["tool_calls"] is None
    status, reply = tool_chat(sim, tools=[{"type": "function"}])
    assert status == 400


def test_tool_call_without_a_parser_stays_in_content(start_sim):
    sim = started(start_sim, SPEC_ARGS)
    message = tool_chat(sim)[1]["choices"][0]["message"]
    assert message["tool_calls"] is None and "<function=get_weather>" in message["content"]
    # A parser for another format finds nothing either.
    other = started(start_sim, SPEC_ARGS + ["--tool-call-parser", "qwen25"], gpu=1)
    message = tool_chat(other)[1]["choices"][0]["message"]
    assert message["tool_calls"] is None and "<function=get_weather>" in message["content"]


def test_tool_call_in_reasoning(start_sim):
    sim = started(start_sim, SPEC_ARGS + TOOL_ARGS, SGLANG_SIM_FAULT="tool-call-in-reasoning")
    choice = tool_chat(sim)[1]["choices"][0]
    assert choice["message"]["tool_calls"] is None and choice["finish_reason"] == "stop"
    assert "<function=get_weather>" in choice["message"]["reasoning_content"]
    # Without thinking there is no reasoning block to land in.
    choice = tool_chat(sim, chat_template_kwargs={"enable_thinking": False})[1]["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_hang_after_k_requests_while_health_answers(start_sim):
    sim = started(start_sim, SPEC_ARGS, SGLANG_SIM_FAULT="hang-after", SGLANG_SIM_HANG_AFTER="3")
    for _index in range(3):
        assert generate(sim, PROMPT, max_new_tokens=8)[0] == 200
    with pytest.raises((socket.timeout, urllib.error.URLError, TimeoutError)):
        urllib.request.urlopen(urllib.request.Request(sim.url + "/generate", data=json.dumps({"text": PROMPT}).encode(),
                                                      method="POST", headers={"Content-Type": "application/json"}),
                               timeout=1.5)
    assert http("GET", sim.url + "/health")[0] == 200
    healthy = started(start_sim, SPEC_ARGS, gpu=1, SGLANG_SIM_HANG_AFTER="3")
    for _index in range(5):
        assert generate(healthy, PROMPT, max_new_tokens=8)[0] == 200
