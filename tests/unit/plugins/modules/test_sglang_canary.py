# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_canary against the SGLang simulator on 127.0.0.1, healthy and with each fault it catches, and against a
hostile stand-in server; reference files that are corrupt, symlinks or written for another key."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import canary
from ansible_collections.llmops.serving.plugins.modules import sglang_canary
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.simulators import sim_harness
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import H200_MIB, SPEC_ARGS, GpuKit, SimProcess, http

API_KEY = "sk-canary-5e1f0a9d77"
KEY = {"model_revision": "0123abc", "sglang": "0.5.23", "tp_size": 1}
SPEC_KEY = dict(KEY, speculative_algorithm="EAGLE", speculative_num_steps=3)
TOOL_ARGS = ["--tool-call-parser", "qwen3_coder"]
# Small and quick: the long prompt 2000 tokens, a short soak.
QUICK = {"long_context_tokens": 2000, "soak_requests": 8, "soak_concurrency": 4, "soak_timeout": 20, "timeout": 30}


@pytest.fixture
def sims(tmp_path, tmp_path_factory):
    """sims(args, gpu=0, **env) -> a ready SimProcess on one of two H200s; all killed at teardown."""
    kit = GpuKit(tmp_path_factory.mktemp("gpu-kit"), memory_mib=H200_MIB, name="NVIDIA H200")
    sim_harness.use_default_kit(lambda: kit)
    runs = []

    def _start(args=(), gpu=0, **env):
        run = SimProcess(tmp_path, list(args) + ["--base-gpu-id", str(gpu)], **env)
        runs.append(run)
        run.wait_ready()
        return run

    yield _start
    for run in runs:
        run.stop()
    sim_harness.use_default_kit(None)


def canary_run(sim, reference, key=None, check_mode=False, **options):
    args = dict(QUICK, url=sim.url if hasattr(sim, "url") else sim, reference_path=str(reference), reference_key=key or KEY)
    args.update(options)
    return run_module(sglang_canary.main, args, check_mode=check_mode)


def by_name(result):
    return {item["name"]: item for item in result["canaries"]}


def test_healthy_speculative_server_records_then_passes_every_canary(sims, tmp_path):
    sim = sims(SPEC_ARGS + TOOL_ARGS + ["--api-key", API_KEY])
    reference = tmp_path / "state" / "canary-reference.json"
    result, failed = canary_run(sim, reference, SPEC_KEY, api_key=API_KEY, tool_call_parser="qwen3_coder")
    assert not failed, result["msg"]
    assert result["changed"] is True and result["reference"]["recorded"] is True
    assert [item["name"] for item in result["canaries"]] == list(canary.CANARIES)
    assert all(item["passed"] is True for item in result["canaries"]), result["canaries"]
    assert result["acceptance"]["short"] > 2.0 and result["acceptance"]["long"] > 2.0
    assert by_name(result)["long_context_acceptance"]["details"]["long_prompt_tokens"] > 1800
    assert oct(os.stat(reference).st_mode & 0o777) == "0o644"
    assert API_KEY not in json.dumps(result), "the key is in /server_info; none of it may come back"
    again, failed = canary_run(sim, reference, SPEC_KEY, api_key=API_KEY, tool_call_parser="qwen3_coder")
    assert not failed and again["changed"] is False and again["reference"]["recorded"] is False
    assert by_name(again)["greedy_reference"]["message"] == "4 prompts match the recorded greedy reference"
    # Without the key the server refuses; the canaries fail with its answer, never with the key.
    refused, failed = canary_run(sim, reference, SPEC_KEY, api_key="sk-wrong-key-000111", canaries=["greedy_reference"])
    assert failed and "401" in refused["msg"] and "sk-wrong-key-000111" not in json.dumps(refused)


def test_check_mode_records_nothing(sims, tmp_path):
    sim = sims([])
    reference = tmp_path / "ref.json"
    result, failed = canary_run(sim, reference, check_mode=True, canaries=["greedy_reference"])
    assert not failed and result["changed"] is False and not reference.exists()
    assert by_name(result)["greedy_reference"]["message"].startswith("would record the greedy reference of 4 prompts")


