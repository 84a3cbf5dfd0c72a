from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import deployment_record
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module


@pytest.fixture
def deployment(tmp_path):
    unit = tmp_path / "etc" / "sglang-qwen36.service"
    launcher = tmp_path / "libexec" / "sglang-launch"
    env = tmp_path / "etc" / "server.env"
    for path, text in ((unit, "[Service]\nExecStart=/x\n"), (launcher, "#!/bin/sh\nexec \"$@\"\n"), (env, "SGLANG_API_KEY=topsecret\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env.chmod(0o600)
    args = {
        "instance": "qwen36",
        "files": [str(unit), str(launcher)],
        "env_files": [str(env)],
        "inputs": {"model_path": "/models/Qwen3.6-27B", "model_revision": "r1"},
        "state_dir": str(tmp_path / "state"),
        "env_file": str(tmp_path / "etc" / "deployment.env"),
    }
    return args, unit, env


def test_first_run_records_archives_and_writes_the_env_file(deployment, tmp_path):
    args, unit, env = deployment
    result, failed = run_module(deployment_record.main, args)
    assert not failed and result["changed"]
    deployment_id = result["deployment_id"]
    record = json.loads((tmp_path / "state" / "qwen36" / "deployment.json").read_text())
    assert record["deployment_id"] == deployment_id and record["previous_deployment_id"] is None
    assert (tmp_path / "etc" / "deployment.env").read_text().splitlines()[1] == f"LLMOPS_DEPLOYMENT_ID={deployment_id}"
    archive = tmp_path / "state" / "qwen36" / "deployments" / deployment_id
    manifest = json.loads((archive / "manifest.json").read_text())
    secret_copy = archive / [m["archived"] for m in manifest["files"] if m["secret"]][0]
    assert stat.S_IMODE(os.stat(secret_copy).st_mode) == 0o600
    assert "topsecret" not in json.dumps(result)


def test_rerun_changes_nothing_and_a_changed_part_chains_the_ids(deployment):
    args, unit, env = deployment
    first = run_module(deployment_record.main, args)[0]
    again = run_module(deployment_record.main, args)[0]
    assert not again["changed"]
    assert again["deployment_id"] == first["deployment_id"]
    assert again["record"]["deployed_at"] == first["record"]["deployed_at"]

    env.write_text("SGLANG_API_KEY=rotated\n")
    rotated = run_module(deployment_record.main, args)[0]
    assert not rotated["changed"], "a rotated secret value is not a new deployment"

    unit.write_text("[Service]\nExecStart=/y\n")
    changed = run_module(deployment_record.main, args)[0]
    assert changed["changed"]
    assert changed["record"]["previous_deployment_id"] == first["deployment_id"]
    assert changed["previous_deployment_id"] == first["deployment_id"]


def test_check_mode_writes_nothing_and_diff_shows_the_record(deployment, tmp_path):
    args = deployment[0]
    result, failed = run_module(deployment_record.main, args, check_mode=True, diff=True)
    assert not failed and result["changed"]
    assert result["diff"]["before"] == "" and result["deployment_id"] in result["diff"]["after"]
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "etc" / "deployment.env").exists()


def test_missing_file_fails_outside_check_mode_and_predicts_change_inside(deployment, tmp_path):
    args, unit = deployment[0], deployment[1]
    unit.unlink()
    result, failed = run_module(deployment_record.main, args)
    assert failed and str(unit) in result["msg"]
    result, failed = run_module(deployment_record.main, args, check_mode=True)
    assert not failed and result["changed"] and result["deployment_id"] is None


def test_old_archives_are_pruned_but_current_and_previous_are_kept(deployment, tmp_path):
    args, unit = deployment[0], deployment[1]
    args = dict(args, keep=1)
    ids = []
    for n in range(4):
        unit.write_text(f"[Service]\nExecStart=/v{n}\n")
        result = run_module(deployment_record.main, args)[0]
        ids.append(result["deployment_id"])
    kept = sorted(os.listdir(tmp_path / "state" / "qwen36" / "deployments"))
    assert kept == sorted(ids[-2:])


@pytest.mark.parametrize("bad", ["../x", ".hidden", "a/b"])
def test_rejects_instance_names_that_escape_the_state_dir(deployment, bad):
    args = deployment[0]
    result, failed = run_module(deployment_record.main, dict(args, instance=bad))
    assert failed and "not a valid instance name" in result["msg"]


def test_the_manifest_carries_the_records_id_and_inputs_for_a_restore(deployment, tmp_path):
    args = deployment[0]
    result = run_module(deployment_record.main, args)[0]
    manifest = json.loads((tmp_path / "state" / "qwen36" / "deployments" / result["deployment_id"] / "manifest.json").read_text())
    assert manifest["deployment_id"] == result["deployment_id"]
    assert manifest["inputs"] == args["inputs"] == result["record"]["inputs"]
    assert [entry["path"] for entry in manifest["files"]] == args["files"] + args["env_files"]
