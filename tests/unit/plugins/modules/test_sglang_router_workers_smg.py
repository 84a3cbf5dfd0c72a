# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router_workers against a fake smg 1.13.0 on loopback, built from smg's captured bodies
(module_utils/data/sglang_router/smg-1.13.0): a removal drains through the gateway (drain time, removal request,
draining with its requests in flight, a second removal once none is), a worker left draining is drained before it is
added again, the router's key goes with an added worker, and smg's 409 for a worker being added is waited out."""

from __future__ import annotations

import copy
import http.server
import json
import pathlib
import threading
import uuid

import pytest

from ansible_collections.llmops.serving.plugins.modules import sglang_router_workers
from ansible_collections.llmops.serving.tests.unit.fakes import within
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

DATA = pathlib.Path(__file__).parents[1] / "module_utils" / "data" / "sglang_router" / "smg-1.13.0"
KEY = "sk-gateway-5f4e3d2c1b0a99887766"
URL_0 = "http://127.0.0.1:31000"
URL_1 = "http://127.0.0.1:31001"


def template(name):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def compact(data):
    return json.dumps(data, separators=(",", ":")).encode()


class FakeSmg:
    """smg's worker table: a removal turns a ready worker draining (listed, unhealthy, its load counting down as the
    test says) and removes it at a second removal or at the end of its drain time (not reached in these tests); an
    addition is pending (not listed, 409 to a second POST) until the next GET /workers, then ready."""

    def __init__(self, urls=(), loads=None):
        self.lock = threading.Lock()
        self.requests = []
        self.workers = []
        self.pending = []
        self.loads = dict(loads or {})  # url -> list of loads the next listings show while it drains
        self.ready_entry = template("workers-two-ready.json")["workers"][0]
        for url in urls:
            self.workers.append(self.entry(url, "ready"))

    def entry(self, url, status):
        entry = copy.deepcopy(self.ready_entry)
        entry.update(id=str(uuid.uuid4()), url=url, status=status, is_healthy=status == "ready", load=0)
        return entry

    def listing(self):
        for worker in self.workers:
            if worker["status"] == "draining" and self.loads.get(worker["url"]):
                worker["load"] = self.loads[worker["url"]].pop(0)
        body = template("workers-two-ready.json")
        body.update(workers=copy.deepcopy(self.workers), total=len(self.workers))
        return body

    def handle(self, handler, method):
        auth = handler.headers.get("Authorization")
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else None
        path = handler.path
        with self.lock:
            self.requests.append((method, path, body))
            if auth != "Bearer " + KEY:
                return 401, compact(template("workers-unauthorized.json"))
            if path == "/workers" and method == "GET":
                answer = compact(self.listing())
                for worker in self.pending:
                    worker.update(status="ready", is_healthy=True)
                    self.workers.append(worker)
                self.pending = []
                return 200, answer
            if path == "/workers" and method == "POST":
                if any(worker["url"] == body["url"] for worker in self.pending):
                    return 409, compact(template("add-duplicate.json"))
                worker = self.entry(body["url"], "pending")
                self.pending.append(worker)
                return 202, compact(dict(template("add-accepted.json"), worker_id=worker["id"], url=body["url"]))
            worker_id = path[len("/workers/"):]
            found = [worker for worker in self.workers if worker["id"] == worker_id]
            if not found:
                return 404, compact(template("worker-by-id-not-found.json"))
            if method == "PATCH":
                found[0]["_drain_settle_secs"] = body["health"]["drain_settle_secs"]
                return 202, compact(dict(template("patch-drain-settle-accepted.json"), worker_id=worker_id))
            if method == "DELETE":
                if found[0]["status"] == "draining":
                    self.workers.remove(found[0])
                    return 202, compact(dict(template("delete-again-accepted.json"), worker_id=worker_id))
                found[0].update(status="draining", is_healthy=False, load=self.loads.get(found[0]["url"], [0])[0])
                return 202, compact(dict(template("delete-accepted.json"), worker_id=worker_id))
            return 405, b""


def handler_for(router):
    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, method):
            status, body = router.handle(self, method)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.answer("GET")

        def do_POST(self):  # noqa: N802
            self.answer("POST")

        def do_PATCH(self):  # noqa: N802
            self.answer("PATCH")

        def do_DELETE(self):  # noqa: N802
            self.answer("DELETE")

        def log_message(self, *args):
            del args

    return Handler


@pytest.fixture
def serve():
    servers = []

    def start(router):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(router))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(base, workers, timeout=5, **options):
    args = dict(url=base, workers=list(workers), poll_interval=0.02, timeout=timeout, api_key=KEY, **options)
    with within(timeout + 10):
        return run_module(sglang_router_workers.main, args)


def calls(router):
    return [(method, path if path == "/workers" else path.split("/")[1]) for method, path, dummy in router.requests
            if method != "GET"]


def test_absent_drains_through_the_gateway_until_no_request_is_in_flight(serve):
    router = FakeSmg(urls=[URL_0, URL_1], loads={URL_1: [2, 2, 1, 0]})
    result, failed = run(serve(router), [URL_1], state="absent", timeout=30)
    assert not failed, result["msg"]
    assert result["removed"] == [URL_1] and result["changed"]
    assert [(item["url"], item["in_flight"]) for item in result["drained"]] == [(URL_1, 2)]
    # A drain time longer than the run (so the gateway never removes it first), a removal, then a second one.
    assert calls(router) == [("PATCH", "workers"), ("DELETE", "workers"), ("DELETE", "workers")]
    patch = [body for method, path, body in router.requests if method == "PATCH"][0]
    assert patch["health"]["drain_settle_secs"] >= 30
    # Between the two removals the gateway was asked until the load was 0.
    assert len([1 for method, path, body in router.requests if method == "GET"]) >= 4
    assert [worker["url"] for worker in result["workers"]] == [URL_0]
    assert KEY not in json.dumps(result)


def test_absent_fails_at_its_timeout_naming_the_requests_still_in_flight(serve):
    router = FakeSmg(urls=[URL_0], loads={URL_0: [3] * 10000})
    result, failed = run(serve(router), [URL_0], state="absent", timeout=1)
    assert failed
    assert "still has requests in flight on the draining workers: http://127.0.0.1:31000 (3 in flight)" in result["msg"]
    # Left draining: no new request reaches it, and the next run drains it again.
    assert [worker["status"] for worker in router.workers] == ["draining"]
    assert calls(router) == [("PATCH", "workers"), ("DELETE", "workers")]


def test_present_drains_a_worker_left_draining_then_adds_it_with_the_key(serve):
    router = FakeSmg(urls=[URL_0])
    router.workers[0].update(status="draining", is_healthy=False, load=1)
    router.loads = {URL_0: [1, 0]}
    result, failed = run(serve(router), [URL_0], state="present", timeout=30)
    assert not failed, result["msg"]
    assert result["added"] == [URL_0] and result["changed"]
    # Already draining: no drain time and no first removal, only the one that ends it; then the addition.
    assert calls(router) == [("DELETE", "workers"), ("POST", "/workers")]
    post = [body for method, path, body in router.requests if method == "POST"][0]
    assert post == {"url": URL_0, "api_key": KEY}
    assert [(worker["url"], worker["status"]) for worker in result["workers"]] == [(URL_0, "ready")]
    assert KEY not in json.dumps(result)


def test_a_worker_being_added_is_waited_for_not_refused(serve):
    router = FakeSmg(urls=[])
    router.pending.append(router.entry(URL_1, "pending"))
    result, failed = run(serve(router), [URL_1], state="present")
    assert not failed, result["msg"]
    assert result["unhealthy"] == [] and result["missing"] == []


def test_captured_bodies_parse_with_status_and_load():
    from ansible_collections.llmops.serving.plugins.module_utils import sglang_router
    listed = sglang_router.parse_workers((DATA / "workers-one-draining.json").read_text())
    assert [(worker["status"], worker["is_healthy"], worker["load"]) for worker in listed] == [
        ("ready", True, 1), ("draining", False, 1)]
    assert sglang_router.drains(listed)
    readiness = sglang_router.parse_readiness((DATA / "readiness-no-workers.json").read_text())
    assert readiness == {"status": "not ready", "healthy_workers": None, "total_workers": None,
                         "reason": "insufficient healthy workers"}
