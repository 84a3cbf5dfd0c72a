# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests for generation_probe against a tiny OpenAI-style server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ansible_collections.llmops.serving.plugins.modules import generation_probe
from ansible_collections.llmops.serving.tests.unit.fakes import across_cut, echoed_forms, key_windows_shown, random_key
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

API_KEY = "sk-test-7f3a9c1e55"
LOOP_REASONING = "Okay, the user asks what 2+2 is. " + "The user's question is 2+2. " * 60
VARIED_REASONING = (
    "The user asks what 2+2 is. This is basic arithmetic: adding two and two gives four. Let me double-check by "
    "counting: one, two, then three, four. So the sum is 4. There is no trick in the wording, no unusual base or "
    "notation, so the plain answer is right. I should reply briefly, perhaps with the equation written out."
)
VARIED_CONTENT = "2 + 2 = 4."

SPEC_HIGH = {"decode_lines": 12, "accept_length": {"mean": 3.92, "min": 3.8, "max": 4.0, "last": 3.9},
             "acceptance_rate": {"mean": 0.9733, "num_steps": 3, "num_draft_tokens": 4}}
SPEC_LOW = {"decode_lines": 12, "accept_length": {"mean": 1.31, "min": 1.1, "max": 1.5, "last": 1.3},
            "acceptance_rate": {"mean": 0.1033, "num_steps": 3, "num_draft_tokens": 4}}


# Verbatim public texts, the same files (and sources) as in test_degeneration.py.
DEGENERATION_DATA = Path(__file__).parents[1] / "module_utils" / "data" / "degeneration"
# https://github.com/python/cpython/blob/000593c0f97ac9b75b56064a957b84a3aaa60674/README.rst (first 45 lines):
# healthy text with 12- to 29-character "=" and "-" underlines.
RULED_README = (DEGENERATION_DATA / "cpython-readme-3.7.13-excerpt.rst").read_text(encoding="utf-8")
# https://github.com/vllm-project/vllm/issues/13952: a model writing its chat template again and again (Chinese).
CJK_TEMPLATE_LOOP = (DEGENERATION_DATA / "vllm-13952-template-loop.txt").read_text(encoding="utf-8")


class FakeServer:
    """OpenAI-style /v1/chat/completions with canned answers; records each request."""

    def __init__(self, behaviour="varied", require_key=API_KEY, max_requests=20, content=None, answer=None):
        self.behaviour = behaviour
        self.content = content
        self.answer = answer
        self.require_key = require_key
        self.max_requests = max_requests
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length).decode("utf-8"))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if len(server.requests) > server.max_requests:
                    return self._send(429, {"error": "too many requests in this test"})
                if server.require_key and self.headers.get("Authorization") != "Bearer " + server.require_key:
                    return self._send(401, {"error": "Unauthorized"})
                if server.behaviour == "error_echoing_key":
                    return self._send(500, {"error": "internal error for key %s" % self.headers.get("Authorization")})
                if server.behaviour == "error_echoing_cut_header":
                    # A proxy that quotes the start of the header it rejected: not the whole key, so not the literal.
                    return self._send(502, {"error": "upstream refused Authorization: %s..." % self.headers.get("Authorization")[:17]})
                if server.behaviour == "answer":  # (status, body text) as the test wrote it
                    status, text = server.answer
                    data = text.encode("utf-8")
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                if server.behaviour == "raw":  # bytes as the test wrote them, status line included
                    self.wfile.write(server.answer.encode("utf-8"))
                    self.close_connection = True
                    return None
                if server.behaviour == "not_json":
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"<html>oops</html>")
                    return None
                if server.behaviour == "loop_without_card_values" and body.get("presence_penalty") is None:
                    reasoning, content, finish = LOOP_REASONING, None, "length"
                elif server.behaviour == "loop":
                    reasoning, content, finish = LOOP_REASONING, None, "length"
                elif server.behaviour == "content":
                    reasoning, content, finish = None, server.content, "length"
                else:
                    reasoning, content, finish = VARIED_REASONING, VARIED_CONTENT, "stop"
                return self._send(200, {
                    "id": "chatcmpl-%d" % len(server.requests),
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": content, "reasoning_content": reasoning}}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 200, "total_tokens": 212},
                })

            def _send(self, status, payload):
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server_factory():
    servers = []

    def make(**kwargs):
        server = FakeServer(**kwargs).__enter__()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.__exit__(None, None, None)


def _args(server, **extra):
    args = {"url": server.url, "api_key": API_KEY, "model": "qwen3.6-27b", "timeout": 10}
    args.update(extra)
    return args


def _assert_key_absent(result):
    assert API_KEY not in json.dumps(result, default=str)


