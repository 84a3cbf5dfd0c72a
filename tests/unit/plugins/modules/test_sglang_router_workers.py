# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router_workers run for real against a fake router on loopback that answers like sglang-router 0.3.2.

The fake's bodies are built from the captured answers in module_utils/data/sglang_router; like the real router it
applies an addition or a removal in the background, here only after the next GET /workers has answered without it.
"""

from __future__ import annotations

import copy
import http.server
import json
import os
import pathlib
import threading
import time
import uuid
from unittest import mock

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.modules import sglang_router_workers
from ansible_collections.llmops.serving.tests.unit.fakes import across_cut, echoed_forms, key_windows_shown, random_key
from ansible_collections.llmops.serving.tests.unit.fakes import within
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

DATA = pathlib.Path(__file__).parents[1] / "module_utils" / "data" / "sglang_router"
KEY = "sk-router-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
URL_0 = "http://127.0.0.1:31000"
URL_1 = "http://127.0.0.1:31001"
URL_2 = "http://127.0.0.1:31002"


def template(name):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def compact(data):
    return json.dumps(data, separators=(",", ":")).encode()


class FakeRouter:
    """A worker table behind GET/POST/DELETE /workers and GET /readiness, with the real router's bodies and its
    background application of changes (after the next GET /workers). ``never_healthy`` URLs stay unhealthy; any other
    added worker is listed unhealthy once, then healthy."""

    def __init__(self, key=KEY, urls=(), never_healthy=()):
        self.key = key
        self.never_healthy = set(never_healthy)
        self.lock = threading.Lock()
        self.requests = []
        self.workers = []
        self.pending = []
        listed = template("workers-two-healthy.json")
        self.entry_with_metadata, self.entry_plain = listed["workers"]
        self.stats = listed["stats"]
        for url in urls:
            self.workers.append(self.entry(url, healthy=url not in self.never_healthy))

    def entry(self, url, healthy=True):
        entry = copy.deepcopy(self.entry_plain)
        entry.update(id=str(uuid.uuid4()), url=url, is_healthy=healthy)
        return entry

    def set_healthy(self, url, healthy):
        with self.lock:
            for worker in self.workers:
                if worker["url"] == url:
                    worker["is_healthy"] = healthy

    @property
    def changes(self):
        return [(method, path) for method, path, dummy_auth in self.requests if method in ("POST", "DELETE")]

    def advance(self):
        """Background work: newly listed workers pass their health check, then queued changes apply."""
        for worker in self.workers:
            if not worker["is_healthy"] and worker.get("_new") and worker["url"] not in self.never_healthy:
                worker["is_healthy"] = True
                del worker["_new"]
        for change in self.pending:
            change()
        self.pending = []

    def listing(self):
        workers = [dict((key, value) for key, value in worker.items() if not key.startswith("_")) for worker in self.workers]
        stats = dict(self.stats, regular_count=len(workers))
        return {"workers": workers, "total": len(workers), "stats": stats}

    def handle(self, handler, method):
        auth = handler.headers.get("Authorization")
        path = handler.path
        with self.lock:
            self.requests.append((method, path, auth))
            if path == "/readiness" and method == "GET":
                healthy = sum(1 for worker in self.workers if worker["is_healthy"])
                if healthy:
                    return 200, compact(dict(template("readiness-ready.json"), healthy_workers=healthy,
                                             total_workers=len(self.workers)))
                return 503, compact(template("readiness-none-healthy.json"))
            if self.key and auth != "Bearer " + self.key:
                return 401, b""
            if path == "/workers" and method == "GET":
                body = compact(self.listing())
                self.advance()
                return 200, body
            if path == "/workers" and method == "POST":
                length = int(handler.headers.get("Content-Length") or 0)
                url = json.loads(handler.rfile.read(length))["url"]
                entry = self.entry(url, healthy=False)
                entry["_new"] = True
                self.pending.append(lambda: self.workers.append(entry))
                return 202, compact(dict(template("add-accepted.json"), worker_id=entry["id"], url=url,
                                         location="/workers/" + entry["id"]))
            if path.startswith("/workers/") and method == "DELETE":
                worker_id = path[len("/workers/"):]
                found = [worker for worker in self.workers if worker["id"] == worker_id]
                if not found:
                    body = template("delete-not-found.json")
                    return 404, compact(dict(body, error="Worker %s not found" % worker_id))
                self.pending.append(lambda: self.workers.remove(found[0]) if found[0] in self.workers else None)
                return 202, compact(dict(template("delete-accepted.json"), worker_id=worker_id))
            return 404, b""


def handler_for(router):
    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, method):
            status, body = router.handle(self, method)
            self.send_response(status)
            if body:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.answer("GET")

        def do_POST(self):  # noqa: N802
            self.answer("POST")

        def do_PATCH(self):  # noqa: N802 (smg's, test_sglang_router_workers_smg.py)
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


def run(base, workers, check_mode=False, **options):
    args = dict(url=base, workers=list(workers), poll_interval=0.02, timeout=5)
    if "api_key_file" not in options:
        args["api_key"] = KEY
    args.update((key, value) for key, value in options.items() if value is not None)
    with within(10):
        return run_module(sglang_router_workers.main, args, check_mode=check_mode)


def assert_no_key(result):
    assert KEY not in json.dumps(result)


# --------------------------------------------------------------------------- verified

def test_verified_passes_on_the_expected_healthy_workers(serve):
    router = FakeRouter(urls=[URL_0, URL_1])
    result, failed = run(serve(router), [URL_1, URL_0 + "/"])
    assert not failed, result["msg"]
    assert result["changed"] is False
    assert [worker["url"] for worker in result["workers"]] == [URL_0, URL_1]
    assert result["missing"] == result["unexpected"] == result["unhealthy"] == result["duplicates"] == []
    assert result["added"] == result["removed"] == []
    assert router.requests == [("GET", "/workers", "Bearer " + KEY)]
    assert_no_key(result)


def test_verified_fails_naming_missing_unexpected_and_unhealthy(serve):
    router = FakeRouter(urls=[URL_0, URL_1, URL_2])
    router.set_healthy(URL_1, False)
    result, failed = run(serve(router), [URL_0, URL_1, "http://127.0.0.1:31005"])
    assert failed
    lines = result["msg"].splitlines()[1:]
    assert [line.strip() for line in lines] == [
        "http://127.0.0.1:31001: unhealthy",
        "http://127.0.0.1:31002: registered but not in workers",
        "http://127.0.0.1:31005: not registered",
    ]
    assert result["missing"] == ["http://127.0.0.1:31005"]
    assert result["unexpected"] == [URL_2]
    assert result["unhealthy"] == [URL_1]
    assert router.changes == []
    assert_no_key(result)


def test_verified_fails_on_a_url_registered_twice(serve):
    router = FakeRouter(urls=[URL_0, URL_0])
    result, failed = run(serve(router), [URL_0])
    assert failed
    assert "http://127.0.0.1:31000: registered 2 times" in result["msg"]
    assert result["duplicates"] == [URL_0]


# --------------------------------------------------------------------------- present

def test_present_adds_only_the_missing_worker_and_waits_until_it_is_healthy(serve):
    router = FakeRouter(urls=[URL_0, URL_2])
    result, failed = run(serve(router), [URL_0, URL_1], state="present")
    assert not failed, result["msg"]
    assert result["changed"] is True
    assert result["added"] == [URL_1]
    assert router.changes == [("POST", "/workers")]
    listed = dict((worker["url"], worker["is_healthy"]) for worker in result["workers"])
    assert listed == {URL_0: True, URL_1: True, URL_2: True}  # URL_2 is not named: left alone
    assert result["unexpected"] == [URL_2]
    # GET, POST, then polls: not listed yet, listed but unhealthy, healthy.
    assert [method for method, dummy_path, dummy_auth in router.requests] == ["GET", "POST", "GET", "GET", "GET"]

    again, failed = run(serve(router), [URL_0, URL_1], state="present")
    assert not failed and again["changed"] is False and again["added"] == []
    assert router.changes == [("POST", "/workers")]


def test_present_normalizes_what_it_registers(serve):
    router = FakeRouter()
    result, failed = run(serve(router), ["HTTP://127.0.0.1:31001/"], state="present")
    assert not failed, result["msg"]
    assert [worker["url"] for worker in router.workers] == [URL_1]


def test_present_times_out_naming_the_worker_that_never_became_healthy(serve):
    router = FakeRouter(urls=[URL_0], never_healthy=[URL_1])
    started = time.monotonic()
    result, failed = run(serve(router), [URL_0, URL_1], state="present", timeout=1)
    elapsed = time.monotonic() - started
    assert failed
    assert 1.0 <= elapsed < 2.5
    assert result["msg"] == ("after 1 s, not every worker is registered and healthy: "
                             "http://127.0.0.1:31001 (listed, unhealthy)")
    assert result["added"] == [URL_1]
    assert result["unhealthy"] == [URL_1]
    assert_no_key(result)


def test_present_times_out_when_the_router_never_lists_the_worker(serve):
    router = FakeRouter(urls=[URL_0])
    router.advance = lambda: None  # the background job never runs
    result, failed = run(serve(router), [URL_1], state="present", timeout=0)
    assert failed
    assert result["msg"].endswith("http://127.0.0.1:31001 (not listed)")


# --------------------------------------------------------------------------- absent

def test_absent_removes_every_registration_and_is_idempotent(serve):
    router = FakeRouter(urls=[URL_0, URL_1, URL_1])
    ids = [worker["id"] for worker in router.workers[1:]]
    base = serve(router)
    result, failed = run(base, [URL_1], state="absent")
    assert not failed, result["msg"]
    assert result["changed"] is True
    assert result["removed"] == [URL_1]
    assert router.changes == [("DELETE", "/workers/" + worker_id) for worker_id in ids]
    assert [worker["url"] for worker in result["workers"]] == [URL_0]
    assert [worker["url"] for worker in router.workers] == [URL_0]
    assert result["missing"] == [URL_1]

    again, failed = run(base, [URL_1], state="absent")
    assert not failed and again["changed"] is False and again["removed"] == []
    assert len(router.changes) == 2


def test_absent_counts_a_worker_removed_meanwhile_as_nothing_removed(serve):
    router = FakeRouter(urls=[URL_1])
    original = router.handle

    def vanish_first(handler, method):
        if method == "DELETE":
            router.workers = []  # someone else removed it between our GET and our DELETE
        return original(handler, method)

    router.handle = vanish_first
    result, failed = run(serve(router), [URL_1], state="absent")
    assert not failed, result["msg"]
    assert result["changed"] is False and result["removed"] == []


# --------------------------------------------------------------------------- check mode

def test_check_mode_sends_no_post_or_delete(serve):
    router = FakeRouter(urls=[URL_0, URL_2])
    base = serve(router)
    present, failed = run(base, [URL_0, URL_1], check_mode=True, state="present")
    assert not failed, present["msg"]
    assert present["changed"] is True and present["added"] == [URL_1]
    absent, failed = run(base, [URL_2, URL_1], check_mode=True, state="absent")
    assert not failed, absent["msg"]
    assert absent["changed"] is True and absent["removed"] == [URL_2]
    assert router.changes == []
    assert [method for method, dummy_path, dummy_auth in router.requests] == ["GET", "GET"]
    assert [worker["url"] for worker in router.workers] == [URL_0, URL_2]


# --------------------------------------------------------------------------- the key

def test_a_wrong_key_fails_without_showing_it(serve):
    router = FakeRouter(urls=[URL_0])
    wrong = "sk-wrong-ffeeddccbbaa99887766"
    result, failed = run(serve(router), [URL_0], api_key=wrong)
    assert failed
    assert "401" in result["msg"] and "the API key is wrong" in result["msg"]
    assert wrong not in json.dumps(result)
    assert_no_key(result)


def test_no_key_says_that_it_is_missing(serve):
    router = FakeRouter(urls=[URL_0])
    args = dict(url=serve(router), workers=[URL_0], poll_interval=0.02, timeout=5)
    result, failed = run_module(sglang_router_workers.main, args)
    assert failed and "the API key is missing" in result["msg"]
    assert router.requests == [("GET", "/workers", None)]


def test_a_router_without_a_key_gets_no_authorization_header(serve):
    router = FakeRouter(key=None, urls=[URL_0])
    args = dict(url=serve(router), workers=[URL_0], poll_interval=0.02, timeout=5)
    result, failed = run_module(sglang_router_workers.main, args)
    assert not failed, result["msg"]
    assert router.requests == [("GET", "/workers", None)]


def test_the_key_file_works_and_the_key_appears_nowhere(serve, tmp_path):
    path = tmp_path / "router.json"
    descriptor = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"api-key": KEY, "policy": "round_robin"}, handle)
    router = FakeRouter(urls=[URL_0])
    base = serve(router)
    result, failed = run(base, [URL_0, URL_1], state="present", api_key_file=str(path))
    assert not failed, result["msg"]
    assert result["added"] == [URL_1]
    assert all(auth == "Bearer " + KEY for dummy_method, dummy_path, auth in router.requests)
    assert_no_key(result)
    failed_result, failed = run(base, [URL_0], api_key_file=str(path))  # verified: URL_1 is unexpected now
    assert failed
    assert "http://127.0.0.1:31001: registered but not in workers" in failed_result["msg"]
    assert_no_key(failed_result)


@pytest.mark.parametrize("content, message", [
    ("not json", "api_key_file is not JSON"),
    ('{"api_key": "x"}', 'no string "api-key"'),
    ('["sk-x"]', 'no string "api-key"'),
])
def test_a_broken_key_file_fails_without_quoting_it(serve, tmp_path, content, message):
    path = tmp_path / "router.json"
    path.write_text(content)
    path.chmod(0o600)
    result, failed = run(serve(FakeRouter()), [URL_0], api_key_file=str(path))
    assert failed and message in result["msg"]
    assert content not in result["msg"]


def test_a_missing_key_file_fails(serve, tmp_path):
    result, failed = run(serve(FakeRouter()), [URL_0], api_key_file=str(tmp_path / "absent.json"))
    assert failed and result["msg"] == "cannot read api_key_file: No such file or directory"


def test_a_fifo_as_key_file_is_refused_without_hanging(serve, tmp_path):
    path = tmp_path / "router.json"
    os.mkfifo(str(path), 0o600)
    result, failed = run(serve(FakeRouter()), [URL_0], api_key_file=str(path))
    assert failed and result["msg"] == "api_key_file is not a regular file"


def test_a_key_file_readable_by_others_is_used_with_a_warning(serve, tmp_path):
    path = tmp_path / "router.json"
    path.write_text(json.dumps({"api-key": KEY}))
    path.chmod(0o644)
    with mock.patch.object(basic.AnsibleModule, "warn") as warn:
        result, failed = run(serve(FakeRouter(urls=[URL_0])), [URL_0], api_key_file=str(path))
    assert not failed, result["msg"]
    warnings = [call.args[0] for call in warn.call_args_list]
    assert len(warnings) == 1 and "mode 0644" in warnings[0] and KEY not in warnings[0]
    assert_no_key(result)


def test_key_and_key_file_are_mutually_exclusive(serve, tmp_path):
    result, failed = run(serve(FakeRouter()), [URL_0], api_key=KEY, api_key_file=str(tmp_path / "k.json"))
    assert failed and "mutually exclusive" in result["msg"]


# --------------------------------------------------------------------------- bad input, unreachable router

@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:31000\nExecStartPost=/bin/sh", "workers[1] contains whitespace"),
    ("http://user:hunter2@127.0.0.1:31000", "workers[1] has user information"),
    ("http://127.0.0.1", "workers[1] has no port"),
])
def test_a_bad_worker_url_fails_naming_its_index_before_any_request(serve, url, message):
    router = FakeRouter()
    result, failed = run(serve(router), [URL_0, url])
    assert failed and result["msg"].startswith(message)
    assert "\n" not in result["msg"] and "hunter2" not in result["msg"]
    assert router.requests == []


def test_a_repeated_worker_fails(serve):
    result, failed = run(serve(FakeRouter()), [URL_0, URL_0 + "/"])
    assert failed and result["msg"] == "workers[1] repeats workers[0] (http://127.0.0.1:31000)"


def test_an_unreachable_router_fails_naming_its_url():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = "http://127.0.0.1:%d" % port
    result, failed = run(base, [URL_0])
    assert failed and ("cannot reach the router at %s" % base) in result["msg"]
    assert_no_key(result)


def test_something_else_on_the_port_fails_clearly(serve):
    router = FakeRouter()
    router.handle = lambda handler, method: (404, b"<html>not found</html>")
    result, failed = run(serve(router), [URL_0])
    assert failed and "answered 404" in result["msg"] and "sglang-router" in result["msg"]


def test_readiness_of_the_fake_is_shaped_like_the_real_one(serve):
    """The fake's /readiness answers without a key, like the real router (the module itself does not use it)."""
    from urllib.request import urlopen
    from urllib.error import HTTPError
    from ansible_collections.llmops.serving.plugins.module_utils import sglang_router

    router = FakeRouter(urls=[URL_0, URL_1])
    base = serve(router)
    with urlopen(base + "/readiness", timeout=5) as response:
        assert sglang_router.parse_readiness(response.read())["healthy_workers"] == 2
    router.set_healthy(URL_0, False)
    router.set_healthy(URL_1, False)
    with pytest.raises(HTTPError) as caught:
        urlopen(base + "/readiness", timeout=5)
    assert caught.value.code == 503
    assert sglang_router.parse_readiness(caught.value.read())["status"] == "not ready"