def test_skipped_canaries_say_why(sims, tmp_path):
    sim = sims([])
    result, failed = canary_run(sim, tmp_path / "ref.json")
    assert not failed
    verdicts = by_name(result)
    assert verdicts["speculative_lossless"]["passed"] is None
    assert verdicts["speculative_lossless"]["message"] == "skipped: the server runs without speculative decoding"
    assert verdicts["tool_call"]["message"].startswith("skipped: no tool_call_parser is set")
    assert verdicts["long_context_acceptance"]["passed"] is None and result["acceptance"] == {"short": None, "long": None}
    assert "skipped: speculative_lossless, tool_call, long_context_acceptance" in result["msg"]


def test_greedy_reference_mismatch_names_prompt_position_ids_and_text(sims, tmp_path):
    sim = sims([])
    reference = tmp_path / "ref.json"
    first, failed = canary_run(sim, reference, canaries=["greedy_reference"])
    assert not failed
    data = json.loads(reference.read_text())
    entry = data["entries"][first["reference"]["key_hash"]]
    prompt = canary.DEFAULT_PROMPTS[1]
    entry["prompts"][prompt]["output_ids"][5] += 1
    reference.write_text(json.dumps(data))
    result, failed = canary_run(sim, reference, canaries=["greedy_reference"])
    assert failed and result["failed_canaries"] == ["greedy_reference"]
    mismatch = by_name(result)["greedy_reference"]["details"]["mismatches"][0]
    assert mismatch["position"] == 5 and mismatch["prompt"] == prompt
    assert mismatch["expected_ids"][0] == mismatch["actual_ids"][0] + 1
    assert mismatch["expected_text"] and mismatch["actual_text"]
    assert result["msg"].startswith("canaries failed: greedy_reference (1 of 4 prompts differ")
    assert "token 5 differs" in result["msg"]
    # refresh_reference records the server's output again.
    refreshed, failed = canary_run(sim, reference, canaries=["greedy_reference"], refresh_reference=True)
    assert not failed and refreshed["changed"] is True
    assert by_name(refreshed)["greedy_reference"]["details"]["differed_from_previous"] == [prompt]
    assert not canary_run(sim, reference, canaries=["greedy_reference"])[1]


def test_wrong_drafts_fail_speculative_lossless_against_the_reference_without_speculation(sims, tmp_path):
    reference = tmp_path / "ref.json"
    plain = sims([])
    assert not canary_run(plain, reference, canaries=["greedy_reference"])[1]
    healthy = sims(SPEC_ARGS, gpu=1)
    result, failed = canary_run(healthy, reference, SPEC_KEY, canaries=["greedy_reference", "speculative_lossless"])
    assert not failed, result["msg"]
    assert by_name(result)["speculative_lossless"]["details"]["compared_without_speculation"] == 4
    healthy.stop()
    wrong = sims(SPEC_ARGS, gpu=1, SGLANG_SIM_FAULT="wrong-drafts")
    result, failed = canary_run(wrong, reference, SPEC_KEY, canaries=["greedy_reference", "speculative_lossless"])
    # The reference the healthy speculative server recorded under this key catches it too.
    assert failed and result["failed_canaries"] == ["greedy_reference", "speculative_lossless"]
    verdict = by_name(result)["speculative_lossless"]
    assert verdict["message"].startswith("4 problems; first: speculative decoding is not lossless: prompt ")
    assert all(item["position"] == 4 for item in verdict["details"]["mismatches"])
    # Without the reference recorded without speculation, only self-consistency is checked, and it holds.
    alone, failed = canary_run(wrong, tmp_path / "other.json", SPEC_KEY, canaries=["speculative_lossless"])
    assert not failed and "lossless output was not compared" in by_name(alone)["speculative_lossless"]["message"]