def test_varied_output_is_healthy(server_factory):
    server = server_factory(behaviour="varied")
    result, failed = run_module(generation_probe.main, _args(server))
    assert not failed, result.get("msg")
    assert result["changed"] is False
    assert result["degenerate"] is False
    assert len(result["samples"]) == len(generation_probe.DEFAULT_PROMPTS) == len(server.requests)
    sample = result["samples"][0]
    assert sample["prompt"] == "What is 2+2?"
    assert sample["reasoning_content"]["degenerate"] is False
    assert sample["content"]["preview"] == VARIED_CONTENT
    assert result["diagnosis"]["verdict"] == "healthy"
    # The request carried the card's thinking-mode values, the model name and the key as a bearer token.
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer " + API_KEY
    body = request["body"]
    assert body["model"] == "qwen3.6-27b"
    assert body["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    for key, value in {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0,
                       "repetition_penalty": 1.0}.items():
        assert body[key] == value
    assert "chat_template_kwargs" not in body
    assert result["sampling"]["temperature"] == 1.0
    assert result["differs_from_card"] == {}
    _assert_key_absent(result)


def test_loop_with_high_acceptance_is_a_sampling_loop(server_factory):
    server = server_factory(behaviour="loop_without_card_values")
    overrides = {"temperature": 0.7, "top_p": None, "top_k": None, "min_p": None, "presence_penalty": None, "repetition_penalty": None}
    result, failed = run_module(generation_probe.main, _args(server, sampling=overrides, num_samples=2, spec_stats=SPEC_HIGH))
    assert failed
    assert result["degenerate"] is True and result["degenerate_samples"] == 2
    assert result["diagnosis"]["verdict"] == "sampling loop"
    assert "check temperature/presence_penalty against the model card" in result["msg"]
    assert "presence_penalty=None (card 0.0)" in result["msg"]
    assert "temperature=0.7 (card 1.0)" in result["msg"]
    body = server.requests[0]["body"]
    assert body["temperature"] == 0.7 and "presence_penalty" not in body and "top_k" not in body
    assert result["samples"][0]["reasoning_content"]["longest_run"]["repeats"] >= 40
    assert result["samples"][0]["finish_reason"] == "length"
    _assert_key_absent(result)


def test_same_server_with_card_values_is_healthy(server_factory):
    # The fake server loops only when presence_penalty is missing, like the incident's client.
    server = server_factory(behaviour="loop_without_card_values")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, spec_stats=SPEC_HIGH))
    assert not failed, result.get("msg")
    assert result["diagnosis"]["verdict"] == "healthy"


def test_healthy_text_with_low_acceptance_is_the_draft_path(server_factory):
    server = server_factory(behaviour="varied")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, spec_stats=SPEC_LOW))
    assert not failed
    assert result["diagnosis"]["verdict"] == "draft path"
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, spec_stats=SPEC_LOW, fail_on_draft_path=True))
    assert failed and "the draft path (MTP head, --speculative-* flags, long context) is the suspect" in result["msg"]


def test_degenerate_without_stats_and_no_fail(server_factory):
    server = server_factory(behaviour="loop")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, fail_on_degenerate=False))
    assert not failed
    assert result["degenerate"] is True
    assert result["diagnosis"]["verdict"] == "degenerate output (no speculative stats to separate causes)"


def test_non_thinking_mode_sends_template_kwargs(server_factory):
    server = server_factory(behaviour="varied")
    result, failed = run_module(generation_probe.main, _args(server, mode="non_thinking", num_samples=1, prompts=["Say hi."]))
    assert not failed
    body = server.requests[0]["body"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["presence_penalty"] == 1.5 and body["top_p"] == 0.8 and body["temperature"] == 0.7
    assert result["chat_template_kwargs"] == {"enable_thinking": False}


def test_prompts_cycle_and_max_tokens(server_factory):
    server = server_factory(behaviour="varied")
    result, failed = run_module(generation_probe.main, _args(server, prompts=["a", "b"], num_samples=3, max_tokens=64))
    assert not failed
    assert [request["body"]["messages"][0]["content"] for request in server.requests] == ["a", "b", "a"]
    assert all(request["body"]["max_tokens"] == 64 for request in server.requests)
    assert [sample["index"] for sample in result["samples"]] == [0, 1, 2]


def test_check_mode_sends_the_same_requests(server_factory):
    server = server_factory(behaviour="varied")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1), check_mode=True)
    assert not failed and result["changed"] is False
    assert len(server.requests) == 1


def test_wrong_key_fails_without_echoing_it(server_factory):
    server = server_factory(behaviour="varied", require_key="another-key")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1))
    assert failed
    assert "returned 401" in result["msg"]
    _assert_key_absent(result)


