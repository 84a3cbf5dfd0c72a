#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_ready
short_description: Wait until the current invocation of an SGLang unit is ready, or fail as soon as it cannot be
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Polls the unit (C(systemctl show)), the log file of the unit's CURRENT invocation (the one whose header carries the
    unit's InvocationID, so an older run's log is never taken for this one) and the server's C(/health) endpoint.
  - Returns as soon as the log shows C(The server is fired up and ready to roll!) and C(/health) answers 200, within one
    poll interval of the ready line.
  - Fails at once, quoting the log's last lines, when the unit exits or restarts after a crash, or when the log shows a
    startup error (the hybrid-cache or CUDA out-of-memory message, an NCCL error); fails at O(timeout) otherwise.
  - There is no fixed sleep anywhere, so a slow start only costs the time it takes.
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
options:
  name:
    description: The systemd unit, for example C(sglang-qwen36.service).
    type: str
    required: true
  log_path:
    description: The instance's C(current.log) symlink (or its log directory, which means C(<dir>/current.log)).
    type: path
    required: true
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  health_path:
    description: Path of the health endpoint (unauthenticated in SGLang).
    type: str
    default: /health
  previous_invocation_id:
    description:
      - The unit's InvocationID before a restart. While the unit still runs that invocation, the wait goes on; a restart
        that never happens ends in a timeout that says so.
    type: str
  timeout:
    description: Seconds to wait in all. Real model loads and CUDA graph capture take minutes.
    type: float
    default: 900
  poll_interval:
    description: Seconds between polls; bounds how late the ready line is noticed.
    type: float
    default: 0.25
  tail_lines:
    description: How many of the log's last lines a failure quotes.
    type: int
    default: 15
notes:
  - Run it as root (C(become)) so it can read the log directory, which belongs to the service account.
seealso:
  - module: llmops.serving.service_provenance
  - module: llmops.serving.log_provenance
  - module: llmops.serving.spec_decode_stats
"""

EXAMPLES = r"""
- name: Wait for the new invocation of sglang-qwen36 to be ready
  llmops.serving.sglang_ready:
    name: sglang-qwen36.service
    log_path: /var/log/llmops-serving/qwen36/current.log
    url: http://127.0.0.1:30000
    previous_invocation_id: "{{ sglang_service_previous_invocation_id }}"
    timeout: 1200
  register: ready

- name: Show how long the start took
  ansible.builtin.debug:
    msg: "ready after {{ ready.elapsed_seconds }} s, noticed {{ ready.lag_after_ready_line_seconds }} s after the ready line"
"""

RETURN = r"""
ready:
  description: Whether the server became ready.
  returned: always
  type: bool
  sample: true
elapsed_seconds:
  description: Seconds the wait took.
  returned: always
  type: float
  sample: 93.4
ready_line:
  description: The ready line of the current invocation's log.
  returned: when ready
  type: str
  sample: "[2026-11-29 19:44:42] The server is fired up and ready to roll!"
lag_after_ready_line_seconds:
  description:
    - Seconds between the ready line's own timestamp and the moment the wait noticed it and C(/health) answered.
    - SGLang's timestamps have whole seconds unless C(SGLANG_LOG_MS=1), so without milliseconds this is up to 1 s too high.
  returned: when the ready line has a timestamp and appeared during the wait
  type: float
  sample: 0.31
ready_before_wait:
  description: Whether the server was ready already at the first poll (nothing was waited for).
  returned: when ready
  type: bool
  sample: false
port_holders:
  description:
    - When the unit is down, the processes that listen on the port of O(url) in this network namespace, none of them the
      unit's (a stray server started by hand, for example with nohup). The failure message names them.
  returned: when the unit exited or is down
  type: list
  elements: dict
  sample: [{"pid": 4242, "cmdline": "python3 -m sglang.launch_server --port 30000", "comm": "python3", "started_at": "2026-11-29T19:40:02Z"}]
log_file:
  description: The log file of the current invocation (C(current.log) resolved).
  returned: when the current invocation's log was found
  type: str
  sample: /var/log/llmops-serving/qwen36/20261129T194437Z-d6f816684930476185a4fb81181a8c54.log
unit:
  description: The unit's state at the last poll (name, active_state, sub_state, result, main_pid, invocation_id, ...).
  returned: always
  type: dict
last_lines:
  description: The last lines of the current invocation's log (on failure, what the message quotes).
  returned: always
  type: list
  elements: str
startup_error:
  description: The decisive startup error line and its kind (oom_hybrid, cuda_oom, nccl), when one was seen.
  returned: on failure from a startup error
  type: dict