def test_rejected_drafts_fail_acceptance_and_keep_lossless(sims, tmp_path):
    sim = sims(SPEC_ARGS, SGLANG_SIM_FAULT="rejected-drafts")
    result, failed = canary_run(sim, tmp_path / "ref.json", SPEC_KEY, canaries=["speculative_lossless", "long_context_acceptance"])
    assert failed and result["failed_canaries"] == ["long_context_acceptance"]
    assert "speculative acceptance is lost" in result["msg"]
    # Every verify pass yields the target's one token; the first comes from prefill, so slightly above 1.
    assert 1.0 < result["acceptance"]["short"] < 1.1


def test_long_context_accept_fails_past_the_threshold(sims, tmp_path):
    sim = sims(SPEC_ARGS, SGLANG_SIM_FAULT="long-context-accept", SGLANG_SIM_LONG_CONTEXT_TOKENS="1000")
    result, failed = canary_run(sim, tmp_path / "ref.json", SPEC_KEY, canaries=["long_context_acceptance"])
    assert failed and "acceptance collapses with context" in result["msg"]
    assert result["acceptance"]["short"] > 2.0 and result["acceptance"]["long"] < 1.1
    # Below the threshold the same server passes.
    result, failed = canary_run(sim, tmp_path / "ref.json", SPEC_KEY, canaries=["long_context_acceptance"], long_context_tokens=900)
    assert not failed, result["msg"]


def test_long_prompt_is_bounded_by_the_context(sims, tmp_path):
    sim = sims(SPEC_ARGS + ["--context-length", "1500"])
    result, failed = canary_run(sim, tmp_path / "ref.json", SPEC_KEY, canaries=["long_context_acceptance"], long_context_tokens=32768)
    assert not failed, result["msg"]
    details = by_name(result)["long_context_acceptance"]["details"]
    assert details["target_tokens"] == 1500 - 64 - canary.CONTEXT_MARGIN and details["long_prompt_tokens"] < 1500


def test_tool_call_in_reasoning_is_named(sims, tmp_path):
    sim = sims(SPEC_ARGS + TOOL_ARGS, SGLANG_SIM_FAULT="tool-call-in-reasoning")
    result, failed = canary_run(sim, tmp_path / "ref.json", canaries=["tool_call"], tool_call_parser="qwen3_coder")
    assert failed
    verdict = by_name(result)["tool_call"]
    assert verdict["details"]["found_in"] == "reasoning_content"
    assert verdict["message"].startswith("the tool call came back inside reasoning_content and tool_calls is null")
    no_parser = sims(SPEC_ARGS, gpu=1)
    result, failed = canary_run(no_parser, tmp_path / "ref.json", canaries=["tool_call"], tool_call_parser="qwen3_coder")
    assert failed and by_name(result)["tool_call"]["details"]["found_in"] == "content"


def test_hang_after_k_requests_fails_the_soak_naming_how_many_completed(sims, tmp_path):
    sim = sims(SPEC_ARGS, SGLANG_SIM_FAULT="hang-after", SGLANG_SIM_HANG_AFTER="6")
    result, failed = canary_run(sim, tmp_path / "ref.json", canaries=["soak"], soak_requests=20, soak_timeout=2)
    assert failed
    details = by_name(result)["soak"]["details"]
    assert details["completed"] == 6 and details["failure"]["completed_before"] == 6
    assert "6 of 20 requests completed" in result["msg"] and "timed out" in result["msg"]
    assert http("GET", sim.url + "/health")[0] == 200, "the server still looks healthy"


# ---- a hostile server -----------------------------------------------------------------------------------------------
class Hostile:
    """Answers every path with (status, body bytes) from ``answers`` (by path; "*" for the rest)."""

    def __init__(self, answers):
        self.answers = answers
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body = owner.answers.get(self.path, owner.answers.get("*", (404, b"{}")))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile():
    servers = []

    def _make(answers):
        server = Hostile(answers)
        servers.append(server)
        return server
    yield _make
    for server in servers:
        server.close()


