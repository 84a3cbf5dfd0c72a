# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's request log (--log-requests), read from the running server's log as a test of a deployment would.

Issue 14: a chat request that sends only temperature 0.7 gets top_p/top_k/min_p/repetition_penalty from the model's
generation_config.json; SGLang's request log shows the values the request really got.
"""
from __future__ import annotations

import ast
import json
import re
import socket
from datetime import datetime

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import http

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
INCIDENT_REQUEST = {"messages": QUESTION, "temperature": 0.7}
# The Qwen3.6 card's thinking-mode values, plus a presence_penalty that the chat adapter must NOT take (written for
# these tests, not a copy of the model's file).
CARD_GENERATION_CONFIG = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
                          "presence_penalty": 1.5, "do_sample": True}
PREFERRED = '{"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 1.5, "repetition_penalty": 1.0}'
# http_server.py: _execute_server_warmup - the server's own first request, logged like any other before the ready line
# (levels 0 and 1 leave its text out, so the tests tell it by where it is).
WARM_UP_TEXT = "The capital city of France is"
READY_LINE = "The server is fired up and ready to roll!"


def split_at_ready(log):
    """(lines before the ready line, lines after it)."""
    lines = log.splitlines()
    ready = next(index for index, line in enumerate(lines) if READY_LINE in line)
    return lines[:ready], lines[ready + 1:]


TIMESTAMP = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] "
RECEIVE_RE = re.compile("^" + TIMESTAMP + r"Receive: obj=GenerateReqInput\((?P<fields>.*)\)(?:, headers=(?P<headers>\{.*\}))?$")
OPENAI_RE = re.compile("^" + TIMESTAMP + r"Receive OpenAI: obj=(?P<obj>\{.*\})$")
JSON_RE = re.compile("^" + TIMESTAMP + r"(?P<event>\{.*\})$")
# protocol.py: ChatCompletionRequest.to_sampling_params, the keys and their order.
CHAT_SAMPLING_KEYS = ["temperature", "max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "stop_regex", "top_p", "top_k",
                      "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "regex", "ebnf", "n", "no_stop_trim",
                      "ignore_eos", "skip_special_tokens", "logit_bias", "custom_params", "sampling_seed",
                      "spaces_between_special_tokens", "watermark"]


def _model_dir(tmp_path):
    model = tmp_path / "Qwen3.6-27B"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"architectures": ["Qwen3_5ForConditionalGeneration"]}')
    (model / "generation_config.json").write_text(json.dumps(CARD_GENERATION_CONFIG))
    return str(model)


@pytest.fixture
def start_logging_sim(start_sim, tmp_path):
    """A simulator on the card's generation_config.json with extra flags (--log-requests ... or nothing)."""
    def _start(flags, **env):
        sim = start_sim(["--model-path", _model_dir(tmp_path), "--tp-size", "2", "--max-running-requests", "4",
                         "--preferred-sampling-params", PREFERRED] + list(flags), **env)
        sim.wait_ready()
        return sim
    return _start


def receive_lines(sim, health=False, warm_up=False):
    """The text-format `Receive:` lines of the clients' requests (health checks or the warm-up only when asked for)."""
    before, after = split_at_ready(sim.log())
    found = [RECEIVE_RE.match(line) for line in (before if warm_up else after) if "Receive: obj=" in line]
    assert all(found), "malformed Receive line:\n" + sim.log()[-3000:]
    return [match for match in found if ("rid='HEALTH_CHECK_" in match["fields"]) == health]


def openai_lines(sim):
    return [OPENAI_RE.match(line) for line in sim.log().splitlines() if "Receive OpenAI: obj=" in line]


def sampling_params_of(fields: str) -> dict:
    match = re.search(r"sampling_params=(\{.*?\}), return_logprob=", fields)
    assert match, fields
    return ast.literal_eval(match.group(1))


def field_names(fields: str):
    """The GenerateReqInput field names of a Receive line, in order (dict keys inside are quoted, not name=)."""
    return re.findall(r"(?:^|, )(\w+)=", fields)


def json_events(sim):
    events = []
    for line in split_at_ready(sim.log())[1]:
        match = JSON_RE.match(line)
        if match and match["event"].startswith('{"timestamp"'):
            events.append(json.loads(match["event"]))
    return events


def generate(sim, body, headers=None):
    status, _headers, raw = http("POST", sim.url + "/generate", body, headers)
    assert status == 200, raw
    return json.loads(raw)


