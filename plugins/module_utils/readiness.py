# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Decisions of the readiness wait, as pure functions of what one poll saw.

A poll sees the unit (systemctl show), the header of the log it points at, the new lines of that log,
and /health. The wait is over when the CURRENT invocation's log says ready and /health answers 200;
it fails at once when the unit exited or the log shows a startup error.
"""

from __future__ import annotations

import collections
import datetime

from ansible_collections.llmops.serving.plugins.module_utils import sglang_log
from ansible_collections.llmops.serving.plugins.module_utils import unit_check

# Error kinds that end a startup for good (a traceback alone may be a warning SGLang recovers from,
# but these are how a failed start ends).
FATAL_ERROR_KINDS = ("oom_hybrid", "cuda_oom", "nccl")

WAITING = "waiting"
READY = "ready"
FAILED = "failed"


def unit_verdict(unit, previous_invocation_id=None):
    """(state, message) for the unit alone: WAITING, or FAILED when it is down or restarting after a crash."""
    active, sub = unit.get("active_state"), unit.get("sub_state")
    if previous_invocation_id and unit.get("invocation_id") == previous_invocation_id:
        return WAITING, "the unit still runs invocation %s, from before the restart" % previous_invocation_id
    if active in ("failed", "inactive") or sub == "auto-restart":
        return FAILED, "%s exited before it became ready (%s)" % (
            unit.get("name"), unit_check.unit_state(unit, ("ActiveState", "SubState", "Result")))
    if active in ("activating", "active", "reloading"):
        return WAITING, "%s is %s (%s)" % (unit.get("name"), active, sub)
    return WAITING, "%s is %s" % (unit.get("name"), active)


class LogWatch:
    """Follows one log file from a byte offset and remembers what matters for readiness.

    ``log`` is the file opened once by service_files.open_log() (a ServiceFile): every poll reads that same
    inode, whatever the service user renames or swaps in the directory meanwhile. Lines are kept as
    sglang_log.quoted() gives them (secrets masked, shortened).
    """

    def __init__(self, log, offset, keep_lines=20, invocation_id=None, node_rank=0):
        self.log = log
        self.node_rank = node_rank
        self.path = log.path
        self.invocation_id = invocation_id
        self.offset = offset
        self.last_lines = collections.deque(maxlen=keep_lines)
        self.ready_line = None
        self.fatal = None

    def read_new(self):
        """Read the complete lines written since the last call (a half-written last line waits for the next)."""
        reader = sglang_log.LogLineReader(self.log.fd, offset=self.offset)
        for dummy_number, dummy_offset, text in reader:
            line = sglang_log.quoted(text)
            self.last_lines.append(line)
            if self.ready_line is None and sglang_log.is_ready_line(text, self.node_rank):
                self.ready_line = line
            kind = sglang_log.classify_error(text)
            if kind in FATAL_ERROR_KINDS and self.fatal is None:
                self.fatal = (kind, line)
        self.offset = reader.resume_offset

    def close(self):
        self.log.close()


def line_epoch(line):
    """Epoch seconds of an SGLang line's timestamp (local time of the machine that wrote it), or None."""
    timestamp = sglang_log.split_prefix(line)[0]
    if not timestamp:
        return None
    for layout in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.datetime.strptime(timestamp, layout).timestamp()
        except ValueError:
            continue
    return None


def describe_port_holders(holders, port):
    """The part of a failure message that names processes holding the port while the unit is down ('' when none)."""
    if not holders:
        return ""
    named = "; ".join("PID %s (%s, started %s)" % (holder["pid"], holder.get("cmdline") or holder.get("comm") or "?", holder.get("started_at") or "?")
                      for holder in holders)
    return (", but port %s is held by %s outside the unit: a server systemd does not own answers there (a stray, for example"
            " one started with nohup); stop it by that PID after checking it, then start the unit" % (port, named))