def test_garbage_answers_fail_each_canary_without_crashing(hostile, tmp_path):
    server = hostile({"/server_info": (200, b"[1, 2"), "*": (200, b"\x00\x1b[31mnot json\n" + API_KEY.encode())})
    result, failed = canary_run(server.url, tmp_path / "ref.json", api_key=API_KEY, speculative=True, tool_call_parser="qwen3_coder")
    assert failed and set(result["failed_canaries"]) == set(canary.CANARIES)
    assert result["server"] == {"error": "GET /server_info returned a body that is not JSON: [1, 2"}
    assert API_KEY not in json.dumps(result) and "\x1b" not in json.dumps(result)
    assert "\n" not in result["msg"]


def test_huge_body_and_ids_that_are_not_ids(hostile, tmp_path):
    huge = hostile({"*": (200, b"{\"text\": \"" + b"a" * (3 * 1024 * 1024) + b"\"}")})
    result, failed = canary_run(huge.url, tmp_path / "ref.json", canaries=["greedy_reference"])
    assert failed and "larger than" in result["msg"]
    bad = hostile({"/generate": (200, json.dumps({"text": "x", "output_ids": [1, True, "2"], "meta_info": {}}).encode())})
    result, failed = canary_run(bad.url, tmp_path / "ref.json", canaries=["greedy_reference"])
    assert failed and "without output_ids" in result["msg"]
    many = hostile({"/generate": (200, json.dumps({"text": "x", "output_ids": list(range(40)), "meta_info": {}}).encode())})
    result, failed = canary_run(many.url, tmp_path / "ref.json", canaries=["greedy_reference"])
    assert failed and "40 token ids for max_new_tokens 32" in result["msg"]


GOOD_GENERATE = json.dumps({"text": "one two", "output_ids": [1, 2], "meta_info": {"completion_tokens": 2}}).encode()


def test_corrupt_reference_fails_and_refresh_sets_it_aside(hostile, tmp_path):
    server = hostile({"/generate": (200, GOOD_GENERATE)})
    reference = tmp_path / "ref.json"
    reference.write_text("{\"format\": 1, \"entries\": ")
    result, failed = canary_run(server.url, reference, canaries=["greedy_reference"])
    assert failed and "is not JSON" in result["msg"] and "refresh_reference=true replaces it" in result["msg"]
    result, failed = canary_run(server.url, reference, canaries=["greedy_reference"], refresh_reference=True)
    assert not failed and result["changed"] is True
    assert [name for name in os.listdir(tmp_path) if name.startswith("ref.json.corrupt-")]
    assert canary.load_references(str(reference))["entries"][canary.key_hash(KEY, 32)]["prompts"]


def test_reference_written_for_another_key_is_corrupt(hostile, tmp_path):
    server = hostile({"/generate": (200, GOOD_GENERATE)})
    reference = tmp_path / "ref.json"
    entry = {"key": dict(KEY, sglang="0.5.22"), "reference_tokens": 32, "speculative": False, "prompts": {}}
    reference.write_text(json.dumps({"format": 1, "entries": {canary.key_hash(KEY, 32): entry}}))
    result, failed = canary_run(server.url, reference, canaries=["greedy_reference"])
    assert failed and "written for another key" in result["msg"]
    # Entries of other keys, well formed, are kept when this key's is recorded.
    reference.write_text(json.dumps({"format": 1, "entries": {canary.key_hash(entry["key"], 32): entry}}))
    result, failed = canary_run(server.url, reference, canaries=["greedy_reference"])
    assert not failed and result["changed"] is True
    assert len(canary.load_references(str(reference))["entries"]) == 2


def test_symlinked_reference_is_never_followed(hostile, tmp_path):
    server = hostile({"/generate": (200, GOOD_GENERATE)})
    target = tmp_path / "elsewhere.json"
    target.write_text("precious")
    link = tmp_path / "ref.json"
    link.symlink_to(target)
    for refresh in (False, True):
        result, failed = canary_run(server.url, link, canaries=["greedy_reference"], refresh_reference=refresh)
        assert failed and "is a symbolic link, not a regular file" in result["msg"]
    assert target.read_text() == "precious" and os.path.islink(link)


