# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Proxmox VE tasks: UPIDs and waiting on a task until it stops. No I/O of its own: the caller passes the API calls.

A mutating PVE call (create, start, stop, delete, ...) answers with a UPID at once and runs the work as a task. A task
that fails is NOT an HTTP error: GET /nodes/{node}/tasks/{upid}/status says ``status: stopped`` with an ``exitstatus``
other than ``OK`` (``WARNINGS: n`` counts as success, as in PVE's own tools), and the log ends with ``TASK ERROR: ...``.
So the wait must look at ``exitstatus`` on every poll and fail the moment the task stops, not wait for a timeout.
(proxmoxer's ``Tasks.blocking_status`` returns None on timeout and does not raise on failure; community.proxmox's
``proxmox`` module only asks "is it OK yet?" and so notices a failed task only when its timeout runs out.)
"""

from __future__ import annotations

import re
import time

# pve-common PVE/Tools.pm upid_encode: UPID:$node:$pid(8 hex):$pstart(8 or 9 hex):$starttime(8 hex):$type:$id:$user:
UPID_RE = re.compile(
    r"^UPID:(?P<node>[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):(?P<pid>[0-9A-Fa-f]{8}):(?P<pstart>[0-9A-Fa-f]{8,9}):"
    r"(?P<starttime>[0-9A-Fa-f]{8}):(?P<type>[^:\s]+):(?P<id>[^:\s]*):(?P<user>[^:\s]+):$"
)
LOG_TAIL_LINES = 10
LOG_FETCH_LIMIT = 5000
FIRST_POLL_INTERVAL = 0.2
MAX_POLL_INTERVAL = 1.0


class TaskError(Exception):
    """A task failed or did not finish in time. ``exitstatus`` is None for a timeout."""

    def __init__(self, message, upid, exitstatus=None, log_tail=None, status=None):
        super().__init__(message)
        self.upid = upid
        self.exitstatus = exitstatus
        self.log_tail = list(log_tail or [])
        self.status = dict(status or {})


def parse_upid(upid):
    """The fields of a UPID as a dict (pid, pstart and starttime as integers). Raises ValueError."""
    match = UPID_RE.match(upid or "") if isinstance(upid, str) else None
    if not match:
        raise ValueError("not a Proxmox task ID (UPID): %r" % (upid,))
    fields = match.groupdict()
    for name in ("pid", "pstart", "starttime"):
        fields[name] = int(fields[name], 16)
    return fields


def task_succeeded(exitstatus):
    """PVE's own rule (PVE::Tools::upid_status_is_error): OK and WARNINGS are success, anything else an error."""
    text = str(exitstatus or "")
    return text == "OK" or text.startswith("WARNINGS")


def log_tail(get_log, lines=LOG_TAIL_LINES):
    """The last ``lines`` log lines of a task; ``get_log(start, limit)`` returns PVE's ``[{n, t}, ...]``."""
    entries = get_log(0, LOG_FETCH_LIMIT) or []
    texts = [str(entry.get("t", "")) if isinstance(entry, dict) else str(entry) for entry in entries]
    return texts[-lines:]


def task_label(upid):
    """``task vzcreate on node pve1`` from a UPID (its type and node), or ``task`` for one that does not parse."""
    try:
        fields = parse_upid(upid)
    except ValueError:
        return "task"
    return "task %s on node %s" % (fields["type"], fields["node"])


def how_it_ended(upid):
    """Where an operator reads what became of a task this run could not see to its end."""
    try:
        node = parse_upid(upid)["node"]
    except ValueError:
        return "the node's task list says how it ended"
    return "`pvenode task status %s` on node %s says how it ended" % (upid, node)


def with_tail(message, tail):
    if tail:
        message += "; last log lines: " + " | ".join(tail)
    return message


def describe_failure(upid, exitstatus, tail, description=None):
    fields = {}
    try:
        fields = parse_upid(upid)
    except ValueError:
        pass
    what = description or ("task %s %s" % (fields.get("type", "?"), fields.get("id", ""))).strip()
    return with_tail("%s failed: %s (task %s)" % (what, exitstatus, upid), tail)


def describe_timeout(upid, timeout, status, tail, description=None):
    """A task still running at the deadline: it is not done, and not failed either."""
    return with_tail(
        "%s did not finish within %d s: %s (%s) is still %s; it is not counted as done and may yet succeed or fail: %s" % (
            description or "task", timeout, task_label(upid), upid, status or "unknown", how_it_ended(upid)), tail)


def status_unknown(upid, description, reason, tail):
    """The status of a task could not be read (the request failed): neither done nor failed as far as anyone here knows."""
    return with_tail(
        "%s: the status of %s (%s) could not be read: %s; it is not counted as done: it may still be running, or have "
        "succeeded or failed: %s" % (description or "task", task_label(upid), upid, reason, how_it_ended(upid)), tail)


def wait_for_task(get_status, get_log, upid, timeout, description=None, clock=time.monotonic, sleep=time.sleep):
    """Poll ``get_status()`` until the task stops; return its status when it succeeded.

    Raises TaskError at once when it stopped with an error (message: the exit status and the last log lines),
    or when it still runs after ``timeout`` seconds (message: its type, node and UPID, and the last log lines). Only a
    status ``stopped`` with a successful exit status is success: an answer without a status (or an exception from
    ``get_status``, which propagates) never is.
    """
    parse_upid(upid)
    deadline = clock() + timeout
    interval = FIRST_POLL_INTERVAL
    while True:
        status = get_status() or {}
        if not isinstance(status, dict):
            status = {}
        if status.get("status") == "stopped":
            exitstatus = status.get("exitstatus")
            if task_succeeded(exitstatus):
                return status
            tail = log_tail(get_log)
            raise TaskError(describe_failure(upid, exitstatus, tail, description), upid, exitstatus, tail, status)
        remaining = deadline - clock()
        if remaining <= 0:
            tail = log_tail(get_log)
            raise TaskError(describe_timeout(upid, timeout, status.get("status"), tail, description), upid, None, tail, status)
        sleep(min(interval, remaining))
        interval = min(interval * 2, MAX_POLL_INTERVAL)
