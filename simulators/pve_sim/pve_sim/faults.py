# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault switches for tests: the node's API in trouble, as clients meet it.

The rules live in ``STATE/faults.json`` (``pve-sim fault add|list|clear``, or ``add()``/``rules()``/``clear()`` here);
the server reads them at every request and every new task, so they can be set while it runs. Each rule acts on the
next ``count`` requests (or tasks) it matches and then stays in the file, spent, with ``fired`` equal to ``count``:
a test waits for that state instead of waiting for time. ``serve`` starts with no rules.

A request rule matches ``method`` (any when absent) and ``path``, a regular expression matched against the whole path
below ``/api2/json`` without the query string (``/nodes/pve/lxc/120/config``, ``/nodes/pve/tasks/[^/]+/status``,
``/access/ticket``), and does one of:

- ``status`` (500-599) with ``message``: the request is not handled; the answer is that status with the message as
  PVE's status line and, below 595, PVE's JSON error body (``{"data": null, "message": "...\\n"}``). 595-599 are the
  codes pveproxy passes on from AnyEvent::HTTP when it cannot reach pvedaemon or another node (595: the connection
  was never made, so the request was not delivered; 596/597: it broke while the request was sent or the answer was
  read): status line only, no body, as pveproxy sends them.
- ``reset``: the connection is reset (TCP RST) ``before`` the request is handled (nothing happens) or ``after`` it
  (it happened, task started and all; the answer is lost). The client cannot tell the two apart.

A task rule matches ``task`` (the worker type: vzcreate, vzstart, vzstop, vzshutdown, vzreboot, vzdestroy) and
``vmid`` (any when absent) and, with ``hang``, the task never finishes: it gets its UPID and its log lines
(``log``), its status stays ``running`` for as long as the server runs, and its work is never done.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re

FILE_NAME = "faults.json"
LOCK_NAME = "faults.lock"
# Status lines of the faults when no message is given: the standard reasons, and for 595-597 what pveproxy passes on
# from AnyEvent::HTTP (the error text of the failed connection to pvedaemon).
DEFAULT_MESSAGES = {
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    595: "Connection refused",
    596: "Connection timed out",
    597: "Connection reset by peer",
    599: "Internal error",
}
NO_BODY_FROM = 595
HANG_LOG = ["pve-sim fault: this task never finishes (a 'hang' rule in %s)" % FILE_NAME]
TASK_TYPES = ("vzcreate", "vzstart", "vzstop", "vzshutdown", "vzreboot", "vzdestroy")


class FaultError(ValueError):
    """A rule that cannot be used."""


def _path(state_dir):
    return os.path.join(state_dir, FILE_NAME)


@contextlib.contextmanager
def _locked(state_dir):
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, LOCK_NAME), "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(state_dir):
    try:
        with open(_path(state_dir), encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    return list(data.get("faults") or [])


def _save(state_dir, rules):
    path = _path(state_dir)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"faults": rules}, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(temporary, path)


def validate(rule):
    """The rule with its defaults filled in; raises FaultError."""
    rule = dict(rule)
    count = rule.setdefault("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise FaultError("count must be a whole number of at least 1, got %r" % (count,))
    rule["fired"] = 0
    if "task" in rule:
        if rule["task"] not in TASK_TYPES:
            raise FaultError("task must be one of %s, got %r" % (", ".join(TASK_TYPES), rule["task"]))
        if not rule.get("hang"):
            raise FaultError("a task rule needs hang: true")
        if rule.get("vmid") is not None:
            rule["vmid"] = str(int(rule["vmid"]))
        rule["log"] = [str(line) for line in rule.get("log") or HANG_LOG]
        extra = set(rule) - {"task", "vmid", "hang", "log", "count", "fired"}
    else:
        if not rule.get("path"):
            raise FaultError("a request rule needs a path (a regular expression below /api2/json) or a task")
        try:
            re.compile(rule["path"])
        except re.error as error:
            raise FaultError("path %r is not a regular expression: %s" % (rule["path"], error)) from None
        if rule.get("method") is not None:
            rule["method"] = str(rule["method"]).upper()
        actions = [name for name in ("status", "reset") if rule.get(name) is not None]
        if len(actions) != 1:
            raise FaultError("a request rule needs exactly one of status and reset")
        if "status" in actions:
            status = rule["status"]
            if not isinstance(status, int) or not 500 <= status <= 599:
                raise FaultError("status must be 500-599, got %r" % (status,))
            rule["message"] = str(rule.get("message") or DEFAULT_MESSAGES.get(status, "Server Error"))
        elif rule["reset"] not in ("before", "after"):
            raise FaultError("reset must be before or after, got %r" % (rule["reset"],))
        extra = set(rule) - {"method", "path", "status", "message", "reset", "count", "fired"}
    if extra:
        raise FaultError("unknown keys in the rule: %s" % ", ".join(sorted(extra)))
    return rule


def add(state_dir, rule):
    """Add ``rule`` (validated); returns it as stored, with its ``id``."""
    rule = validate(rule)
    with _locked(state_dir):
        rules = _load(state_dir)
        rule["id"] = max([item.get("id", 0) for item in rules] + [0]) + 1
        rules.append(rule)
        _save(state_dir, rules)
    return rule


def rules(state_dir):
    """Every rule, spent ones included, as stored."""
    with _locked(state_dir):
        return _load(state_dir)


def clear(state_dir):
    with _locked(state_dir):
        if os.path.exists(_path(state_dir)):
            os.unlink(_path(state_dir))


def _take(state_dir, matches):
    path = _path(state_dir)
    if not os.path.exists(path):
        return None
    with _locked(state_dir):
        rules_now = _load(state_dir)
        for rule in rules_now:
            if rule.get("fired", 0) < rule.get("count", 1) and matches(rule):
                rule["fired"] = rule.get("fired", 0) + 1
                _save(state_dir, rules_now)
                return rule
    return None


def take_request(state_dir, method, path):
    """The first live request rule for ``method`` ``path`` (counted as fired), or None."""
    def matches(rule):
        return ("path" in rule and rule.get("method") in (None, method) and re.fullmatch(rule["path"], path) is not None)
    return _take(state_dir, matches)


def take_task(state_dir, worker_type, worker_id):
    """The first live task rule for a new task of ``worker_type`` on ``worker_id`` (counted as fired), or None."""
    def matches(rule):
        return rule.get("task") == worker_type and rule.get("vmid") in (None, str(worker_id))
    return _take(state_dir, matches)
