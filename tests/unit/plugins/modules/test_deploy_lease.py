# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deploy_lease module in-process: its diff shows the holder before and after, a refusal returns the holder, a
missing or forged run is refused before anything is read, and state=absent leaves another run's lease alone."""

from __future__ import annotations

import json

from ansible_collections.llmops.serving.plugins.modules import deploy_lease
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

RUN_A = {"id": "laptop/4101/20261205T030102Z", "controller": "laptop", "user": "ops", "pid": 4101}
RUN_B = {"id": "desk/52/20261205T030200Z", "controller": "desk", "user": "ops", "pid": 52}


def test_take_shows_the_holder_in_the_diff_and_a_second_run_is_refused_with_the_holder(tmp_path):
    path = str(tmp_path / "locks" / "lxc-201.json")
    result, failed = run_module(deploy_lease.main, {"path": path, "run": RUN_A}, diff=True)
    assert not failed and result["changed"] and result["acquired"] and result["holder"] is None
    assert result["diff"]["before"] == "" and json.loads(result["diff"]["after"])["run"] == RUN_A
    assert "path" not in result
    result, failed = run_module(deploy_lease.main, {"path": path, "run": RUN_B})
    assert failed and result["holder"]["run"] == RUN_A and not result["acquired"]
    assert result["msg"] == "run laptop/4101/20261205T030102Z (ops on laptop) holds the deploy lease %s" % path
    result, failed = run_module(deploy_lease.main, {"path": path, "run": RUN_B, "state": "absent"})
    assert not failed and not result["changed"] and result["holder"]["run"] == RUN_A
    result, failed = run_module(deploy_lease.main, {"path": path, "run": RUN_A, "state": "absent"}, check_mode=True,
                                diff=True)
    assert not failed and result["changed"] and result["diff"]["after"] == ""
    result, failed = run_module(deploy_lease.main, {"path": path, "run": RUN_A, "state": "absent"})
    assert not failed and result["changed"]


def test_a_missing_or_forged_run_is_refused_before_the_lease_is_touched(tmp_path):
    path = tmp_path / "locks" / "lxc-201.json"
    result, failed = run_module(deploy_lease.main, {"path": str(path)})
    assert failed and "action plugin" in result["msg"]
    result, failed = run_module(deploy_lease.main, {"path": str(path), "run": dict(RUN_A, id="a\nb")})
    assert failed and result["msg"].startswith("run: the run ID")
    assert not path.parent.exists()
