#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_router_workers
short_description: Verify, register or remove the workers of an SGLang router
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Talks to SGLang's router (C(smg) 1.13.0, the Shepherd Model Gateway, or its predecessor C(sglang-router) 0.3.2)
    through its worker API - C(GET /workers), C(POST /workers), C(PATCH /workers/{id}) and C(DELETE /workers/{id}).
  - With O(state=verified) (the default) it only reads the worker list and fails when the registered set differs from
    O(workers) in either direction, when a worker is unhealthy or when a URL is registered twice; the message names each
    URL and what is wrong with it.
  - With O(state=present) it registers each worker of O(workers) that is not registered, then polls the worker list
    until every worker of O(workers) is listed and healthy; it fails at O(timeout) naming those that are not. Workers
    the router has that O(workers) does not name are left alone.
  - With O(state=absent) it removes every registration of each worker of O(workers) and polls until none of them is
    listed.
  - "Through C(smg) (whose workers carry a C(status)), O(state=absent) removes through the gateway's own draining
    state: one removal request turns the worker C(draining) (no new request reaches it, those it has run on; its C(load)
    counts them), and the gateway removes it at the end of its drain time (O(drain_seconds), else smg's own 5 s); the
    module waits for that, watching the requests in flight, and fails at O(timeout) naming them. It never asks twice: a
    second request removes a draining worker at once, but the first one's timer still runs and at its end removes
    whatever is registered at that URL, the same server added again meanwhile included (smg 1.13.0). A worker found
    C(draining) (a run killed while it drained) is waited for, also before O(state=present) adds it again.
    sglang-router 0.3.2 has no draining state: its workers are removed at once (their requests run on at the server)."
  - A worker is registered with the router's key (O(api_key) or O(api_key_file)) as its own, as the router's
    C(--worker-urls) are (smg sends a worker added through the API no key otherwise).
  - The router applies additions and removals in the background (it answers 202 at once), so both waits poll the worker
    list; there is no fixed sleep, and no wait runs past O(timeout).
  - URLs are compared with their scheme and host in lower case and without a trailing C(/). A worker is registered in
    that form.
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reads the worker list and returns what would be added or removed; sends no C(POST) or C(DELETE).
  diff_mode:
    support: none
options:
  url:
    description: The router's base URL (its C(--host) and C(--port)), for example C(http://127.0.0.1:30080).
    type: str
    required: true
  api_key:
    description:
      - The router's C(--api-key), sent as a bearer token in the C(Authorization) header. Never returned.
      - Without O(api_key) and O(api_key_file) no C(Authorization) header is sent, and a router that has a key answers
        401, which fails the module.
    type: str
  api_key_file:
    description:
      - A JSON file on the target that holds the key as C({"api-key":"..."}) (the router's config), so the key does not
        have to pass through Ansible's variables. It should be readable by root only; the module warns otherwise.
      - Its path is masked in the output like a secret.
    type: path
  workers:
    description:
      - The worker URLs, each C(http) or C(https), a DNS name, an IPv4 address or a bracketed IPv6 address, an explicit
        port and no path (C(/) is accepted), for example C(http://127.0.0.1:31000).
      - User information, a query, a fragment, whitespace and control characters are refused; the module fails naming
        the entry by its index.
    type: list
    elements: str
    required: true
  state:
    description:
      - C(verified) checks that the router has exactly O(workers), all healthy, each once; it changes nothing.
      - C(present) registers those of O(workers) that are missing and waits until all of O(workers) are healthy.
      - C(absent) removes O(workers) and waits until they are gone.
    type: str
    choices: [verified, present, absent]
    default: verified
  timeout:
    description: Seconds that the whole run may wait, every request and every poll included.
    type: int
    default: 60
  poll_interval:
    description: Seconds between two reads of the worker list while waiting.
    type: float
    default: 0.5
  drain_seconds:
    description:
      - C(smg) only - how long the gateway keeps a worker draining before it removes it (C(PATCH /workers/{id})
        C(health.drain_settle_secs) before the removal). Without it, smg's own drain time (5 s).
      - Must be less than O(timeout). The requests a worker still has when the gateway removes it run on at the server
        (M(llmops.serving.sglang_drain) waits for them there).
    type: int
notes:
  - Requests go to O(url) directly, without a proxy from the environment, and verify TLS certificates.
  - C(changed) is true when a worker was (or, in check mode, would be) added or removed.
seealso:
  - module: llmops.serving.sglang_ready
"""

EXAMPLES = r"""
- name: Register the two SGLang servers with the router and wait until both are healthy
  llmops.serving.sglang_router_workers:
    url: http://127.0.0.1:30080
    api_key_file: /etc/llmops-serving/router/router-secrets.json
    workers:
      - http://127.0.0.1:31000
      - http://127.0.0.1:31001
    state: present
    timeout: 120

- name: Fail unless the router has exactly these workers, all healthy
  llmops.serving.sglang_router_workers:
    url: http://127.0.0.1:30080
    api_key: "{{ vault_sglang_router_api_key }}"
    workers: "{{ sglang_router_worker_urls }}"
  register: router

- name: Take a worker out of the router before its server is restarted
  llmops.serving.sglang_router_workers:
    url: http://127.0.0.1:30080
    api_key_file: /etc/llmops-serving/router/router-secrets.json
    workers:
      - http://127.0.0.1:31001
    state: absent
"""

RETURN = r"""
workers:
  description: The router's worker list at the end of the run, as parsed.
  returned: when the router answered
  type: list
  elements: dict
  contains:
    id:
      description: The worker's ID (a re-added worker gets a new one).
      type: str
      sample: 1d7213cd-0f64-4a21-8977-66b36a2a447e
    url:
      description: The worker's URL as the router has it.
      type: str
      sample: http://127.0.0.1:31000
    is_healthy:
      description: Whether the router's health checks pass.
      type: bool
      sample: true
    model_id:
      description: The model the worker serves (C(unknown) until the router has asked it).
      type: str
      sample: Qwen/Qwen3.6-27B
    worker_type:
      description: C(regular), C(prefill) or C(decode).
      type: str
      sample: regular
    load:
      description: The router's count of the worker's running requests.
      type: int
      sample: 0
    status:
      description: smg's state of the worker (C(pending), C(ready), C(not_ready), C(failed), C(draining)); null for
        sglang-router 0.3.2.
      type: str
      sample: ready
missing:
  description: Normalized URLs of O(workers) that the final list does not have.
  returned: when the router answered
  type: list
  elements: str
  sample: ["http://127.0.0.1:31001"]
unexpected:
  description: Normalized URLs in the final list that O(workers) does not name (left alone unless O(state=verified)).
  returned: when the router answered
  type: list
  elements: str
  sample: []
unhealthy:
  description: Normalized URLs in the final list with an unhealthy registration.
  returned: when the router answered
  type: list
  elements: str
  sample: []
duplicates:
  description: Normalized URLs registered more than once in the final list.
  returned: when the router answered
  type: list
  elements: str
  sample: []
added:
  description: Normalized URLs registered by this run (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["http://127.0.0.1:31001"]
removed:
  description: Normalized URLs removed by this run (in check mode, those that would be). A registration already
    draining (left by a run killed while it drained) is not one of them - the gateway removes it; it is in RV(drained).
  returned: always
  type: list
  elements: str
  sample: []
drained:
  description: The workers the router drained before removing them (C(smg)), each with the most requests it had in
    flight meanwhile, those it still had at the last look before the router removed it, and the seconds until then.
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The worker's normalized URL.
      type: str
    in_flight:
      description: The most requests of the worker the gateway had in flight while it drained.
      type: int
    in_flight_at_removal:
      description: The requests in flight at the last look before the router removed the worker (they run on at the
        server).
      type: int
    seconds:
      description: Seconds from the removal request until the router no longer listed the worker.
      type: float
  sample: [{"url": "http://127.0.0.1:31001", "in_flight": 1, "in_flight_at_removal": 0, "seconds": 5.2}]
"""

import json
import os
import stat
import time

from urllib.parse import quote, urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils import sglang_router

MAX_KEY_FILE_BYTES = 64 * 1024
MAX_BODY_QUOTE_CHARS = 300
# The most a single request waits when the run still has more time than that.
MAX_REQUEST_SECONDS = 30.0
# The least a request waits, even when the run's time is up (the last poll still gets an answer).
MIN_REQUEST_SECONDS = 1.0


class RouterError(Exception):
    """A request failed; the message is free of the key."""


def _read_key_file(module, path):
    """The key from ``path`` (``{"api-key": "..."}``); fails without quoting the file's content."""
    try:
        # O_NONBLOCK: a FIFO put in the file's place does not hang the run; it is refused below.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                module.fail_json(msg="api_key_file is not a regular file")
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        module.fail_json(msg="cannot read api_key_file: %s" % (exc.strerror or exc.__class__.__name__))
    if len(data) > MAX_KEY_FILE_BYTES:
        module.fail_json(msg="api_key_file is larger than %d bytes; it is not a router key file" % MAX_KEY_FILE_BYTES)
    if info.st_mode & 0o077:
        module.warn("api_key_file is readable or writable by others than its owner (mode %04o); make it 0600"
                    % stat.S_IMODE(info.st_mode))
    try:
        content = json.loads(data.decode("utf-8"))
    except ValueError:
        module.fail_json(msg='api_key_file is not JSON; it must hold {"api-key": "..."}')
    key = content.get("api-key") if isinstance(content, dict) else None
    if not isinstance(key, str) or not key:
        module.fail_json(msg='api_key_file has no string "api-key"')
    return key


class Router:
    """The router's worker API, within one deadline for the whole run."""

    def __init__(self, module, base_url, api_key, timeout):
        self.module = module
        self.base_url = base_url
        self.api_key = api_key
        self.deadline = time.monotonic() + max(0, timeout)

    def remaining(self):
        return self.deadline - time.monotonic()

    @property
    def secrets(self):
        return (self.api_key,) if self.api_key else ()

    def scrub(self, value):
        return redact.redact_deep(value, secrets=self.secrets)

    def request(self, method, path, body=None):
        """(status, body text) of one request; RouterError for anything but an HTTP answer, and for 401."""
        endpoint = self.base_url + path
        timeout = max(MIN_REQUEST_SECONDS, min(MAX_REQUEST_SECONDS, self.remaining()))
        try:
            status, text = http_exchange.exchange(endpoint, method=method, body=body, api_key=self.api_key, timeout=timeout)
        except http_exchange.ExchangeError as exc:
            raise RouterError("cannot reach the router at %s (%s %s): %s" % (self.base_url, method, endpoint, exc.reason))
        if status == 401:
            raise RouterError("the router at %s answered 401 Unauthorized to %s %s: the API key is %s" % (
                self.base_url, method, path, "wrong" if self.api_key else "missing (set api_key or api_key_file)"))
        return status, text

    def fail(self, msg, **result):
        self.module.fail_json(msg=redact.redact_text(msg, secrets=self.secrets), **self.scrub(result))

    def describe(self, method, path, status, text):
        quoted = redact.shortened(text.strip(), MAX_BODY_QUOTE_CHARS, secrets=self.secrets)
        return "%s %s%s answered %s: %s" % (method, self.base_url, path, status, quoted or "(empty body)")

    def workers(self, result):
        try:
            status, text = self.request("GET", "/workers")
        except RouterError as exc:
            self.fail(str(exc), **result)
        if status != 200:
            self.fail(self.describe("GET", "/workers", status, text) + "; is %s an sglang-router?" % self.base_url, **result)
        try:
            return sglang_router.parse_workers(text, secrets=self.secrets)
        except ValueError as exc:
            self.fail("GET %s/workers: %s" % (self.base_url, exc), **result)

    def add(self, worker_url, result):
        body = {"url": worker_url}
        if self.api_key:
            body["api_key"] = self.api_key
        try:
            status, text = self.request("POST", "/workers", body)
        except RouterError as exc:
            self.fail("adding %s: %s" % (worker_url, exc), **result)
        # smg: 409 while the same URL is being added or is registered; the wait that follows sees which.
        if status == 409 and any(code in text for code in ("WORKER_CREATE_IN_PROGRESS", "WORKER_ALREADY_EXISTS")):
            return
        if status not in (200, 201, 202):
            self.fail("adding %s: %s" % (worker_url, self.describe("POST", "/workers", status, text)), **result)

    def set_drain_time(self, worker_url, worker_id, seconds, result):
        """smg: how long the worker may drain before the gateway removes it (PATCH health.drain_settle_secs)."""
        path = "/workers/" + quote(worker_id, safe="")
        try:
            status, text = self.request("PATCH", path, {"health": {"drain_settle_secs": int(seconds)}})
        except RouterError as exc:
            self.fail("setting the drain time of %s: %s" % (worker_url, exc), **result)
        if status not in (200, 202, 404):
            self.fail("setting the drain time of %s: %s" % (worker_url, self.describe("PATCH", path, status, text)), **result)

    def remove(self, worker_url, worker_id, result):
        """True when the router accepted the removal, False when it no longer knew the ID (404)."""
        path = "/workers/" + quote(worker_id, safe="")
        try:
            status, text = self.request("DELETE", path)
        except RouterError as exc:
            self.fail("removing %s: %s" % (worker_url, exc), **result)
        if status == 404:
            return False
        if status not in (200, 202, 204):
            self.fail("removing %s: %s" % (worker_url, self.describe("DELETE", path, status, text)), **result)
        return True


def _facts(expected, workers):
    facts = sglang_router.compare_workers(expected, workers)
    facts["workers"] = workers
    return facts


def _problems(expected, workers, facts):
    """One line per URL: what is wrong with it (for state=verified)."""
    counts = {}
    for worker in workers:
        url = sglang_router.normalize_worker_url(worker["url"])
        counts[url] = counts.get(url, 0) + 1
    lines = {}
    for url in facts["missing"]:
        lines.setdefault(url, []).append("not registered")
    for url in facts["unexpected"]:
        lines.setdefault(url, []).append("registered but not in workers")
    for url in facts["unhealthy"]:
        lines.setdefault(url, []).append("unhealthy")
    for url in facts["duplicates"]:
        lines.setdefault(url, []).append("registered %d times" % counts[url])
    return ["%s: %s" % (url, ", ".join(lines[url])) for url in sorted(lines)]


def _pending(expected, workers, want_healthy=True):
    """URLs of ``expected`` not yet as wanted, with why: not listed / unhealthy (present), still listed (absent)."""
    listed = {}
    for worker in workers:
        url = sglang_router.normalize_worker_url(worker["url"])
        listed[url] = listed.get(url, True) and worker["is_healthy"]
    pending = []
    for url in expected:
        if want_healthy:
            if url not in listed:
                pending.append("%s (not listed)" % url)
            elif not listed[url]:
                pending.append("%s (listed, unhealthy)" % url)
        elif url in listed:
            pending.append("%s (still listed)" % url)
    return pending


def _wait(router, module, expected, result, want_healthy, interval):
    """Poll the worker list until _pending() is empty; fail at the deadline naming what still is pending."""
    while True:
        workers = router.workers(result)
        result.update(_facts(expected, workers))
        pending = _pending(expected, workers, want_healthy)
        if not pending:
            return
        if router.remaining() <= 0:
            router.fail("after %d s, %s: %s" % (
                module.params["timeout"], "not every worker is registered and healthy" if want_healthy else
                "not every worker is gone", "; ".join(pending)), **result)
        time.sleep(max(0.0, min(interval, router.remaining())))


def _drain(router, module, workers, targets, result, interval, drain_seconds):
    """smg: each registration in ``targets`` ([(url, id)]) leaves through the gateway's draining state - one removal
    request (the worker turns draining: no new request reaches it, those it has run on), then a wait until the gateway
    removes it at the end of its drain time (``drain_seconds``, else smg's own 5 s), watching its requests in flight.

    Never a second removal request: smg 1.13.0 removes a draining worker at once then, but the first request's timer
    still runs, and at its end removes whatever is registered at that URL - the same server added again meanwhile
    included (seen on loopback: data/sglang_router/smg-1.13.0/stale-removal.txt). A worker already draining (a run
    killed while it drained) is only waited for. Returns the normalized URLs whose removal was requested."""
    by_id = dict((worker["id"], worker) for worker in workers)
    requested = set()
    started = time.monotonic()
    in_flight = dict((worker_id, by_id[worker_id]["load"] or 0) for dummy_url, worker_id in targets)
    last = dict(in_flight)
    for worker_url, worker_id in targets:
        if by_id[worker_id]["status"] == "draining":
            continue
        if drain_seconds is not None:
            router.set_drain_time(worker_url, worker_id, drain_seconds, result)
        if router.remove(worker_url, worker_id, result):
            requested.add(worker_url)
    waiting = dict((worker_id, worker_url) for worker_url, worker_id in targets)
    drained = []
    while waiting:
        listed = dict((worker["id"], worker) for worker in router.workers(result))
        for worker_id, worker_url in list(waiting.items()):
            entry = listed.get(worker_id)
            if entry is None:
                drained.append({"url": worker_url, "in_flight": in_flight[worker_id], "in_flight_at_removal": last[worker_id],
                                "seconds": round(time.monotonic() - started, 1)})
                del waiting[worker_id]
            else:
                last[worker_id] = entry["load"] or 0
                in_flight[worker_id] = max(in_flight[worker_id], last[worker_id])
        if not waiting:
            break
        if router.remaining() <= 0:
            result["drained"] = drained
            router.fail("after %d s the router has not removed the draining workers yet (their drain time runs on): %s" % (
                module.params["timeout"], "; ".join("%s (%d in flight)" % (worker_url, last[worker_id])
                                                    for worker_id, worker_url in sorted(waiting.items(), key=lambda item: item[1]))),
                        **result)
        time.sleep(max(0.0, min(interval, router.remaining())))
    result["drained"] = drained
    return requested


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            api_key_file=dict(type="path", no_log=True),
            workers=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["verified", "present", "absent"], default="verified"),
            timeout=dict(type="int", default=60),
            poll_interval=dict(type="float", default=0.5),
            drain_seconds=dict(type="int"),
        ),
        mutually_exclusive=[("api_key", "api_key_file")],
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, added=[], removed=[], drained=[])

    parsed = urlparse(params["url"])
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.username or parsed.password:
        module.fail_json(msg="url must be http:// or https:// with a host and no user information, for example "
                             "http://127.0.0.1:30080", **result)
    if params["timeout"] < 0 or params["poll_interval"] <= 0:
        module.fail_json(msg="timeout must be >= 0 and poll_interval > 0", **result)
    if params["drain_seconds"] is not None and not 0 <= params["drain_seconds"] < params["timeout"]:
        module.fail_json(msg="drain_seconds must be at least 0 and less than timeout (%d), or the run gives up before the "
                             "router removes the worker" % params["timeout"], **result)

    expected = []
    first_index = {}
    for index, worker_url in enumerate(params["workers"]):
        error = sglang_router.worker_url_error(worker_url)
        if error:
            module.fail_json(msg="workers[%d] %s: %s" % (index, error, redact.shortened(ascii(worker_url), 120)),
                             **result)
        normalized = sglang_router.normalize_worker_url(worker_url)
        if normalized in first_index:
            module.fail_json(msg="workers[%d] repeats workers[%d] (%s)" % (index, first_index[normalized], normalized),
                             **result)
        first_index[normalized] = index
        expected.append(normalized)

    api_key = params["api_key"]
    if params["api_key_file"]:
        api_key = _read_key_file(module, params["api_key_file"])
        module.no_log_values.add(api_key)
    if api_key is not None and ("\n" in api_key or "\r" in api_key):
        module.fail_json(msg="the API key contains a line break", **result)

    router = Router(module, params["url"].rstrip("/"), api_key, params["timeout"])
    workers = router.workers(result)
    result.update(_facts(expected, workers))
    state = params["state"]

    if state == "verified":
        problems = _problems(expected, workers, result)
        if problems:
            router.fail("the router at %s does not have exactly the expected healthy workers:\n  %s" % (
                router.base_url, "\n  ".join(problems)), **result)
        module.exit_json(**router.scrub(result))

    if state == "present":
        # A worker left draining (a run killed while it drained) is drained and removed first: smg refuses to add a URL
        # it has (409), and the draining registration would be removed at the end of its drain time anyway.
        leftovers = [(url, worker["id"]) for url in expected for worker in workers
                     if sglang_router.normalize_worker_url(worker["url"]) == url and worker["status"] == "draining"]
        registered = set(sglang_router.normalize_worker_url(w["url"]) for w in workers if w["status"] != "draining")
        to_add = [url for url in expected if url not in registered]
        result["added"] = to_add
        result["changed"] = bool(to_add)
        if module.check_mode:
            module.exit_json(**router.scrub(result))
        if leftovers:
            _drain(router, module, workers, leftovers, result, params["poll_interval"], params["drain_seconds"])
            result.update(_facts(expected, router.workers(result)))
        for worker_url in to_add:
            router.add(worker_url, result)
        _wait(router, module, expected, result, True, params["poll_interval"])
        module.exit_json(**router.scrub(result))

    removals = [(url, worker_id) for url in expected for worker_id in sglang_router.find_worker_ids(workers, url)]
    if module.check_mode:
        # As the run itself counts: a registration already draining (a run killed while it drained) is only waited
        # for, the gateway removes it, and this run requests nothing for it.
        draining = set(worker["id"] for worker in workers if worker.get("status") == "draining")
        result["removed"] = sorted(set(url for url, worker_id in removals if worker_id not in draining))
        result["changed"] = bool(result["removed"])
        module.exit_json(**router.scrub(result))
    removed = set()
    if sglang_router.drains(workers):
        removed |= _drain(router, module, workers, removals, result, params["poll_interval"], params["drain_seconds"])
    else:
        for worker_url, worker_id in removals:
            if router.remove(worker_url, worker_id, result):
                removed.add(worker_url)
    result["removed"] = sorted(removed)
    result["changed"] = bool(removed)
    _wait(router, module, expected, result, False, params["poll_interval"])
    module.exit_json(**router.scrub(result))


if __name__ == "__main__":
    main()
