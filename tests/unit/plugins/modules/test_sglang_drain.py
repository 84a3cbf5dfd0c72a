# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_drain run for real against a fake SGLang /metrics on loopback whose answers are scripted per request.

The bodies are built from the real sample in module_utils/data/sglang_metrics/pr7944-metrics.txt: its
sglang:num_running_reqs line with the count of the step, plus a sglang:num_queue_reqs line.
"""

from __future__ import annotations

import http.server
import pathlib
from urllib.parse import quote
import socket
import threading
import time

import pytest

from ansible_collections.llmops.serving.plugins.modules import sglang_drain
from ansible_collections.llmops.serving.tests.unit.fakes import across_cut, key_windows_shown, random_key, within
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

DATA = pathlib.Path(__file__).parents[1] / "module_utils" / "data" / "sglang_metrics"
REAL = (DATA / "pr7944-metrics.txt").read_text(encoding="utf-8")
RUNNING_LINE = ('sglang:num_running_reqs{engine_type="unified",model_name="/home/moyun.zty/models/deepseek-ai__DeepSeek-R1"} '
                '0.0')
assert RUNNING_LINE in REAL


def body(running, queued=0):
    """The real sample with ``running`` requests running and ``queued`` waiting (in two series of the queue gauge)."""
    text = REAL.replace(RUNNING_LINE, RUNNING_LINE[:-3] + "%.1f" % running)
    return text + ("# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
                   "# TYPE sglang:num_queue_reqs gauge\n"
                   'sglang:num_queue_reqs{engine_type="unified",model_name="m",tp_rank="0"} %.1f\n'
                   'sglang:num_queue_reqs{engine_type="unified",model_name="m",tp_rank="1"} 0.0\n' % queued)


class Script:
    """The answers of /metrics, one per request; the last one repeats. Each is (status, body) or "hang" (no answer
    until the test ends)."""

    def __init__(self):
        self.answers = [(200, body(0))]
        self.requests = []
        self.lock = threading.Lock()
        self.release = threading.Event()

    def next(self, path):
        with self.lock:
            self.requests.append((time.monotonic(), path))
            index = len(self.requests) - 1
            return self.answers[min(index, len(self.answers) - 1)]


class Handler(http.server.BaseHTTPRequestHandler):
    script = None

    def do_GET(self):  # noqa: N802 (http.server's naming)
        answer = self.script.next(self.path)
        if answer == "hang":
            self.script.release.wait(10)
            return
        status, text = answer
        raw = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        del args


@pytest.fixture
def server():
    script = Script()
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    script.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield script
    script.release.set()
    httpd.shutdown()
    httpd.server_close()


def drain(url, check_mode=False, limit=5, **options):
    args = dict(url=url, timeout=3, poll_interval=0.02)
    args.update(options)
    started = time.monotonic()
    with within(limit):
        result, failed = run_module(sglang_drain.main, args, check_mode=check_mode)
    return result, failed, time.monotonic() - started


def test_running_requests_finish_then_it_passes_after_two_idle_reads(server):
    server.answers = [(200, body(2)), (200, body(1)), (200, body(0)), (200, body(0))]
    result, failed, _took = drain(server.url)
    assert not failed, result["msg"]
    assert (result["running"], result["queued"], result["polls"], result["changed"]) == (0, 0, 4, False)
    assert len(server.requests) == 4 and {path for _t, path in server.requests} == {"/metrics"}
    assert 0 < result["waited_seconds"] < 3


def test_a_request_between_two_idle_reads_restarts_the_count(server):
    server.answers = [(200, body(0)), (200, body(0, queued=1)), (200, body(0)), (200, body(0)), (200, body(0)),
                      (200, body(5))]
    result, failed, _took = drain(server.url + "/", settle_polls=3)
    assert not failed, result["msg"]
    assert result["polls"] == 5


def test_settle_polls_one_passes_on_the_first_idle_read(server):
    result, failed, _took = drain(server.url, settle_polls=1, poll_interval=30)
    assert not failed and result["polls"] == 1


def test_check_mode_reads_all_the_same(server):
    server.answers = [(200, body(1)), (200, body(0))]
    result, failed, _took = drain(server.url, check_mode=True)
    assert not failed and result["polls"] == 3 and result["changed"] is False


def test_a_server_that_never_gets_idle_fails_at_the_timeout_naming_the_counts(server):
    server.answers = [(200, body(3, queued=2))]
    result, failed, took = drain(server.url, timeout=1, poll_interval=0.1)
    assert failed
    assert 1.0 <= took < 2.5
    assert "still had 3 running and 2 queued requests after 1." in result["msg"]
    assert server.url in result["msg"]
    assert (result["running"], result["queued"]) == (3, 2)
    assert result["polls"] == len(server.requests) and 2 <= result["polls"] <= 15
    assert 1.0 <= result["waited_seconds"] < 2.5


def test_a_long_queue_with_nothing_running_is_not_idle(server):
    server.answers = [(200, body(0, queued=40))]
    result, failed, _took = drain(server.url, timeout=1, poll_interval=0.1)
    assert failed
    assert "still had 0 running and 40 queued requests" in result["msg"]
    assert (result["running"], result["queued"]) == (0, 40)


def test_404_fails_at_once_saying_to_enable_metrics(server):
    server.answers = [(404, '{"detail":"Not Found"}')]
    result, failed, took = drain(server.url, timeout=30)
    assert failed and took < 2
    assert len(server.requests) == 1
    assert "answered 404" in result["msg"] and "--enable-metrics" in result["msg"]
    assert "sglang_service_enable_metrics" in result["msg"]
    assert (result["running"], result["queued"], result["polls"]) == (None, None, 1)


def test_an_answer_without_the_gauges_fails_at_once(server):
    server.answers = [(200, REAL.replace("sglang:num_running_reqs", "vllm:num_requests_running"))]
    result, failed, took = drain(server.url, timeout=30)
    assert failed and took < 2 and len(server.requests) == 1
    assert "neither sglang:num_running_reqs nor sglang:num_queue_reqs" in result["msg"]
    assert "--enable-metrics" in result["msg"] and server.url + "/metrics" in result["msg"]


def test_a_malformed_gauge_line_fails_at_once_naming_the_line(server):
    text = body(0) + 'sglang:num_running_reqs{a="b"\n'
    server.answers = [(200, text)]
    result, failed, _took = drain(server.url, timeout=30)
    assert failed and len(server.requests) == 1
    assert "line %d, a sample of sglang:num_running_reqs" % text.count("\n") in result["msg"]


def test_401_is_not_waited_for(server):
    server.answers = [(401, "")]
    result, failed, took = drain(server.url, timeout=30)
    assert failed and took < 2 and "answered 401" in result["msg"]


def test_500_then_idle_passes(server):
    server.answers = [(500, "Internal Server Error"), (503, "busy"), (200, body(0)), (200, body(0))]
    result, failed, _took = drain(server.url)
    assert not failed, result["msg"]
    assert result["polls"] == 4


def test_an_error_between_idle_reads_breaks_the_series(server):
    server.answers = [(200, body(0)), (500, "oops"), (200, body(0)), (200, body(0))]
    result, failed, _took = drain(server.url)
    assert not failed and result["polls"] == 4


def test_5xx_until_the_timeout_fails_naming_the_url_and_the_last_error(server):
    server.answers = [(200, body(4)), (502, "Bad Gateway")]
    result, failed, took = drain(server.url, timeout=1, poll_interval=0.1)
    assert failed and 1.0 <= took < 2.5
    assert "did not answer with its metrics within 1 s" in result["msg"]
    assert "GET %s/metrics answered 502: Bad Gateway" % server.url in result["msg"]
    assert "last successful read showed 4 running and 0 queued" in result["msg"]


def test_nothing_listening_is_retried_until_the_timeout():
    # A port that was just free: nothing listens there.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = "http://127.0.0.1:%d" % probe.getsockname()[1]
    result, failed, took = drain(free, timeout=1, poll_interval=0.1)
    assert failed and 1.0 <= took < 2.5
    assert free in result["msg"] and "Connection refused" in result["msg"]
    assert result["polls"] >= 3 and result["running"] is None


def test_a_server_that_does_not_answer_is_bounded_by_the_per_request_timeout(server):
    # Every request hangs: each waits at least 1 s (the least a request gets), the run ends about 1 s after the timeout.
    server.answers = ["hang"]
    result, failed, took = drain(server.url, timeout=1, poll_interval=0.1, limit=6)
    assert failed and 1.0 <= took < 3.5
    assert "did not answer with its metrics within 1 s" in result["msg"]
    assert "timed out" in result["msg"]


def test_timeout_zero_reads_once(server):
    server.answers = [(200, body(1))]
    result, failed, _took = drain(server.url, timeout=0)
    assert failed and result["polls"] == 1 and "still had 1 running" in result["msg"]


@pytest.mark.parametrize("options, message", [
    ({"poll_interval": 0}, "poll_interval > 0"),
    ({"settle_polls": 0}, "settle_polls >= 1"),
    ({"timeout": -1}, "timeout must be >= 0"),
    ({"url": "127.0.0.1:30000"}, "url must start with http:// or https://"),
])
def test_bad_options_fail_before_any_request(server, options, message):
    args = dict(url=server.url)
    args.update(options)
    result, failed = run_module(sglang_drain.main, args)
    assert failed and message in result["msg"] and not server.requests


# --------------------------------------------------------------------------- secrets in what the server says

# The drain sends no key; what it quotes of an answer still passes the redaction, masked before it is cut.
PEER_KEY = random_key(6)


def test_an_echoed_authorization_header_is_masked(server):
    server.answers = [(401, "refused Authorization: Bearer %s" % PEER_KEY)]
    result, failed, _took = drain(server.url, timeout=30)
    assert failed and "answered 401" in result["msg"] and "Bearer ********" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


@pytest.mark.parametrize("before_cut", [None, 7, 13, 40])
def test_a_password_in_a_quoted_url_is_masked_before_the_body_is_cut(server, before_cut):
    # Cut first, the password would lose the "@" after it and no longer look like one.
    password = quote(PEER_KEY, safe="")
    text = across_cut(password, sglang_drain.MAX_BODY_QUOTE_CHARS, before_cut, prefix="try https://admin:",
                      suffix="@proxy.example/metrics")
    server.answers = [(403, text)]
    result, failed, _took = drain(server.url, timeout=30)
    assert failed and "answered 403" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


def test_a_secret_in_a_malformed_gauge_line_is_masked(server):
    server.answers = [(200, body(0) + "sglang:num_running_reqs 0.0 1 api_key=%s\n" % PEER_KEY)]
    result, failed, _took = drain(server.url, timeout=30)
    assert failed and "unexpected text after the value" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]