# ---- the logic on synthetic answers ---------------------------------------------------------------------------------
def chat(message, finish="stop"):
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def call(name="get_weather", arguments='{"city": "Paris"}'):
    return {"id": "call_1", "index": 0, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize("response, passed, words", [
    (chat({"content": None, "tool_calls": [call()]}, "tool_calls"), True, "called get_weather(city=Paris)"),
    (chat({"content": None, "tool_calls": [call(arguments="{city: Paris")]}), False, "not a JSON object"),
    (chat({"content": None, "tool_calls": [call(arguments='{"town": "Paris"}')]}), False, "has no city argument"),
    (chat({"content": None, "tool_calls": [call(name="get_time")]}), False, "not get_weather"),
    (chat({"content": "", "reasoning_content": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis", "tool_calls": None}),
     False, "inside reasoning_content"),
    (chat({"content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "tool_calls": None}),
     False, "as text in content"),
    (chat({"content": "I cannot check the weather.", "tool_calls": None}), False, "no tool call in the answer"),
    (chat({"content": "thinking...", "tool_calls": None}, "length"), False, "cut at max_tokens"),
    ({"choices": []}, False, "has no choices"),
    ("not a dict", False, "has no choices"),
])
def test_judge_tool_call(response, passed, words):
    verdict = canary.judge_tool_call(response, "qwen3_coder")
    assert verdict["passed"] is passed and words in verdict["message"]


def test_first_difference():
    assert canary.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert canary.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert canary.first_difference([1, 2, 3], [1, 2]) == 2


def test_accept_length_sources():
    assert canary.accept_length({"spec_accept_length": 3.2}) == (3.2, "meta_info.spec_accept_length")
    assert canary.accept_length({"spec_verify_ct": 10, "completion_tokens": 32})[0] == 3.2
    assert canary.accept_length({"completion_tokens": 32}) == (None, "meta_info has no spec_verify_ct")

    class Metrics:
        @staticmethod
        def call(method, path, body, timeout, text=False):
            assert (method, path, text) == ("GET", "/metrics", True)
            return 'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.5\n'
    assert canary.accept_length({}, Metrics(), 5) == (2.5, "/metrics sglang:spec_accept_length (last decode interval)")


def test_quote_escapes_control_characters_and_masks_the_key():
    text = canary.quote("a\x00b\x1b[31m\n" + API_KEY, 200, API_KEY)
    assert "\x00" not in text and "\x1b" not in text and "\n" not in text and API_KEY not in text


def test_key_hash_and_base_key():
    assert canary.key_hash(KEY, 32) == canary.key_hash(dict(reversed(list(KEY.items()))), 32)
    assert canary.key_hash(KEY, 32) != canary.key_hash(KEY, 16)
    assert canary.base_key(SPEC_KEY) == KEY


def test_the_key_takes_the_servers_numerics_from_server_info_and_never_its_port_or_key(sims, tmp_path):
    sim = sims(["--api-key", API_KEY])
    reference = tmp_path / "ref.json"
    result, failed = canary_run(sim, reference, canaries=["greedy_reference"], api_key=API_KEY)
    assert not failed
    key = canary.load_references(str(reference))["entries"][result["reference"]["key_hash"]]["key"]
    assert key["tp_size"] == 1 and "model_path" in key and set(KEY) <= set(key)
    assert not {"port", "api_key", "host", "tool_call_parser"} & set(key)
    assert API_KEY not in json.dumps(key)
    # Without it, the caller's key alone.
    result, failed = canary_run(sim, tmp_path / "plain.json", canaries=["greedy_reference"], api_key=API_KEY, key_from_server=False)
    assert not failed and result["reference"]["key_hash"] == canary.key_hash(KEY, 32)
