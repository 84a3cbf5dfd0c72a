# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Worker tasks with real UPIDs, run in threads, logged like PVE's fork_worker.

A task's log ends with ``TASK OK`` or ``TASK ERROR: <message>``; its exitstatus is ``OK`` or the
message, so a failed task is a task that stops with a non-OK exitstatus, never an HTTP error.
"""
from __future__ import annotations

import itertools
import os
import threading
import time

from pve_sim import faults

_PID_COUNTER = itertools.count(1)


def _process_start_ticks():
    """pstart: the start time of this process in clock ticks since boot (field 22 of /proc/self/stat)."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def make_upid(node, pid, pstart, starttime, worker_type, worker_id, user):
    return "UPID:%s:%08X:%08X:%08X:%s:%s:%s:" % (node, pid, pstart, starttime, worker_type, worker_id, user)


def parse_upid(upid):
    """The fields of a UPID, or None when it is not one (PVE::Tools::upid_decode)."""
    parts = upid.split(":")
    if len(parts) != 9 or parts[0] != "UPID" or parts[8] != "":
        return None
    try:
        return {"node": parts[1], "pid": int(parts[2], 16), "pstart": int(parts[3], 16), "starttime": int(parts[4], 16),
                "type": parts[5], "id": parts[6], "user": parts[7]}
    except ValueError:
        return None


class TaskFailed(Exception):
    """Raised by a worker: the task ends with this message as its exitstatus."""


class Task:
    def __init__(self, upid, fields, log_path):
        self.upid = upid
        self.fields = fields
        self.log_path = log_path
        self.lines = []
        self.exitstatus = None
        self.done = threading.Event()
        self._lock = threading.Lock()

    def log(self, text):
        with self._lock:
            for line in str(text).rstrip("\n").split("\n"):
                self.lines.append(line)
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(str(text).rstrip("\n") + "\n")

    def status(self):
        result = dict(self.fields)
        result["upid"] = self.upid
        result["status"] = "stopped" if self.done.is_set() else "running"
        if self.done.is_set():
            result["exitstatus"] = self.exitstatus
        return result

    def log_page(self, start=0, limit=50):
        with self._lock:
            lines = list(self.lines)
        if not lines and not self.done.is_set():
            return [{"n": 1, "t": "no content"}]
        chosen = lines[start:start + limit] if limit else lines[start:]
        return [{"n": start + index + 1, "t": text} for index, text in enumerate(chosen)]


class TaskManager:
    def __init__(self, node, log_dir, fault_dir=None):
        self.node = node
        self.log_dir = log_dir
        # Where the fault rules live (pve_sim.faults): a 'hang' rule keeps a new task running forever.
        self.fault_dir = fault_dir
        os.makedirs(log_dir, exist_ok=True)
        self.pstart = _process_start_ticks()
        self.tasks = {}
        self._lock = threading.Lock()

    def start(self, worker_type, worker_id, user, function):
        """Run ``function(task)`` in a thread; returns the UPID at once."""
        pid = (os.getpid() * 1000 + next(_PID_COUNTER)) & 0x3FFFFF
        starttime = int(time.time())
        upid = make_upid(self.node, pid, self.pstart, starttime, worker_type, worker_id, user)
        fields = {"node": self.node, "pid": pid, "pstart": self.pstart, "starttime": starttime, "type": worker_type,
                  "id": str(worker_id), "user": user}
        task = Task(upid, fields, os.path.join(self.log_dir, upid.replace(":", "_").replace("!", "_").replace("@", "_")))
        with self._lock:
            self.tasks[upid] = task
        rule = faults.take_task(self.fault_dir, worker_type, worker_id) if self.fault_dir else None
        if rule is not None:
            # Never finishes: the work is not done, the status stays 'running' while the server runs.
            for line in rule["log"]:
                task.log(line)
            return upid
        thread = threading.Thread(target=self._run, args=(task, function), name="task-%s-%s" % (worker_type, worker_id), daemon=True)
        thread.start()
        return upid

    @staticmethod
    def _run(task, function):
        try:
            function(task)
        except TaskFailed as error:
            task.exitstatus = str(error).strip() or "unknown error"
        except Exception as error:  # pylint: disable=broad-except
            # Any other worker failure is a task error too, as in PVE's fork_worker.
            task.exitstatus = ("%s" % error).strip() or error.__class__.__name__
        else:
            task.exitstatus = "OK"
        if task.exitstatus == "OK":
            task.log("TASK OK")
        else:
            task.log("TASK ERROR: %s" % task.exitstatus)
        task.done.set()

    def get(self, upid):
        with self._lock:
            return self.tasks.get(upid)
