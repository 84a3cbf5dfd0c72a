# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's fault modes: oom, never-ready, low-accept, ignore-sigterm and degenerate."""
from __future__ import annotations

import os
import re
import signal
import time

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import (
    DECODE_RE, READY_LINE, SPEC_ARGS, http, wait_gone,
)
# A fixture, requested by the tests under this name.
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import start_sim_on_one_big_card as start_sim  # pylint: disable=unused-import


CARD = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
OOM_TEXT = ("Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size=")


def decode_lengths(log: str):
    return [float(match.group("len")) for match in (DECODE_RE.match(line) for line in log.splitlines()) if match]


def mean(values):
    return sum(values) / len(values)


def distinct_ratio(text, n=3):
    words = text.split()
    grams = [tuple(words[index:index + n]) for index in range(len(words) - n + 1)]
    return len(set(grams)) / max(1, len(grams))


def test_oom_crashes_at_start_with_sglangs_message(start_sim):
    started = time.time()
    sim = start_sim(["--tp", "2"] + SPEC_ARGS, SGLANG_SIM_FAULT="oom", SGLANG_SIM_STARTUP_SECONDS="1")
    code = sim.proc.wait(timeout=15)
    elapsed = time.time() - started
    assert code == -signal.SIGKILL, "the launcher kills its process tree, itself included, after a child's SIGQUIT"
    assert elapsed < 5
    log = sim.log()
    # Whichever rank fails first gets its traceback out before the launcher kills the tree. The state per request is
    # one rank's: 146.81 MB at TP 1 (a public MI355X log of Qwen3.8-27B), half of it at TP 2.
    assert re.search(r"^\[[^\]]+ TP\d\] Scheduler hit an exception: Traceback \(most recent call last\):$", log, re.M)
    assert re.search(r"^RuntimeError: " + re.escape(OOM_TEXT) + r"-\d+ \(total_rest_memory=-\d+\.\d\d GB, mamba_cache_per_req=73\.41 MB\)\. "
                     r"Try: \(1\) reduce --max-running-requests, \(2\) increase --mem-fraction-static, "
                     r"\(3\) reduce --speculative-num-draft-tokens, or \(4\) use GPUs with more memory\.$", log, re.M)
    assert re.search(r"^\[[^\]]+\d\] Received sigquit from a child process\. It usually means the child failed\.$", log, re.M)
    assert READY_LINE not in log and "Mamba Cache is allocated" not in log
    assert wait_gone(list(sim.children()))


def test_never_ready_keeps_health_503(start_sim):
    sim = start_sim([], SGLANG_SIM_FAULT="never-ready", SGLANG_LOG_MS="1")
    assert sim.wait_for_log("Uvicorn running on", timeout=10)
    deadline = time.time() + 1.5
    statuses = set()
    while time.time() < deadline:
        statuses.add(http("GET", sim.url + "/health")[0])
        statuses.add(http("GET", sim.url + "/health_generate")[0])
        time.sleep(0.1)
    assert statuses == {503}
    assert READY_LINE not in sim.log()
    assert sim.proc.poll() is None
    assert re.search(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] server_args=", sim.log(), re.M), "SGLANG_LOG_MS=1 adds milliseconds"


def test_low_accept(start_sim):
    sim = start_sim(SPEC_ARGS + ["--decode-log-interval", "5"], SGLANG_SIM_FAULT="low-accept")
    sim.wait_ready()
    status, reply = sim.chat(dict(CARD, messages=QUESTION, max_tokens=400, seed=3))
    assert status == 200
    lengths = decode_lengths(sim.log())
    assert lengths and mean(lengths) < 1.8
    assert distinct_ratio(reply["choices"][0]["message"]["reasoning_content"]) > 0.9, "the text itself is fine"


def test_ignore_sigterm(start_sim):
    sim = start_sim(["--tp", "2"], SGLANG_SIM_FAULT="ignore-sigterm")
    sim.wait_ready()
    children = list(sim.children())
    sim.proc.send_signal(signal.SIGTERM)
    for pid in children:
        # systemd's control-group stop signals every process; the stuck children ignore it too.
        os.kill(pid, signal.SIGTERM)
    time.sleep(1.0)
    assert sim.proc.poll() is None
    assert http("GET", sim.url + "/health")[0] == 200
    assert "SIGTERM received" not in sim.log()
    sim.proc.kill()
    assert sim.proc.wait(timeout=10) == -signal.SIGKILL
    assert wait_gone(children)


def test_degenerate_off_card_loops_with_full_acceptance(start_sim):
    sim = start_sim(SPEC_ARGS + ["--decode-log-interval", "5"], SGLANG_SIM_FAULT="degenerate")
    sim.wait_ready()
    before = len(decode_lengths(sim.log()))
    status, reply = sim.chat({"messages": QUESTION, "temperature": 0.7, "max_tokens": 300})
    assert status == 200
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length"
    text = choice["message"]["reasoning_content"]
    assert text.count("The user's question is 2+2.") >= 20
    assert distinct_ratio(text) < 0.1
    loop_lengths = decode_lengths(sim.log())[before:]
    assert loop_lengths and mean(loop_lengths) >= 3.6, loop_lengths

    before = len(decode_lengths(sim.log()))
    status, reply = sim.chat(dict(CARD, messages=QUESTION, max_tokens=600))
    assert status == 200
    message = reply["choices"][0]["message"]
    assert distinct_ratio(message["reasoning_content"] + " " + message["content"]) > 0.9
    card_lengths = decode_lengths(sim.log())[before:]
    assert card_lengths and 2.4 <= mean(card_lengths) <= 3.8, card_lengths


def test_degenerate_greedy_and_non_thinking_card(start_sim):
    sim = start_sim(SPEC_ARGS, SGLANG_SIM_FAULT="degenerate")
    sim.wait_ready()
    greedy = sim.chat({"messages": QUESTION, "temperature": 0.0, "max_tokens": 120})[1]
    assert greedy["choices"][0]["message"]["reasoning_content"].count("The user's question is 2+2.") >= 10
    non_thinking = {"messages": QUESTION, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "presence_penalty": 1.5,
                    "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 200}
    reply = sim.chat(non_thinking)[1]["choices"][0]
    assert reply["message"]["reasoning_content"] is None
    assert distinct_ratio(reply["message"]["content"]) > 0.9 and reply["finish_reason"] == "stop"
    looping = sim.chat(dict(non_thinking, presence_penalty=0.0))[1]["choices"][0]["message"]["content"]
    assert looping.startswith("The user's question is 2+2. The user's question is 2+2.")
