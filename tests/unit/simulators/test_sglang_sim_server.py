# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A healthy simulator run: log format, endpoints, API key, metrics, process titles and SIGTERM."""
from __future__ import annotations

import json
import re
import signal
import time

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import (
    DECODE_RE, LINE_PREFIX, READY_LINE, SPEC_ARGS, http, pid_alive, wait_gone,
)
# A fixture, requested by the tests under this name.
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import start_sim_on_one_big_card as start_sim  # pylint: disable=unused-import


CARD = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def test_startup_log_lines_and_readiness(start_sim):
    sim = start_sim(["--tp-size", "2"] + SPEC_ARGS + ["--cuda-graph-max-bs-decode", "16"])
    sim.wait_ready()
    status = http("GET", sim.url + "/health")[0]
    assert status == 200
    log = sim.log()
    lines = log.splitlines()
    server_args = [line for line in lines if re.match(LINE_PREFIX + r"server_args=\{'model_path': 'Qwen/Qwen3\.6-27B'", line)]
    assert len(server_args) == 1
    assert "'speculative_algorithm': 'EAGLE'" in server_args[0]
    assert re.match(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] server_args=", server_args[0]), "main-process lines carry no rank tag"
    for rank in (0, 1):
        tag = r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} TP%d\] " % rank
        assert any(re.match(tag + r"Mamba Cache is allocated\. max_mamba_cache_size: \d+, conv_state size: \d+\.\d\dGB, "
                                  r"ssm_state size: \d+\.\d\dGB", line) for line in lines)
        assert any(re.match(tag + r"Capture target verify CUDA graph begin\. backend=full, num_tokens_per_req=4, avail mem=\d+\.\d\d GB$",
                            line) for line in lines)
        assert any(re.match(tag + r"Capture target verify CUDA graph end\. bs=\[1, 2, 4, 8, 12, 16\], elapsed=\d+\.\d\d s, "
                                  r"mem usage=\d+\.\d\d GB, avail mem=\d+\.\d\d GB\.$", line) for line in lines)
        assert any(re.match(tag + r"Capture draft decode CUDA graph end\. ", line) for line in lines)
    assert any(re.match(LINE_PREFIX + r"max_total_num_tokens=\d+, chunked_prefill_size=\d+, max_prefill_tokens=\d+, "
                                      r"max_running_requests=48, context_len=262144, available_gpu_mem=\d+\.\d\d GB$", line) for line in lines)
    ready = [line for line in lines if line.endswith(READY_LINE)]
    assert len(ready) == 1 and re.match(r"^\[[^\]]+\d\] The server", ready[0])
    assert log.index("Uvicorn running on http://127.0.0.1:%d" % sim.port) < log.index(READY_LINE)
    assert not any(" INFO " in line or "WARNING" in line for line in lines if "Decode batch" in line or "server_args" in line)


def test_decode_lines_and_accept_stats(start_sim):
    sim = start_sim(SPEC_ARGS + ["--tp-size", "2", "--decode-log-interval", "5", "--enable-metrics",
                                 "--extra-metric-labels", '{"deployment_id": "abc123", "note": "a \\"quoted\\" one"}'])
    sim.wait_ready()
    status, reply = sim.chat(dict(CARD, messages=QUESTION, max_tokens=400, seed=11))
    assert status == 200
    decode = [DECODE_RE.match(line) for line in sim.log().splitlines() if "Decode batch" in line]
    assert decode and all(decode), "every decode line matches the 0.5.23 hybrid form"
    assert {match.group("tp") for match in decode} == {"0"}, "only TP0 logs decode stats"
    for match in decode:
        length, rate = float(match.group("len")), float(match.group("rate"))
        assert 1.0 <= length <= 4.0
        assert abs(rate - (length - 1) / 3) <= 0.011, "0.5.23 rate = (len - 1) / steps for topk 1"
    lengths = [float(match.group("len")) for match in decode]
    assert 2.5 <= sum(lengths) / len(lengths) <= 3.9
    assert reply["usage"]["completion_tokens"] > 0
    info = json.loads(http("GET", sim.url + "/server_info")[2])
    assert 2.5 <= info["internal_states"][0]["avg_spec_accept_length"] <= 3.9
    assert info["internal_states"][0]["last_gen_throughput"] > 0
    metrics = http("GET", sim.url + "/metrics")[2].decode()
    assert re.search(r'^sglang:spec_accept_length\{[^}]*model_name="Qwen/Qwen3\.6-27B"[^}]*tp_rank="0"[^}]*\} \d+\.\d+', metrics, re.M)
    # The scheduler's gauges carry the extra labels after SGLang's own, escaped as the exposition format wants.
    assert re.search(r'^sglang:spec_accept_length\{[^}]*tp_rank="0",deployment_id="abc123",note="a \\"quoted\\" one"\} ',
                     metrics, re.M), metrics
    for family in ("spec_accept_rate", "gen_throughput", "num_running_reqs", "num_queue_reqs", "token_usage", "mamba_usage"):
        assert re.search(r"^# TYPE sglang:%s gauge$" % family, metrics, re.M), family
    assert re.search(r'^sglang:generation_tokens_total\{model_name="Qwen/Qwen3\.6-27B"\} [1-9]', metrics, re.M)


