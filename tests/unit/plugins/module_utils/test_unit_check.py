# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""unit_check: process descriptions and messages on a fake /proc tree, and the scaffolding of a check module run
in-process against a scripted `systemctl show`."""

from __future__ import annotations

import os

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show
from ansible_collections.llmops.serving.plugins.module_utils import unit_check
from ansible_collections.llmops.serving.tests.unit.fakes import CONTROL_GROUP, MAIN_PID, UNIT, FakeProc, FakeSystemctl, show_text

SESSION = "/user.slice/user-0.slice/session-3.scope"
STRAY_PID = 4242


class DemoCheck(unit_check.UnitCheck):
    """The smallest check: the unit must run, and the processes named in ``strays`` are strays."""

    def down_problem(self):
        if self.main_process_up:
            return None
        return "%s is down (%s)." % (self.name, unit_check.unit_state(self.unit))


def demo_main():
    module = basic.AnsibleModule(
        argument_spec=dict(name=dict(type="str", required=True), strays=dict(type="list", elements="int", default=[])),
        supports_check_mode=True,
    )
    check = DemoCheck(unit_check.load_unit(module, unseen="strays", unit=None))
    check.unit_running()
    for pid in module.params["strays"]:
        check.report_stray(check.describe(pid), "demo", "{process} is outside {unit} (cgroup {cgroup}), {extra}. {advice}",
                           extra="said the demo")
    check.finish(module, unit=check.unit)


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    proc = FakeProc(tmp_path / "proc")
    proc.add_process(MAIN_PID, ["/opt/sglang/bin/python", "-m", "sglang.launch_server"], cgroup_path=CONTROL_GROUP, starttime=100)
    proc.add_process(STRAY_PID, ["python3", "-m", "http.server", "30000"], cgroup_path=SESSION, starttime=200)
    monkeypatch.setattr(procfs, "PROC_ROOT", str(proc.root))
    return proc


def test_describe_member_and_phrase(fake_proc):
    root = str(fake_proc.root)
    inside = unit_check.describe_member(MAIN_PID, CONTROL_GROUP, root)
    outside = unit_check.describe_member(STRAY_PID, CONTROL_GROUP, root)
    assert (inside["in_unit"], inside["cgroup"]) == (True, CONTROL_GROUP)
    assert (outside["in_unit"], outside["cgroup"]) == (False, SESSION)
    assert unit_check.process_phrase(outside) == "PID 4242 (python3 -m http.server 30000, started %s)" % fake_proc.start_iso(200)
    gone = unit_check.describe_member(9, CONTROL_GROUP, root)
    assert (gone["in_unit"], gone["cgroup"]) == (False, None)
    assert unit_check.process_phrase(gone) == "PID 9 (command line unreadable)"


def test_join_problems():
    assert unit_check.join_problems(["a."]) == "a."
    assert unit_check.join_problems(["a.", "b."]) == "a. ALSO: b."


def test_unit_state_shows_the_asked_properties_and_an_unknown_result():
    unit = systemd_show.show_unit(FakeSystemctl(show_text(ActiveState="failed", SubState="failed", Result="", MainPID="0")), UNIT)
    assert unit_check.unit_state(unit) == "ActiveState=failed, SubState=failed, Result=?, MainPID=0"
    assert unit_check.unit_state(unit, ("LoadState", "MainPID")) == "LoadState=loaded, MainPID=0"


def test_a_check_that_finds_nothing_exits_unchanged(fake_proc):
    del fake_proc
    systemctl = FakeSystemctl()
    result, failed = systemctl.run_module(demo_main, {"name": "sglang-qwen36"}, check_mode=True)
    assert not failed, result.get("msg")
    assert (result["changed"], result["strays"], result["problems"]) == (False, [], [])
    assert result["unit"]["main_pid"] == MAIN_PID
    assert systemctl.commands[0][-1] == UNIT


def test_strays_and_problems_fail_with_every_fact(fake_proc):
    systemctl = FakeSystemctl(show_text(ActiveState="inactive", SubState="dead", MainPID="0"))
    result, failed = systemctl.run_module(demo_main, {"name": UNIT, "strays": [STRAY_PID]})
    assert failed
    stray_problem = ("PID 4242 (python3 -m http.server 30000, started %s) is outside %s (cgroup %s), said the demo. Stop it by "
                     "its PID after checking it (kill 4242); never kill by name (no pkill -f)." % (
                         fake_proc.start_iso(200), UNIT, SESSION))
    assert result["problems"] == ["%s is down (ActiveState=inactive, SubState=dead, Result=success, MainPID=0)." % UNIT, stray_problem]
    assert result["msg"] == " ALSO: ".join(result["problems"])
    assert result["strays"] == [{"pid": STRAY_PID, "cmdline": "python3 -m http.server 30000",
                                 "started_at": fake_proc.start_iso(200), "cgroup": SESSION, "reason": "demo"}]
    assert result["unit"]["active_state"] == "inactive" and result["changed"] is False


def test_a_stray_without_a_problem_is_only_reported(fake_proc):
    check = DemoCheck(systemd_show.show_unit(FakeSystemctl(), UNIT))
    check.report_stray(check.describe(STRAY_PID), "tolerated")
    assert check.problems == []
    assert [(stray["pid"], stray["cgroup"], stray["reason"]) for stray in check.strays] == [(STRAY_PID, SESSION, "tolerated")]
    assert check.btime == fake_proc.btime


def test_systemd_that_cannot_be_asked_fails_with_the_facts_so_far(fake_proc):
    del fake_proc
    systemctl = FakeSystemctl((1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"))
    result, failed = systemctl.run_module(demo_main, {"name": UNIT})
    assert failed
    assert result["msg"].startswith("cannot ask systemd about sglang-qwen36.service: systemctl show --property=")
    assert result["msg"].endswith("(rc=1): System has not been booted with systemd as init system (PID 1). Can't operate.")
    assert result["unit"] is None and "problems" not in result


def test_not_root_warns_what_may_go_unseen(fake_proc, monkeypatch):
    del fake_proc
    warnings = []
    monkeypatch.setattr(unit_check.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: warnings.append(text))
    result, failed = FakeSystemctl().run_module(demo_main, {"name": UNIT})
    assert not failed, result.get("msg")
    assert warnings == ["not running as root: other users' processes cannot be inspected, so strays may go unseen; use become."]


def test_other_pids_leave_out_the_module_itself_and_are_listed_once(fake_proc):
    fake_proc.add_process(os.getpid(), ["pytest"])
    check = DemoCheck(systemd_show.show_unit(FakeSystemctl(), UNIT))
    assert check.other_pids == [STRAY_PID, MAIN_PID]
    fake_proc.add_process(5000, ["started-later"])
    assert check.other_pids == [STRAY_PID, MAIN_PID]
