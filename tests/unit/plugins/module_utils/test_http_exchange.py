# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""http_exchange against a real HTTP server on loopback: every status is an answer with its body; a redirect is not
followed; the key goes only into the Authorization header; refused, cut-short and oversized answers are errors; a
peer that trickles its answer, never ends it or never answers cannot keep a call much past its timeout."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.tests.unit.fakes import echoed_forms, key_windows_shown, random_key


class Handler(BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):  # pylint: disable=arguments-differ
        del args

    def answer(self, status, body, headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # pylint: disable=invalid-name
        Handler.seen.append((self.command, self.path, dict(self.headers), b""))
        if self.path == "/ok":
            self.answer(200, '{"ok": true}')
        elif self.path == "/missing":
            self.answer(404, "no such page")
        elif self.path == "/moved":
            self.answer(302, "moved", headers=[("Location", "/ok")])
        elif self.path == "/huge":
            self.answer(200, b"x" * 4096)
        elif self.path in ("/cut", "/cut-404"):
            self.send_response(200 if self.path == "/cut" else 404)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"only this much")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_POST(self):  # pylint: disable=invalid-name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Handler.seen.append((self.command, self.path, dict(self.headers), body))
        self.answer(200, body)


@pytest.fixture
def server():
    Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def test_every_status_is_an_answer_with_its_body_and_a_redirect_is_not_followed(server):
    assert http_exchange.exchange(server + "/ok") == (200, '{"ok": true}')
    assert http_exchange.exchange(server + "/missing") == (404, "no such page")
    assert http_exchange.exchange(server + "/moved") == (302, "moved")
    assert [path for _method, path, _headers, _body in Handler.seen] == ["/ok", "/missing", "/moved"]


def test_a_json_body_and_the_key_go_only_where_they_belong(server):
    status, text = http_exchange.exchange(server + "/echo", method="POST", body={"url": "http://w:1"}, api_key="sk-1")
    assert status == 200 and json.loads(text) == {"url": "http://w:1"}
    method, _path, headers, _body = Handler.seen[-1]
    assert method == "POST" and headers["Authorization"] == "Bearer sk-1"
    assert headers["Content-Type"] == "application/json"
    http_exchange.exchange(server + "/ok")
    assert "Authorization" not in Handler.seen[-1][2]


def test_refused_cut_short_and_oversized_answers_are_errors(server):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        refused = "http://127.0.0.1:%d/ok" % free.getsockname()[1]
    with pytest.raises(http_exchange.ExchangeError):
        http_exchange.exchange(refused, timeout=5)
    with pytest.raises(http_exchange.ExchangeError):
        http_exchange.exchange(server + "/cut", timeout=5)
    with pytest.raises(http_exchange.ExchangeError, match="larger than 1024 bytes"):
        http_exchange.exchange(server + "/huge", max_body_bytes=1024)
    assert http_exchange.exchange(server + "/huge", max_body_bytes=4096)[0] == 200


def test_an_error_status_cut_short_is_an_error_too(server):
    # The length check reads through the HTTPError to its response.
    with pytest.raises(http_exchange.ExchangeError, match="short of its Content-Length"):
        http_exchange.exchange(server + "/cut-404", timeout=5)


# A hostile peer: raw sockets on loopback. It accepts one connection, reads the request, then sends ``first`` at once
# and then one byte of ``trickle`` (cycled) every 0.2 s - at most TRICKLE_STEPS bytes, so that even a call that is
# never interrupted (the old code) ends and the thread with it. Pacing only: no test relies on the sleeps' lengths.
TRICKLE_STEPS = 50
TIMEOUT = 1.0
SLACK = 1.5  # a loaded machine; the deadline itself is about a second past TIMEOUT at worst


class Peer:
    def __init__(self, first=b"", trickle=b""):
        self.first, self.trickle = first, trickle
        self.stop = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.listener.settimeout(10)
        self.url = "http://127.0.0.1:%d/slow" % self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            conn, _address = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                request = b""
                while b"\r\n\r\n" not in request and len(request) < 65536:
                    data = conn.recv(4096)
                    if not data:
                        return
                    request += data
                conn.sendall(self.first)
                for step in range(TRICKLE_STEPS if self.trickle else 0):
                    if self.stop.wait(0.2):
                        return
                    conn.sendall(self.trickle[step % len(self.trickle):][:1])
                self.stop.wait(TRICKLE_STEPS * 0.2)  # accepted and silent (bounded)
            except OSError:  # the client gave up and closed: done
                return

    def close(self):
        self.stop.set()
        self.listener.close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def peers():
    started = []

    def start(first=b"", trickle=b""):
        started.append(Peer(first, trickle))
        return started[-1].url

    yield start
    for peer in started:
        peer.close()


HEADERS_THEN_SLOW_BODY = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n", b"x")
HOSTILE = {
    "status line and headers a byte at a time": (b"", b"HTTP/1.1 200 OK\r\nX-Slow: yes\r\n"),
    "headers at once, then the body a byte at a time": HEADERS_THEN_SLOW_BODY,
    "a chunked body that never ends": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\nx\r\n"),
    "an error status whose body trickles": (b"HTTP/1.1 503 Busy\r\nContent-Length: 1000000\r\n\r\n", b"x"),
    "accepted and never answered": (b"", b""),
}