def test_endpoints_and_api_key(start_sim):
    sim = start_sim(SPEC_ARGS + ["--api-key", "s3cret", "--served-model-name", "qwen3.6-27b"])
    sim.wait_ready()
    auth = {"Authorization": "Bearer s3cret"}
    for path in ("/health", "/health_generate", "/ready"):
        assert http("GET", sim.url + path)[0] == 200, path
    for path in ("/v1/models", "/server_info", "/get_server_info", "/model_info", "/get_model_info"):
        status, _headers, body = http("GET", sim.url + path)
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"}), path
        assert http("GET", sim.url + path, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert http("GET", sim.url + path, headers=auth)[0] == 200, path
    assert sim.chat({"messages": QUESTION})[0] == 401
    models = json.loads(http("GET", sim.url + "/v1/models", headers=auth)[2])
    assert [model["id"] for model in models["data"]] == ["qwen3.6-27b"]
    info = json.loads(http("GET", sim.url + "/server_info", headers=auth)[2])
    assert info["version"] == "0.5.23"
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["api_key"] == "s3cret", "SGLang's /server_info shows the API key in clear text"
    assert "--speculative-algo NEXTN" in info["launch_command"]
    assert "pid" not in info
    model_info = json.loads(http("GET", sim.url + "/model_info", headers=auth)[2])
    assert model_info["model_path"] == "Qwen/Qwen3.6-27B" and model_info["served_model_name"] == "qwen3.6-27b"
    assert http("GET", sim.url + "/metrics")[0] == 404, "no /metrics without --enable-metrics"
    status, reply = sim.chat(dict(CARD, messages=QUESTION, max_tokens=300), api_key="s3cret")
    assert status == 200
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and "<think>" not in (message["content"] or "")
    assert reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    assert sim.chat({"messages": []}, api_key="s3cret")[0] == 400


def test_model_info_returns_the_preferred_sampling_params(start_sim):
    # The flag's type is json.loads: /model_info gets the parsed object (it raised a TypeError on every call before).
    sim = start_sim(SPEC_ARGS + ["--preferred-sampling-params", '{"temperature": 0.6, "top_p": 0.95}'])
    sim.wait_ready()
    status, _headers, body = http("GET", sim.url + "/model_info")
    assert status == 200 and json.loads(body)["preferred_sampling_params"] == {"temperature": 0.6, "top_p": 0.95}


def test_children_titles_and_sigterm(start_sim):
    sim = start_sim(["--tp", "2"] + SPEC_ARGS)
    sim.wait_ready()
    children = sim.children()
    titles = sorted(cmdline for _comm, cmdline in children.values())
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    # The kernel keeps 15 bytes of a process name, as it does for SGLang's own setproctitle titles.
    assert sorted(comm for comm, _cmdline in children.values()) == ["sglang::detoken", "sglang::schedul", "sglang::schedul"]
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=15) == -signal.SIGKILL, "SGLang ends its own shutdown with kill_process_tree(include_parent=True)"
    assert wait_gone(list(children)), "children exit with the launcher"
    log = sim.log()
    assert re.search(r"\] SIGTERM received\. signum=15 frame=.*\. Draining requests and shutting down\.\.\.$", log, re.M)
    assert "Gracefully exiting... Remaining number of requests 0." in log


def test_sigterm_clean_exit_knob_and_parent_death(start_sim):
    sim = start_sim(["--tp", "2"], SGLANG_SIM_SIGTERM_EXIT="clean")
    sim.wait_ready()
    first_children = list(sim.children())
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=15) == 0
    # The next server needs the GPU memory the first one's ranks held until they died.
    assert wait_gone(first_children)
    other = start_sim([])
    other.wait_ready()
    children = list(other.children())
    assert len(children) == 2
    other.proc.kill()
    other.proc.wait(timeout=10)
    assert wait_gone(children), "PR_SET_PDEATHSIG takes the children down with a killed launcher"
    assert not any(pid_alive(pid) for pid in children)


# The access log line of the warm-up request (sglang_sim/launcher.py warm_up), written before the status turns Up.
WARMUP_DONE = '"POST /generate HTTP/1.1" 200'


def test_health_is_503_or_refused_before_ready(start_sim):
    sim = start_sim([], SGLANG_SIM_STARTUP_SECONDS="2")
    started = time.time()
    seen = set()
    while time.time() - started < 10 and READY_LINE not in sim.log():
        try:
            status = http("GET", sim.url + "/health", timeout=2)[0]
        except OSError:
            status = "refused"
        seen.add(status)
        if status == 200:
            # The status turns Up once the warm-up request is done and the ready line follows (launcher.py warm_up):
            # a 200 can come in between, just before that line, but never before the warm-up finished.
            assert WARMUP_DONE in sim.log(), "healthy before the warm-up request finished"
        time.sleep(0.05)
    assert READY_LINE in sim.log()
    assert 503 in seen, "503 while warming up, once the port is open"
    assert http("GET", sim.url + "/health")[0] == 200
    assert 1.5 <= time.time() - started <= 6, "the configured startup time is honoured"


def test_sigterm_during_startup_kills_with_default_action(start_sim):
    sim = start_sim(["--tp", "2"], SGLANG_SIM_STARTUP_SECONDS="4")
    assert sim.wait_for_log("Load weight begin.", timeout=10)
    children = list(sim.children())
    assert len(children) == 3
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=10) == -signal.SIGTERM
    assert wait_gone(children)
    assert READY_LINE not in sim.log()


def test_streaming_chat_and_native_generate(start_sim):
    sim = start_sim(SPEC_ARGS)
    sim.wait_ready()
    status, headers, raw = http("POST", sim.url + "/v1/chat/completions", dict(CARD, messages=QUESTION, max_tokens=200, stream=True))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    streamed = "".join(choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"])
    reasoning = "".join(choice["delta"].get("reasoning_content") or "" for chunk in chunks for choice in chunk["choices"])
    assert streamed and reasoning
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    status, _headers, raw = http("POST", sim.url + "/generate", {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 16}})
    reply = json.loads(raw)
    assert status == 200 and reply["text"] and reply["meta_info"]["completion_tokens"] <= 16
