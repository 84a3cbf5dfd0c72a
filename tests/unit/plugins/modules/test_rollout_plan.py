# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_plan module: check against the recorded rollout and the current deployment record; record after a pass."""

from __future__ import annotations

import json
import os
import stat

from unittest import mock

import pytest
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file
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


def test_the_record_holds_the_state_after_the_rollout_not_the_plans(deployed, tmp_path):
    # The first deployment: the plan reads no model (it is downloaded later in the run); the record must hold the
    # downloaded revision, or the next plan sees "state_model_revision: changed" and cuts over again for nothing.
    args, deployment_id = deployed
    metadata = tmp_path / "model" / ".cache" / "huggingface" / "download" / "config.json.metadata"
    state_files = [{"name": "model_revision", "path": str(metadata), "first_line": True}]
    plan, failed = run_module(rollout_plan.main, dict(args, components={"collection": "a" * 64}, state_files=state_files))
    assert not failed and plan["cutover"]
    metadata.parent.mkdir(parents=True)
    metadata.write_text("0123456789abcdef0123456789abcdef01234567\netag\n1733300000.0\n")
    result, failed = run_module(rollout_plan.main, dict(args, components=plan["components"], state_files=state_files, mode="record",
                                                        deployment_id=deployment_id))
    assert not failed and result["changed"]
    assert result["components"]["state_model_revision"] != plan["components"]["state_model_revision"]
    # The next plan (a new download timestamp on line 3 changes nothing) is unchanged.
    metadata.write_text("0123456789abcdef0123456789abcdef01234567\netag\n1733309999.0\n")
    again, failed = run_module(rollout_plan.main, dict(args, components={"collection": "a" * 64}, state_files=state_files))
    assert not failed and not again["cutover"], again["reasons"]


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


def answer_is_active(printed, system="running\n"):
    """A run_command stand-in that answers `systemctl is-active` with ``printed`` (a string, or a list answered in turn,
    the last one from then on) and `systemctl is-system-running` with ``system`` (and refuses anything else)."""
    answers = list(printed) if isinstance(printed, list) else [printed]

    def run_command(_module, args, **_kwargs):
        if args == ["systemctl", "is-system-running"]:
            return (0 if system.strip() == "running" else 1), system, ""
        assert args[:2] == ["systemctl", "is-active"] and args[-1] == "sglang-qwen36.service", args
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return (0 if answer.strip() == "active" else 3), answer, ""
    return mock.patch.object(AnsibleModule, "run_command", autospec=True, side_effect=run_command)


def test_a_unit_that_is_not_active_goes_through_the_cutover(deployed):
    args, deployment_id = deployed
    run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    with answer_is_active("active\n"):
        assert not run_module(rollout_plan.main, dict(args, check_unit=True))[0]["cutover"]
    for printed, shown in (("inactive\n", "inactive"), ("failed\n", "failed"), ("", "unknown")):
        with answer_is_active(printed):
            result, failed = run_module(rollout_plan.main, dict(args, check_unit=True))
        assert not failed and result["cutover"]
        assert result["reasons"] == ["the unit sglang-qwen36.service is %s, not active" % shown]


def test_a_unit_still_starting_after_a_container_restart_is_waited_for_not_cut_over(deployed):
    # The run (re)started the container just before its plan: the unit is still queued by the boot, then activating
    # (its ExecStartPre), then active. That is the recorded deployment coming back, not a reason to cut over.
    args, deployment_id = deployed
    run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id))
    with answer_is_active(["inactive\n", "activating\n", "activating\n", "active\n"], system="starting\n"):
        result, failed = run_module(rollout_plan.main, dict(args, check_unit=True))
    assert not failed and not result["cutover"] and result["reasons"] == [], result
    # A unit that stays activating is waited for only so long, and said so.
    with answer_is_active("activating\n"):
        result, failed = run_module(rollout_plan.main, dict(args, check_unit=True, unit_settle_timeout=1.2))
    assert result["cutover"]
    assert result["reasons"][0].startswith("the unit sglang-qwen36.service is activating, not active (after waiting "), result
    # Inactive on a container whose boot is over is not waited for: the unit is down.
    with answer_is_active("inactive\n", system="degraded\n"):
        result, failed = run_module(rollout_plan.main, dict(args, check_unit=True))
    assert result["reasons"] == ["the unit sglang-qwen36.service is inactive, not active"]


def test_state_files_are_read_by_the_module_and_digested_as_components(deployed, tmp_path):
    args, deployment_id = deployed
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    metadata = tmp_path / "config.json.metadata"
    metadata.write_text("8a1e6f0c3d9b\n\"etag\"\n1764547200.1\n")
    files = [{"name": "node_driver", "path": str(driver)},
             {"name": "model_revision", "path": str(metadata), "first_line": True}]
    # COMPONENTS already names state_model_revision (the filter's state): the module refuses the same name twice.
    result, failed = run_module(rollout_plan.main, dict(args, state_files=files))
    assert failed and "cannot name a state component" in result["msg"], result
    given = dict((name, value) for name, value in COMPONENTS.items() if not name.startswith("state_"))
    args = dict(args, components=given)
    result, failed = run_module(rollout_plan.main, dict(args, state_files=files))
    assert not failed, result
    components = result["components"]
    assert set(components) == set(given) | {"state_node_driver", "state_model_revision"}
    run_module(rollout_plan.main, dict(args, mode="record", deployment_id=deployment_id, components=components))
    assert not run_module(rollout_plan.main, dict(args, state_files=files))[0]["cutover"]
    # A new download time with the same commit is the same deployment; a new commit is not.
    metadata.write_text("8a1e6f0c3d9b\n\"etag\"\n1764633600.7\n")
    assert not run_module(rollout_plan.main, dict(args, state_files=files))[0]["cutover"]
    metadata.write_text("0b7c2d41ee10\n\"etag\"\n1764633600.7\n")
    result = run_module(rollout_plan.main, dict(args, state_files=files))[0]
    assert result["cutover"] and result["changed_components"] == ["state_model_revision"]
    metadata.write_text("8a1e6f0c3d9b\n")
    # A driver upgrade on the node, a driver file gone, or something else in its place: each is a change.
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Release Build\n")
    assert run_module(rollout_plan.main, dict(args, state_files=files))[0]["changed_components"] == ["state_node_driver"]
    driver.unlink()
    assert run_module(rollout_plan.main, dict(args, state_files=files))[0]["changed_components"] == ["state_node_driver"]
    os.mkfifo(driver)
    result, failed = run_module(rollout_plan.main, dict(args, state_files=files))
    assert not failed and result["changed_components"] == ["state_node_driver"]


def test_a_huge_state_file_is_read_only_up_to_its_limit(deployed, tmp_path):
    args, _deployment_id = deployed
    given = dict((name, value) for name, value in COMPONENTS.items() if not name.startswith("state_"))
    huge = tmp_path / "huge"
    with open(huge, "wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    files = [{"name": "node_driver", "path": str(huge)}]
    with mock.patch.object(atomic_file, "read_regular", wraps=atomic_file.read_regular) as read:
        result, failed = run_module(rollout_plan.main, dict(args, components=given, state_files=files))
    assert not failed and "state_node_driver" in result["components"]
    assert read.call_args.kwargs["max_bytes"] == 65536