# --------------------------------------------------------------------------- a router that echoes the key

PEER_KEY = random_key(4)
FORMS = echoed_forms(PEER_KEY)
# Where the echoed key starts: well before the module's cut, or so many characters before it (-4: all but its last 4).
PLACES = [None, 7, 13, -4]


def _place(form, place):
    return len(form) + place if place is not None and place < 0 else place


def _echoing(serve, status, body):
    router = FakeRouter(key=PEER_KEY)
    router.handle = lambda handler, method: (status, body.encode("utf-8"))
    return run(serve(router), [URL_0], api_key=PEER_KEY)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_an_error_body_comes_back_in_no_form(serve, form, place):
    body = across_cut(FORMS[form], sglang_router_workers.MAX_BODY_QUOTE_CHARS, _place(FORMS[form], place),
                      prefix='{"error":"refused key ', suffix='","code":403}')
    result, failed = _echoing(serve, 403, body)
    assert failed and "answered 403" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_a_worker_list_that_is_not_json_comes_back_in_no_form(serve, form, place):
    body = across_cut(FORMS[form], 200, _place(FORMS[form], place), prefix="<html>key ", suffix="</html>")
    result, failed = _echoing(serve, 200, body)
    assert failed and "is not JSON" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_key_echoed_in_a_workers_url_comes_back_in_no_form(serve, form, place):
    url = across_cut(FORMS[form], 200, _place(FORMS[form], place), prefix="http://10.0.0.9:30000/?key=", suffix="")
    body = json.dumps({"workers": [{"id": "w1", "url": url, "is_healthy": "maybe"}]})
    result, failed = _echoing(serve, 200, body)
    assert failed and "'is_healthy' that is not true or false" in result["msg"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]
    listed = json.dumps({"workers": [{"id": "w1", "url": url, "is_healthy": True}]})
    result, failed = _echoing(serve, 200, listed)
    assert failed and "registered but not in workers" in result["msg"] and result["workers"]
    assert not key_windows_shown(PEER_KEY, result), result["msg"]