def test_incident_chat_request_logs_the_values_the_server_filled_in(start_logging_sim):
    sim = start_logging_sim(["--log-requests"])
    status, _body = sim.chat(INCIDENT_REQUEST)
    assert status == 200
    # Level 2 (SGLang's default): the raw OpenAI request first, then the GenerateReqInput the adapter built.
    after = "\n".join(split_at_ready(sim.log())[1])
    assert after.index("Receive OpenAI: obj=") < after.index("Receive: obj=")
    (raw,) = openai_lines(sim)
    assert raw, "malformed Receive OpenAI line"
    sent = ast.literal_eval(raw["obj"])
    # The client's request as SGLang's model holds it: its temperature, the model's defaults, no top_p/top_k.
    assert sent["messages"] == QUESTION and sent["temperature"] == 0.7 and sent["model"] == "default"
    assert sent["presence_penalty"] == 0.0 and sent["tool_choice"] == "none"
    assert not {"top_p", "top_k", "min_p", "repetition_penalty"} & set(sent)
    (received,) = receive_lines(sim)
    params = sampling_params_of(received["fields"])
    # top_p/top_k/min_p/repetition_penalty from generation_config.json, temperature the client's, presence_penalty
    # never from the file (its 1.5 is ignored), --preferred-sampling-params not applied (the adapter filled every key).
    assert {key: params[key] for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                                         "frequency_penalty", "max_new_tokens")} == {
        "temperature": 0.7, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "max_new_tokens": None}
    assert list(params) == CHAT_SAMPLING_KEYS
    # The simulator's subset of GenerateReqInput, in SGLang's order; no prompt (SGLang logs token ids there).
    assert field_names(received["fields"]) == ["rid", "session_id", "sampling_params", "return_logprob", "logprob_start_len",
                                               "top_logprobs_num", "return_text_in_logprobs", "stream", "log_metrics"]
    assert re.match(r"rid='[0-9a-f]{32}', session_id=None, ", received["fields"])
    assert received["fields"].endswith("return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, "
                                       "return_text_in_logprobs=True, stream=False, log_metrics=True")
    assert received["headers"] is None


