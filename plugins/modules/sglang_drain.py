#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_drain
short_description: Wait until an SGLang server has no request in flight
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Polls the server's Prometheus C(GET /metrics) (served without authentication when SGLang runs with
    C(--enable-metrics)) and sums the gauges C(sglang:num_running_reqs) and C(sglang:num_queue_reqs) over all their
    series.
  - Returns once O(settle_polls) consecutive reads show both at 0. Both must be 0 - a server can run nothing while its
    queue is long (sgl-project/sglang issue 24140) - and one idle read is not enough, since a request can arrive
    between two scheduler steps.
  - Meant for a rollout, after the server was taken out of the router (M(llmops.serving.sglang_router_workers) with
    O(llmops.serving.sglang_router_workers#module:state=absent)) and before it is restarted, so that the requests it
    already has are finished rather than cut off.
  - Fails at O(timeout), naming the last counts and the seconds waited. Fails at once, without waiting, when
    C(/metrics) answers 404 or answers without either gauge (metrics disabled, or not an SGLang server), or when a
    sample line of either gauge is malformed.
  - A connection error, a timeout, a 5xx, 408 or 429 answer is retried until O(timeout) (a busy server may answer
    slowly); then the module fails naming the URL and the last error. Any other answer but 200 fails at once.
  - There is no fixed sleep; every request has its own timeout (at most 10 s, at most what is left of O(timeout), at
    least 1 s) that bounds the whole request, body included, so the run ends at most about 1 s after O(timeout) even
    when a server sends its answer a byte at a time.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
options:
  url:
    description: The server's base URL, for example C(http://127.0.0.1:30000); C(/metrics) is appended.
    type: str
    required: true
  timeout:
    description: The most seconds to wait in all, every request included.
    type: int
    default: 120
  poll_interval:
    description: Seconds between two reads of C(/metrics).
    type: float
    default: 0.5
  settle_polls:
    description: How many consecutive reads must show no request running or queued. A failed read breaks the series.
    type: int
    default: 2
notes:
  - Requests go to O(url) directly, without a proxy from the environment, and do not follow redirects.
  - C(changed) is always false; check mode reads the same way.
seealso:
  - module: llmops.serving.sglang_router_workers
  - module: llmops.serving.sglang_ready
"""

EXAMPLES = r"""
- name: Let sglang-qwen36 finish the requests it has before the restart
  llmops.serving.sglang_drain:
    url: http://127.0.0.1:30000
    timeout: 300
  register: drain

- name: Show how long the drain took
  ansible.builtin.debug:
    msg: "drained after {{ drain.waited_seconds }} s ({{ drain.polls }} reads)"
"""

RETURN = r"""
running:
  description: Requests being run at the last read (C(sglang:num_running_reqs) summed over its series); null before a read succeeded.
  returned: always
  type: int
  sample: 0
queued:
  description: Requests waiting at the last read (C(sglang:num_queue_reqs) summed over its series); null before a read succeeded.
  returned: always
  type: int
  sample: 0
waited_seconds:
  description: Seconds the wait took.
  returned: always
  type: float
  sample: 3.52
polls:
  description: How many times C(/metrics) was requested.
  returned: always
  type: int
  sample: 8
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils import sglang_metrics

# The most a single request waits when the run still has more time than that.
MAX_REQUEST_SECONDS = 10.0
# The least a request waits, even when the run's time is up (the last read still gets an answer).
MIN_REQUEST_SECONDS = 1.0
# Answers that a busy or restarting server (or a proxy in front of it) gives for a while: retried until the timeout.
RETRY_STATUSES = frozenset((408, 429))
MAX_BODY_QUOTE_CHARS = 200


class Retry(Exception):
    """A read that may succeed later (no connection, a timeout, a 5xx); the message names the URL."""


class Fatal(Exception):
    """A read that waiting will not fix (404, no gauges, a malformed gauge line); the message names the URL."""


class Drain:
    """One wait for the server at ``url`` to have no request in flight, within one deadline."""

    def __init__(self, module):
        params = module.params
        self.module = module
        self.base_url = params["url"].rstrip("/")
        self.metrics_url = self.base_url + "/metrics"
        self.timeout = params["timeout"]
        self.interval = params["poll_interval"]
        self.settle_polls = params["settle_polls"]
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout
        self.polls = 0
        self.idle_streak = 0
        self.counts = None
        self.last_error = None

    def remaining(self):
        return self.deadline - time.monotonic()

    def result(self):
        counts = self.counts or {}
        return dict(changed=False, running=counts.get("running"), queued=counts.get("queued"),
                    waited_seconds=round(time.monotonic() - self.started, 3), polls=self.polls)

    def fetch(self):
        """The body of one ``GET /metrics``; Retry or Fatal when there is none to parse."""
        timeout = max(MIN_REQUEST_SECONDS, min(MAX_REQUEST_SECONDS, self.remaining()))
        try:
            status, text = http_exchange.exchange(self.metrics_url, accept="text/plain", timeout=timeout)
        except http_exchange.ExchangeError as exc:
            raise Retry("GET %s failed: %s" % (self.metrics_url, exc.reason))
        if status == 200:
            return text
        quoted = redact.shortened(text.strip(), MAX_BODY_QUOTE_CHARS) or "(empty body)"
        answer = "GET %s answered %s: %s" % (self.metrics_url, status, quoted)
        if status >= 500 or status in RETRY_STATUSES:
            raise Retry(answer)
        if status == 404:
            raise Fatal("%s. SGLang serves /metrics only when started with --enable-metrics "
                        "(sglang_service_enable_metrics: true); is %s an SGLang server?" % (answer, self.base_url))
        raise Fatal(answer)

    def poll(self):
        """Read the counts once; True when the last O(settle_polls) reads all showed nothing in flight."""
        self.polls += 1
        try:
            text = self.fetch()
            try:
                self.counts = sglang_metrics.in_flight(text)
            except ValueError as exc:
                raise Fatal("GET %s: %s" % (self.metrics_url, exc))
        except Retry as exc:
            self.last_error = str(exc)
            self.idle_streak = 0
            return False
        except Fatal as exc:
            self.fail(str(exc))
        self.last_error = None
        if self.counts["running"] == 0 and self.counts["queued"] == 0:
            self.idle_streak += 1
        else:
            self.idle_streak = 0
        return self.idle_streak >= self.settle_polls

    def fail(self, msg):
        """Fail with ``msg``: what it quotes of the server (a body, a metrics line) masked by redact, as the URL's
        password is."""
        self.module.fail_json(msg=redact.redact_text(msg), **self.result())

    def fail_on_timeout(self):
        if self.remaining() > 0:
            return
        result = self.result()
        if self.last_error is not None:
            counts = ("; the last successful read showed %d running and %d queued requests"
                      % (self.counts["running"], self.counts["queued"]) if self.counts else "")
            self.fail("%s did not answer with its metrics within %d s (%d reads, waited %.1f s): %s%s" % (
                self.base_url, self.timeout, self.polls, result["waited_seconds"], self.last_error, counts))
        self.fail("%s still had %d running and %d queued requests after %.1f s (timeout %d s, %d reads, "
                  "%d consecutive idle of the %d needed)" % (
                      self.base_url, self.counts["running"], self.counts["queued"], result["waited_seconds"],
                      self.timeout, self.polls, self.idle_streak, self.settle_polls))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            timeout=dict(type="int", default=120),
            poll_interval=dict(type="float", default=0.5),
            settle_polls=dict(type="int", default=2),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 0 or params["poll_interval"] <= 0 or params["settle_polls"] < 1:
        module.fail_json(msg="timeout must be >= 0, poll_interval > 0 and settle_polls >= 1", changed=False)
    if not params["url"].lower().startswith(("http://", "https://")):
        module.fail_json(msg="url must start with http:// or https://, got %r" % redact.shortened(params["url"], 200),
                         changed=False)
    drain = Drain(module)
    while True:
        if drain.poll():
            module.exit_json(**drain.result())
        drain.fail_on_timeout()
        time.sleep(max(0.0, min(drain.interval, drain.remaining())))


if __name__ == "__main__":
    main()