"""

import os
import time

from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import readiness
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show


def _health(url, timeout):
    try:
        response = open_url(url, method="GET", timeout=timeout, validate_certs=False, use_proxy=False)
        return response.getcode()
    except Exception as exc:  # pylint: disable=broad-except
        return getattr(exc, "code", None)


def _current_header(path):
    """(resolved file, header dict) of the log that ``path`` points at now; (None, None) while there is none."""
    try:
        resolved = os.path.realpath(path)
        summary = log_header.read_log_summary(resolved, tail_bytes=0)
    except OSError:
        return None, None
    return resolved, summary


def _port_of(url):
    parsed = urlparse(url)
    try:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None


def _port_holders(port):
    """Processes listening on ``port`` in this network namespace (the unit is down: none of them is the unit's)."""
    if port is None:
        return []
    inodes = [entry["inode"] for entry in procfs.listening_sockets(port=port)]
    pids = sorted(set(pid for owners in procfs.socket_owners(inodes).values() for pid in owners))
    return [procfs.describe_process(pid) for pid in pids]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            log_path=dict(type="path", required=True),
            url=dict(type="str", default="http://127.0.0.1:30000"),
            health_path=dict(type="str", default="/health"),
            previous_invocation_id=dict(type="str"),
            timeout=dict(type="float", default=900),
            poll_interval=dict(type="float", default=0.25),
            tail_lines=dict(type="int", default=15),
        ),
        supports_check_mode=True,
    )
    params = module.params
    unit_name = systemd_show.unit_name(params["name"])
    log_path = params["log_path"]
    if os.path.isdir(log_path):
        log_path = os.path.join(log_path, "current.log")
    health_url = params["url"].rstrip("/") + params["health_path"]
    interval = max(0.05, params["poll_interval"])

    started = time.monotonic()
    deadline = started + max(0.0, params["timeout"])
    watch = None
    unit = {}
    waiting_for = "the first poll"
    first_poll = True
    ready_before_wait = False
    while True:
        try:
            unit = systemd_show.show_unit(module.run_command, unit_name)
        except systemd_show.SystemdError as exc:
            module.fail_json(msg="cannot ask systemd about %s: %s" % (unit_name, exc), ready=False,
                             elapsed_seconds=round(time.monotonic() - started, 3), unit={}, last_lines=[])
        state, waiting_for = readiness.unit_verdict(unit, params["previous_invocation_id"])
        invocation = unit.get("invocation_id")
        # Follow the log of the unit's latest invocation (also when it already exited, to quote why).
        if invocation and invocation != params["previous_invocation_id"] and (watch is None or watch.invocation_id != invocation):
            resolved, summary = _current_header(log_path)
            header = (summary or {}).get("header") or {}
            if header.get("invocation_id") == invocation:
                watch = readiness.LogWatch(resolved, summary["offset"], keep_lines=params["tail_lines"], invocation_id=invocation)
                if first_poll:
                    watch.read_new()
                    ready_before_wait = watch.ready_line is not None
            else:
                watch = None
                if state == readiness.WAITING:
                    waiting_for = "the log of invocation %s (the launcher has not switched %s yet)" % (invocation, log_path)
        first_poll = False

        if watch is not None:
            watch.read_new()
        last_lines = list(watch.last_lines) if watch else []
        elapsed = round(time.monotonic() - started, 3)
        result = dict(changed=False, ready=False, elapsed_seconds=elapsed, unit=unit, last_lines=last_lines,
                      log_file=watch.path if watch else None)

        if watch is not None and watch.fatal:
            kind, line = watch.fatal
            result["startup_error"] = {"kind": kind, "line": line}
            module.fail_json(msg="%s failed to start: its log shows %s:\n  %s\nLast lines of %s:\n  %s"
                             % (unit_name, kind, line, watch.path, "\n  ".join(last_lines)), **result)
        if state == readiness.FAILED:
            where = watch.path if watch else log_path
            # A server that answers on the port while the unit is down is the incident's stray: name it first.
            holders = _port_holders(_port_of(params["url"]))
            result["port_holders"] = holders
            module.fail_json(msg="%s%s. Last lines of %s:\n  %s" % (waiting_for, readiness.describe_port_holders(holders, _port_of(params["url"])),
                                                                    where, "\n  ".join(last_lines) or "(no log of this invocation)"),
                             **result)
        if watch is not None and watch.ready_line:
            code = _health(health_url, timeout=min(5.0, max(1.0, interval * 4)))
            if code == 200:
                result.update(ready=True, ready_line=watch.ready_line, ready_before_wait=ready_before_wait)
                line_time = readiness.line_epoch(watch.ready_line)
                if line_time is not None and not ready_before_wait:
                    result["lag_after_ready_line_seconds"] = round(time.time() - line_time, 3)
                module.exit_json(**result)
            waiting_for = "%s to answer 200 (the log says ready, /health answered %s)" % (health_url, code)

        if time.monotonic() >= deadline:
            module.fail_json(msg="%s was not ready after %.0f s: still waiting for %s. Last lines of %s:\n  %s"
                             % (unit_name, params["timeout"], waiting_for, watch.path if watch else log_path,
                                "\n  ".join(last_lines) or "(none)"), **result)
        time.sleep(interval)


if __name__ == "__main__":
    main()