def test_generate_logs_the_requests_own_params_before_the_preferred_merge(start_logging_sim):
    sim = start_logging_sim(["--log-requests"])
    long_text = "x" * 1500 + "y" * 1500
    generate(sim, {"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 8, "temperature": 0.7}},
             {"x-smg-routing-key": "tenant-a"})
    generate(sim, {"text": long_text, "sampling_params": {"max_new_tokens": 4}})
    assert not openai_lines(sim)  # the native endpoint has no OpenAI request to log
    first, second = receive_lines(sim)
    # The request's own dict: --preferred-sampling-params (top_p 0.95, presence_penalty 1.5, ...) is merged later.
    assert sampling_params_of(first["fields"]) == {"max_new_tokens": 8, "temperature": 0.7}
    assert field_names(first["fields"]) == ["rid", "session_id", "text", "input_ids", "sampling_params", "return_logprob",
                                            "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs", "stream",
                                            "log_metrics"]
    assert "text='What is 2+2?', input_ids=None, " in first["fields"]
    assert first["headers"] == "{'x-smg-routing-key': 'tenant-a'}"
    # Level 2 keeps 1024 characters of each end of a string longer than 2048.
    assert "text=%r ... %r, input_ids=None" % ("x" * 1024, "y" * 1024) in second["fields"]


@pytest.mark.parametrize("level", [0, 1, 3])
def test_log_requests_level(start_logging_sim, level):
    sim = start_logging_sim(["--log-requests", "--log-requests-level", str(level)])
    assert sim.chat(INCIDENT_REQUEST)[0] == 200
    long_text = "x" * 1500 + "y" * 1500
    generate(sim, {"text": long_text, "sampling_params": {"max_new_tokens": 4}})
    chat, native = receive_lines(sim)
    # Only levels 2 and 3 log the raw OpenAI request.
    assert len(openai_lines(sim)) == (1 if level == 3 else 0)
    if level == 0:
        assert "sampling_params" not in chat["fields"] and "sampling_params" not in native["fields"]
    else:
        assert sampling_params_of(chat["fields"])["top_p"] == 0.95
        assert sampling_params_of(native["fields"]) == {"max_new_tokens": 4}
    if level < 2:
        assert "text=" not in native["fields"] and "input_ids=" not in native["fields"]
    else:
        assert "text=%r, input_ids=None" % long_text in native["fields"]  # level 3: never truncated


def test_json_format(start_logging_sim):
    sim = start_logging_sim(["--log-requests", "--log-requests-format", "json"])
    assert sim.chat(dict(INCIDENT_REQUEST, rid="incident-14"))[0] == 200
    long_text = "x" * 1500 + "y" * 1500
    generate(sim, {"text": long_text, "sampling_params": {"max_new_tokens": 4}})
    assert "Receive" not in sim.log()
    events = json_events(sim)
    assert [event["event"] for event in events] == ["request.received.openai", "request.received", "request.received"]
    openai, chat, native = events
    for event in events:
        assert list(event)[:2] == ["timestamp", "event"]
        datetime.fromisoformat(event["timestamp"])
    assert openai["obj"]["temperature"] == 0.7 and "top_p" not in openai["obj"] and "rid" not in openai
    assert chat["rid"] == chat["obj"]["rid"] == "incident-14"
    params = chat["obj"]["sampling_params"]
    assert (params["temperature"], params["top_p"], params["top_k"], params["min_p"], params["repetition_penalty"],
            params["presence_penalty"]) == (0.7, 0.95, 20, 0.0, 1.0, 0.0)
    assert list(chat["obj"]) == ["rid", "session_id", "sampling_params", "return_logprob", "logprob_start_len",
                                 "top_logprobs_num", "return_text_in_logprobs", "stream", "log_metrics"]
    assert native["obj"]["sampling_params"] == {"max_new_tokens": 4}
    assert native["obj"]["text"] == "x" * 1024 + "..." + "y" * 1024


def test_nothing_is_logged_without_log_requests(start_logging_sim, tmp_path):
    target = tmp_path / "requests"
    sim = start_logging_sim(["--log-requests-target", str(target)])
    assert sim.chat(INCIDENT_REQUEST)[0] == 200
    generate(sim, {"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 4}})
    assert http("GET", sim.url + "/health")[0] == 200
    assert "Receive" not in sim.log() and "request.received" not in sim.log()
    # SGLang creates its request logger (and a target's file) with the server, logging or not.
    assert (target / ("%s_0.log" % socket.gethostname())).read_text() == ""


def test_target_directory_and_stdout(start_logging_sim, tmp_path):
    target = tmp_path / "requests"
    sim = start_logging_sim(["--log-requests", "--log-requests-level", "1", "--log-requests-target", str(target), "stdout"])
    assert sim.chat(INCIDENT_REQUEST)[0] == 200
    (on_stdout,) = receive_lines(sim)
    # The warm-up, then the chat request.
    in_file = (target / ("%s_0.log" % socket.gethostname())).read_text().splitlines()
    assert len(in_file) == 2 and all(RECEIVE_RE.match(line) for line in in_file)
    assert in_file[1].split("] ", 1)[1] == on_stdout.group(0).split("] ", 1)[1]


def test_health_checks_are_logged_as_sglangs_one_token_request(start_logging_sim, make_gpu_kit):
    sim = start_logging_sim(["--log-requests", "--log-requests-level", "1"])
    assert http("GET", sim.url + "/health")[0] == 200
    assert http("GET", sim.url + "/health_generate")[0] == 200
    checks = receive_lines(sim, health=True)
    assert len(checks) == 2
    for check in checks:
        assert re.match(r"rid='HEALTH_CHECK_[0-9a-f]{32}', session_id=None, sampling_params=\{'max_new_tokens': 1, "
                        r"'temperature': 0.0\}, .*, log_metrics=False$", check["fields"])
    # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: /health answers without generating, /health_generate still generates.
    # A second server while the first runs: on GPUs of its own (the first one's hold most of their memory).
    quiet = start_logging_sim(["--log-requests"], SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION="0", **make_gpu_kit().env())
    assert http("GET", quiet.url + "/health")[0] == 200
    assert not receive_lines(quiet, health=True)
    assert http("GET", quiet.url + "/health_generate")[0] == 200
    assert len(receive_lines(quiet, health=True)) == 1


def test_the_warm_up_is_the_first_request_logged(start_logging_sim):
    # Real SGLang posts its warm-up to /generate before it reports ready: the first Receive line of every start.
    sim = start_logging_sim(["--log-requests"])
    (warm_up,) = receive_lines(sim, warm_up=True)
    assert sampling_params_of(warm_up["fields"]) == {"temperature": 0, "max_new_tokens": 8}
    assert "text=%r" % WARM_UP_TEXT in warm_up["fields"]
