# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""http_exchange against a real HTTP server on loopback: every status is an answer with its body; a redirect is not
followed; the key goes only into the Authorization header; refused, cut-short and oversized answers are errors."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import http_exchange


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
