# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router_workers against a fake smg 1.13.0 on loopback, built from smg's captured bodies
(module_utils/data/sglang_router/smg-1.13.0): a removal goes through the gateway's draining state (one removal
request, draining with its requests in flight, removed by the gateway at the end of its drain time), never a second
request (whose stale timer would remove the server added again), a worker left draining is waited for before it is
added again, the router's key goes with an added worker, and smg's 409 for a worker being added is waited out."""

from __future__ import annotations

import copy
import json
import pathlib
import threading
import time
import uuid

from ansible_collections.llmops.serving.plugins.modules import sglang_router_workers
# The loopback server of the sglang-router 0.3.2 tests serves any fake with a handle(handler, method).
from ansible_collections.llmops.serving.tests.unit.plugins.modules.test_sglang_router_workers import serve  # noqa: F401 pylint: disable=unused-import
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
    """smg's worker table: a removal request turns a ready worker draining (listed, unhealthy, its load following the
    test's list) until its drain time (``drain_seconds``, or what a PATCH set) is over; then the timer removes every
    registration of that URL, as smg 1.13.0 does (a second request removes a draining worker at once, the timer still
    runs). An addition is pending (not listed, 409 to a second POST) until the next GET /workers, then ready."""

    def __init__(self, urls=(), loads=None, drain_seconds=0.3):
        self.lock = threading.Lock()
        self.requests = []
        self.workers = []
        self.pending = []
        self.timers = []  # (deadline, url)
        self.drain_seconds = drain_seconds
        self.loads = dict(loads or {})  # url -> loads the next listings show while it drains
        self.ready_entry = template("workers-two-ready.json")["workers"][0]
        for url in urls:
            self.workers.append(self.entry(url, "ready"))

    def entry(self, url, status):
        entry = copy.deepcopy(self.ready_entry)
        entry.update(id=str(uuid.uuid4()), url=url, status=status, is_healthy=status == "ready", load=0)
        return entry

    def drain(self, worker, seconds=None):
        worker.update(status="draining", is_healthy=False)
        self.timers.append((time.monotonic() + (self.drain_seconds if seconds is None else seconds), worker["url"]))

    def listing(self):
        now = time.monotonic()
        for deadline, url in [timer for timer in self.timers if timer[0] <= now]:
            self.timers.remove((deadline, url))
            self.workers = [worker for worker in self.workers if worker["url"] != url]
        for worker in self.workers:
            if worker["status"] == "draining" and self.loads.get(worker["url"]):
                worker["load"] = self.loads[worker["url"]].pop(0)
        body = template("workers-two-ready.json")
        body.update(workers=[dict((key, value) for key, value in worker.items() if not key.startswith("_"))
                             for worker in self.workers], total=len(self.workers))
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
                found[0]["_drain_seconds"] = body["health"]["drain_settle_secs"]
                return 202, compact(dict(template("patch-drain-settle-accepted.json"), worker_id=worker_id))
            if method == "DELETE":
                if found[0]["status"] == "draining":
                    self.workers.remove(found[0])
                    return 202, compact(dict(template("delete-again-accepted.json"), worker_id=worker_id))
                self.drain(found[0], found[0].get("_drain_seconds"))
                return 202, compact(dict(template("delete-accepted.json"), worker_id=worker_id))
            return 405, b""


def run(base, workers, timeout=5, check_mode=False, **options):
    args = dict(url=base, workers=list(workers), poll_interval=0.02, timeout=timeout, api_key=KEY, **options)
    with within(timeout + 10):
        return run_module(sglang_router_workers.main, args, check_mode=check_mode)


def calls(router):
    return [(method, path if path == "/workers" else path.split("/")[1]) for method, path, dummy in router.requests
            if method != "GET"]


def test_absent_drains_through_the_gateway_with_one_removal_request(serve):
    router = FakeSmg(urls=[URL_0, URL_1], loads={URL_1: [2, 2, 1, 0]}, drain_seconds=0.5)
    result, failed = run(serve(router), [URL_1], state="absent", timeout=30)
    assert not failed, result["msg"]
    assert result["removed"] == [URL_1] and result["changed"]
    [drained] = result["drained"]
    assert (drained["url"], drained["in_flight"]) == (URL_1, 2) and drained["seconds"] >= 0.5
    # One removal request, no drain time of the module's own: smg's timer removes it.
    assert calls(router) == [("DELETE", "workers")]
    assert [worker["url"] for worker in result["workers"]] == [URL_0]
    assert KEY not in json.dumps(result)


def test_a_drain_time_is_set_before_the_removal_and_a_readded_worker_survives(serve):
    router = FakeSmg(urls=[URL_0], drain_seconds=30)
    base = serve(router)
    result, failed = run(base, [URL_0], state="absent", timeout=10, drain_seconds=1)
    assert not failed, result["msg"]
    assert calls(router) == [("PATCH", "workers"), ("DELETE", "workers")]
    assert [body for method, path, body in router.requests if method == "PATCH"] == [{"health": {"drain_settle_secs": 1}}]
    # No timer of the removal is left to take away the server added again (a second DELETE would leave the first's).
    assert router.timers == []
    result, failed = run(base, [URL_0], state="present")
    assert not failed, result["msg"]
    result, failed = run(base, [URL_0])
    assert not failed, result["msg"]


def test_absent_fails_at_its_timeout_naming_the_requests_still_in_flight(serve):
    router = FakeSmg(urls=[URL_0], loads={URL_0: [3] * 10000}, drain_seconds=100)
    result, failed = run(serve(router), [URL_0], state="absent", timeout=1)
    assert failed
    assert "has not removed the draining workers yet (their drain time runs on): http://127.0.0.1:31000 (3 in flight)" in result["msg"]
    # Left draining: no new request reaches it, and the next run waits for its removal.
    assert [worker["status"] for worker in router.workers] == ["draining"]
    assert calls(router) == [("DELETE", "workers")]


def test_a_worker_left_draining_is_waited_for_and_is_no_change_of_this_run_in_check_mode_either(serve):
    # A run killed while its server drained left it draining: the next absent run requests nothing (a second request
    # would leave the first's timer), waits until the gateway removes it, and says the same in check mode.
    router = FakeSmg(urls=[URL_0, URL_1])
    router.drain(router.workers[1], 0.5)
    base = serve(router)
    checked, failed = run(base, [URL_1], state="absent", check_mode=True)
    assert not failed, checked["msg"]
    assert (checked["removed"], checked["changed"]) == ([], False)
    result, failed = run(base, [URL_1], state="absent", timeout=30)
    assert not failed, result["msg"]
    assert (result["removed"], result["changed"]) == ([], False)
    assert [entry["url"] for entry in result["drained"]] == [URL_1]
    assert calls(router) == []
    assert [worker["url"] for worker in result["workers"]] == [URL_0]


def test_a_drain_time_not_shorter_than_the_timeout_is_refused(serve):
    router = FakeSmg(urls=[URL_0])
    result, failed = run(serve(router), [URL_0], state="absent", timeout=5, drain_seconds=5)
    assert failed and "drain_seconds must be at least 0 and less than timeout (5)" in result["msg"]
    assert router.requests == []


def test_present_waits_for_a_worker_left_draining_then_adds_it_with_the_key(serve):
    router = FakeSmg(urls=[URL_0])
    router.drain(router.workers[0], 0.5)
    router.loads = {URL_0: [1, 0]}
    result, failed = run(serve(router), [URL_0], state="present", timeout=30)
    assert not failed, result["msg"]
    assert result["added"] == [URL_0] and result["changed"]
    # No removal request of its own (its timer runs); the addition once it is gone, with the router's key.
    assert calls(router) == [("POST", "/workers")]
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
