# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_plan module: check against the recorded rollout and the current deployment record; record after a pass."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import deployment_record, rollout_plan
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

COMPONENTS = {"collection": "a" * 64, "options_sglang": "b" * 64, "state_model_revision": "c" * 64}


@pytest.fixture
def deployed(tmp_path):
    """A container with a deployment record (as sglang_service leaves it); returns (args, deployment ID)."""
    unit = tmp_path / "unit.service"
    unit.write_text("[Service]\nExecStart=/x\n")
    result, failed = run_module(deployment_record.main, {
        "instance": "qwen36", "files": [str(unit)], "env_files": [], "inputs": {}, "state_dir": str(tmp_path / "state"),
        "env_file": str(tmp_path / "deployment.env")})
    assert not failed
    return {"instance": "qwen36", "state_dir": str(tmp_path / "state"), "components": COMPONENTS}, result["deployment_id"]


def test_first_plan_is_a_cutover_then_a_recorded_rollout_is_only_verified(deployed, tmp_path):
    args, deployment_id = deployed
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and result["cutover"] and result["reasons"] == ["no verified rollout is recorded on this container"]
    assert not result["changed"] and not os.path.exists(result["path"])
    # Check mode of a record writes nothing but says it would.
    result, failed = run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id), check_mode=True)
    assert not failed and result["changed"] and not os.path.exists(result["path"])
    result, failed = run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    assert not failed and result["changed"]
    assert stat.S_IMODE(os.stat(result["path"]).st_mode) == 0o644
    assert json.loads(open(result["path"], encoding="utf-8").read())["components"] == COMPONENTS
    assert not run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))[0]["changed"]
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and not result["cutover"] and result["reasons"] == [] and not result["changed"]
    changed = dict(COMPONENTS, options_sglang="e" * 64)
    result, failed = run_module(rollout_plan.main, dict(args, components=changed))
    assert result["cutover"] and result["changed_components"] == ["options_sglang"]


def test_a_deployment_changed_since_the_record_is_a_cutover(deployed, tmp_path):
    args, deployment_id = deployed
    run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    record = tmp_path / "state" / "qwen36" / "deployment.json"
    data = json.loads(record.read_text())
    data["deployment_id"] = "f" * 64
    record.write_text(json.dumps(data))
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and result["cutover"] and "a rollback or a change outside deploy.yml" in result["reasons"][0]
    # Recording a deployment the container is not on is refused.
    result, failed = run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    assert failed and "refusing to record" in result["msg"]


def test_damaged_or_swapped_records_are_reasons_not_crashes(deployed, tmp_path):
    args, deployment_id = deployed
    path = tmp_path / "state" / "qwen36" / "rollout.json"
    path.write_text("{not json")
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and result["cutover"] and "not a usable rollout record" in result["reasons"][0]
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and result["cutover"] and "symbolic link" in result["reasons"][0]
    path.unlink()
    os.mkfifo(path)
    result, failed = run_module(rollout_plan.main, args)
    assert not failed and result["cutover"] and "FIFO" in result["reasons"][0]


def test_inputs_that_are_not_digests_or_names_are_refused(deployed):
    args, _deployment_id = deployed
    for components in ({"collection": "short"}, {"Bad Name": "a" * 64}):
        result, failed = run_module(rollout_plan.main, dict(args, components=components))
        assert failed and "SHA-256" in result["msg"]
    result, failed = run_module(rollout_plan.main, dict(args, instance="../etc"))
    assert failed and "not a valid instance name" in result["msg"]


def test_a_unit_that_is_not_active_goes_through_the_cutover(deployed):
    args, deployment_id = deployed
    run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    assert not run_module(rollout_plan.main, dict(args, unit_state="active\n"))[0]["cutover"]
    for state, shown in (("inactive", "inactive"), ("failed", "failed"), ("", "unknown")):
        result, failed = run_module(rollout_plan.main, dict(args, unit_state=state))
        assert not failed and result["cutover"]
        assert result["reasons"] == ["the unit sglang-qwen36.service is %s, not active" % shown]
