# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every check on a systemd unit shares: loading the unit, describing the processes it looks at, naming strays,
and how its failure reads.

A check collects ``problems`` (one sentence each, the most telling first) and ``strays`` (processes outside the unit
that it blames), and fails with every fact it gathered, so one message names the culprit by PID, command line, start
time and cgroup. systemd_show reads systemd; procfs reads the kernel; this module turns both into verdicts.
"""

from __future__ import annotations

import os

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show

# How every "a stray process" message ends: the incident began with `pkill -9 -f sglang`.
STOP_ADVICE = "Stop it by its PID after checking it (kill %s); never kill by name (no pkill -f)."

# What a stray in a module's ``strays`` says about the process, besides the reason.
STRAY_KEYS = ("pid", "cmdline", "started_at", "cgroup")

# The unit's state as a message shows it, by systemctl's property names.
_STATE_KEYS = {
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "Result": "result",
    "MainPID": "main_pid",
}


def load_unit(module, unseen=None, **so_far):
    """What systemd says about the unit in the module's ``name`` option (systemd_show.show_unit()).

    ``unseen`` names what a scan of other users' processes may miss without root (warned about); when systemd cannot
    be asked, the module fails with ``so_far``, the facts it gathered before.
    """
    name = systemd_show.unit_name(module.params["name"])
    if unseen and os.geteuid() != 0:
        module.warn("not running as root: other users' processes cannot be inspected, so %s may go unseen; use become." % unseen)
    try:
        return systemd_show.show_unit(module.run_command, name)
    except systemd_show.SystemdError as exc:
        module.fail_json(msg="cannot ask systemd about %s: %s" % (name, exc), **so_far)


def unit_state(unit, shown=("ActiveState", "SubState", "Result", "MainPID")):
    """``ActiveState=failed, SubState=failed, Result=exit-code, MainPID=0`` for messages.

    An empty Result reads ``?``: systemd reports one only for some unit types, and only after a run.
    """
    parts = []
    for prop in shown:
        value = unit.get(_STATE_KEYS[prop])
        if prop == "Result":
            value = value or "?"
        parts.append("%s=%s" % (prop, value))
    return ", ".join(parts)


def describe_member(pid, control_group, proc_root=None, btime=None, ticks_per_second=None):
    """procfs.describe_process() plus ``cgroup`` (systemd path) and ``in_unit`` for the unit's ControlGroup."""
    facts = procfs.describe_process(pid, proc_root, btime=btime, ticks_per_second=ticks_per_second)
    entries = procfs.read_cgroup(pid, proc_root)
    facts["cgroup"] = systemd_show.systemd_cgroup_path(entries)
    facts["in_unit"] = systemd_show.in_unit_cgroup(entries, control_group)
    return facts


def process_phrase(facts):
    """``PID 4242 (python3 -m http.server 30000, started 2026-11-29T19:40:02Z)`` for messages."""
    details = [facts.get("cmdline") or "command line unreadable"]
    if facts.get("started_at"):
        details.append("started " + facts["started_at"])
    return "PID %s (%s)" % (facts["pid"], ", ".join(details))


def join_problems(problems):
    """One failure message from several problem sentences, the first (most telling) one leading."""
    return " ALSO: ".join(problems)


class UnitCheck:
    """The facts about one unit and the problems they show; a module's check adds its own ``check_*`` methods.

    Subclasses say what a unit that is down means for them in down_problem().
    """

    def __init__(self, unit):
        self.unit = unit
        self.name = unit["name"]
        self.control_group = unit["control_group"]
        self.btime = procfs.read_btime()
        self.ticks = procfs.clock_ticks_per_second()
        self.problems = []
        self.strays = []
        self._other_pids = None

    @property
    def other_pids(self):
        """The PIDs to scan, listed once per check: every process but this module's own."""
        if self._other_pids is None:
            own = os.getpid()
            self._other_pids = [pid for pid in procfs.list_pids() if pid != own]
        return self._other_pids

    def describe(self, pid):
        """describe_member() for this unit: pid, cmdline, comm, started_at, cgroup, in_unit."""
        return describe_member(pid, self.control_group, btime=self.btime, ticks_per_second=self.ticks)

    @property
    def main_process_up(self):
        """Whether systemd says the unit is active with a main process."""
        return self.unit["active_state"] == "active" and self.unit["main_pid"] > 0

    def down_problem(self):
        """Why the unit does not run a main process now (None while it does), in words that say what this means for
        the check."""
        raise NotImplementedError

    def unit_running(self):
        """True when the unit runs its main process; else the problem saying why not is recorded."""
        problem = self.down_problem()
        if problem is None:
            return True
        self.problems.append(problem)
        return False

    def report_stray(self, facts, reason, problem=None, **words):
        """Record the process ``facts`` describes in ``strays`` with ``reason``; ``problem``, when given, is the
        failure sentence: a str.format() template over {process}, {unit}, {cgroup}, {advice} and ``words``."""
        stray = dict((key, facts.get(key)) for key in STRAY_KEYS)
        stray["reason"] = reason
        self.strays.append(stray)
        if problem is not None:
            self.problems.append(problem.format(
                process=process_phrase(facts), unit=self.name, cgroup=facts["cgroup"] or "unknown",
                advice=STOP_ADVICE % facts["pid"], **words))

    def finish(self, module, **result):
        """Exit with ``result``, ``strays`` and ``problems``; fail with the same facts when there are problems.

        Every string in the result and the message passes redact.redact_deep() on the way out: command lines and
        quoted log lines are masked where they are read, and this is the last line of defence for what a check
        builds from them."""
        result.update(changed=False, strays=self.strays, problems=self.problems)
        result = redact.redact_deep(result)
        if self.problems:
            module.fail_json(msg=join_problems(result["problems"]), **result)
        module.exit_json(**result)