def timed_failure(url, timeout=TIMEOUT):
    started = time.monotonic()
    with pytest.raises(http_exchange.ExchangeError) as caught:
        http_exchange.request(url, timeout=timeout)
    return time.monotonic() - started, caught.value.reason


@pytest.mark.parametrize("first, trickle", list(HOSTILE.values()), ids=list(HOSTILE))
def test_no_peer_keeps_a_call_much_past_its_timeout(peers, first, trickle):
    elapsed, reason = timed_failure(peers(first, trickle))
    assert elapsed < TIMEOUT + SLACK, (elapsed, reason)
    if trickle:
        assert reason.startswith("timed out: no whole answer within 1.0 s ("), reason


def test_the_reason_says_how_far_the_answer_got(peers):
    _elapsed, reason = timed_failure(peers(*HOSTILE["status line and headers a byte at a time"]))
    assert reason == "timed out: no whole answer within 1.0 s (no status line and headers yet)"
    _elapsed, reason = timed_failure(peers(*HEADERS_THEN_SLOW_BODY))
    assert reason.startswith("timed out: no whole answer within 1.0 s (the peer was still sending, ")
    assert "bytes of the body so far)" in reason


def test_the_previous_sigalrm_handler_is_back_and_no_timer_is_left_armed(server, peers):
    def mine(signum, frame):
        del signum, frame

    before = signal.signal(signal.SIGALRM, mine)
    try:
        assert http_exchange.exchange(server + "/ok", timeout=5) == (200, '{"ok": true}')
        assert signal.getsignal(signal.SIGALRM) is mine and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        elapsed, _reason = timed_failure(peers(*HEADERS_THEN_SLOW_BODY))
        assert elapsed < TIMEOUT + SLACK
        assert signal.getsignal(signal.SIGALRM) is mine and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, before)


def test_a_timer_armed_by_someone_else_is_left_alone_and_the_body_is_still_bounded(server, peers):
    fired = []
    before = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 600)
    try:
        assert http_exchange.exchange(server + "/ok", timeout=5) == (200, '{"ok": true}')
        elapsed, _reason = timed_failure(peers(*HEADERS_THEN_SLOW_BODY))
        assert elapsed < TIMEOUT + SLACK
        chunked = HOSTILE["a chunked body that never ends"]
        elapsed, _reason = timed_failure(peers(*chunked))
        assert elapsed < TIMEOUT + SLACK
        # Without the timer, the watchdog bounds a trickled status line too.
        elapsed, reason = timed_failure(peers(*HOSTILE["status line and headers a byte at a time"]))
        assert elapsed < TIMEOUT + SLACK and reason.endswith("(no status line and headers yet)")
        left, interval = signal.getitimer(signal.ITIMER_REAL)
        assert 500 < left <= 600 and interval == 0 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_outside_the_main_thread_no_peer_keeps_a_call_much_past_its_timeout(server, peers):
    results = []

    def call(url):
        try:
            results.append(timed_failure(url))
        except BaseException as exc:  # pylint: disable=broad-except  # reported by the assertion below
            results.append(exc)

    # The canary soak's workers: no SIGALRM there, the watchdog shuts the socket down - a status line and headers that
    # trickle (which no per-read timeout bounds) included.
    for url in [peers(*HOSTILE[name]) for name in HOSTILE]:
        worker = threading.Thread(target=call, args=(url,), daemon=True)
        worker.start()
        worker.join(timeout=TIMEOUT + TRICKLE_STEPS * 0.2 + 5)
        assert not worker.is_alive()
    assert len(results) == len(HOSTILE) and all(
        isinstance(result, tuple) and result[0] < TIMEOUT + SLACK for result in results), results
    assert results[0][1] == "timed out: no whole answer within 1.0 s (no status line and headers yet)"
    status, _text = http_exchange.exchange(server + "/ok", timeout=5)
    assert status == 200


# A status line that is not one is quoted by http.client in its exception: the reason masks the key in it.
PEER_KEY = random_key(7)


@pytest.mark.parametrize("form", sorted(echoed_forms(PEER_KEY)))
def test_a_bad_status_line_that_echoes_the_key_is_quoted_without_it(peers, form):
    url = peers(("HTTP/1.1 4o1 refused %s\r\n\r\n" % echoed_forms(PEER_KEY)[form]).encode())
    with pytest.raises(http_exchange.ExchangeError) as caught:
        http_exchange.request(url, api_key=PEER_KEY, timeout=TIMEOUT)
    assert "4o1 refused" in caught.value.reason
    assert not key_windows_shown(PEER_KEY, caught.value.reason), caught.value.reason


def test_a_long_bad_status_line_is_quoted_shortened(peers):
    url = peers(b"HTTP/1.1 4o1 " + b"x" * 60000 + b"\r\n\r\n")
    with pytest.raises(http_exchange.ExchangeError) as caught:
        http_exchange.request(url, timeout=TIMEOUT)
    assert caught.value.reason.startswith("HTTP/1.1 4o1 xxx")
    assert len(caught.value.reason) == http_exchange.MAX_REASON_CHARS