def test_server_echoing_the_key_is_scrubbed(server_factory):
    server = server_factory(behaviour="error_echoing_key")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1))
    assert failed
    assert "returned 500" in result["msg"] and "********" in result["msg"]
    _assert_key_absent(result)


def test_an_echoed_authorization_header_is_masked_even_when_cut(server_factory):
    server = server_factory(behaviour="error_echoing_cut_header")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1))
    assert failed and "returned 502" in result["msg"]
    assert "Authorization: Bearer ********" in result["msg"]
    assert API_KEY[:6] not in json.dumps(result, default=str)


def test_a_password_in_the_url_never_comes_back(server_factory):
    server = server_factory(behaviour="varied", require_key="another-key")
    url = server.url.replace("http://", "http://probe:url-pass-4d2c@")
    result, failed = run_module(generation_probe.main, _args(server, url=url, num_samples=1))
    assert failed and "returned 401" in result["msg"]
    assert "url-pass-4d2c" not in json.dumps(result, default=str)
    assert result["endpoint"].startswith("http://probe:********@127.0.0.1:")


def test_body_that_is_not_json(server_factory):
    server = server_factory(behaviour="not_json")
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1))
    assert failed and "not JSON" in result["msg"]


def test_connection_refused(server_factory):
    server = server_factory()
    url = server.url
    server.__exit__(None, None, None)
    result, failed = run_module(generation_probe.main, {"url": url, "api_key": API_KEY, "num_samples": 1, "timeout": 5})
    assert failed and "request 1 of 1 failed" in result["msg"]
    _assert_key_absent(result)


def test_num_samples_bounded(server_factory):
    server = server_factory()
    for count in (0, 101):
        result, failed = run_module(generation_probe.main, _args(server, num_samples=count))
        assert failed and "num_samples must be between 1 and 100" in result["msg"]
    assert server.requests == []


def test_healthy_text_with_rulers_is_healthy(server_factory):
    server = server_factory(behaviour="content", content=RULED_README)
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, spec_stats=SPEC_HIGH))
    assert not failed, result.get("msg")
    assert result["degenerate"] is False
    assert result["samples"][0]["content"]["reasons"] == []
    assert result["diagnosis"]["verdict"] == "healthy"


def test_cjk_block_loop_with_high_acceptance_is_a_sampling_loop(server_factory):
    server = server_factory(behaviour="content", content=CJK_TEMPLATE_LOOP)
    result, failed = run_module(generation_probe.main, _args(server, num_samples=1, spec_stats=SPEC_HIGH))
    assert failed
    assert result["degenerate"] is True
    assert result["diagnosis"]["verdict"] == "sampling loop"
    assert "content: the 121-token sequence '台灣最受歡迎的飲料是奶茶" in result["msg"]


# --------------------------------------------------------------------------- a server that echoes the key

PEER_KEY = random_key(1)
FORMS = echoed_forms(PEER_KEY)
# Where the echoed key starts: well before the module's cut, or so many characters before it (-4: all but its last 4).
PLACES = [None, 7, 13, -4]


def _place(form, place):
    return len(form) + place if place is not None and place < 0 else place


def _probe(server_factory, **server):
    probe = server_factory(require_key=PEER_KEY, **server)
    return run_module(generation_probe.main, _args(probe, api_key=PEER_KEY, num_samples=1))


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_an_error_body_comes_back_in_no_form(server_factory, form, place):
    body = across_cut(FORMS[form], generation_probe.MAX_ERROR_BODY_CHARS, _place(FORMS[form], place),
                      prefix='{"error": "bad key ', suffix='", "code": 401}')
    result, failed = _probe(server_factory, behaviour="answer", answer=(500, body))
    assert failed and "returned 500" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_a_body_that_is_not_json_comes_back_in_no_form(server_factory, form, place):
    body = across_cut(FORMS[form], 200, _place(FORMS[form], place), prefix="<html><p>key ", suffix="</p></html>")
    result, failed = _probe(server_factory, behaviour="answer", answer=(200, body))
    assert failed and "not JSON" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_the_generated_text_comes_back_in_no_form(server_factory, form, place):
    content = across_cut(FORMS[form], generation_probe.PREVIEW_CHARS, _place(FORMS[form], place),
                         prefix="Sure. The key in your request was ", suffix=" and that is all.")
    result, _failed = _probe(server_factory, behaviour="content", content=content)
    assert result["samples"] and result["samples"][0]["content"]["preview"]
    assert not key_windows_shown(PEER_KEY, result), result["samples"][0]["content"]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_a_status_line_comes_back_in_no_form(server_factory, form):
    # http.client quotes a status line that is not one whole in its exception.
    result, failed = _probe(server_factory, behaviour="raw", answer="HTTP/1.1 4o1 refused key %s\r\n\r\n" % FORMS[form])
    assert failed and "failed" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]
