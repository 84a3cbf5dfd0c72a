from __future__ import annotations

import json
import os
import re
import shutil
import stat

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.modules import deployment_record
from ansible_collections.llmops.serving.tests.unit.fakes import INVOCATION, MAIN_PID, UNIT, FakeProc, FakeSystemctl, show_text
from ansible_collections.llmops.serving.tests.unit.lock_holder import hold_lock, release
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


# -- a record that is not one, interrupted runs, two runs at once (issue #12) ---------------------------------------


def record_file(tmp_path):
    return tmp_path / "state" / "qwen36" / "deployment.json"


def corrupt_copies(tmp_path):
    return sorted(record_file(tmp_path).parent.glob("deployment.json.corrupt-*"))


def two_deployments(deployment):
    """Record deployment A, then B (a changed unit); their IDs."""
    args, unit = deployment[0], deployment[1]
    first = run_module(deployment_record.main, args)[0]["deployment_id"]
    unit.write_text("[Service]\nExecStart=/b\n")
    second = run_module(deployment_record.main, args)[0]["deployment_id"]
    return first, second


def test_a_truncated_record_is_set_aside_and_the_run_fails_saying_what_was_lost(deployment, tmp_path):
    args = deployment[0]
    first, second = two_deployments(deployment)
    path = record_file(tmp_path)
    truncated = path.read_bytes()[:40]
    path.write_bytes(truncated)

    result, failed = run_module(deployment_record.main, args)
    assert failed, "a corrupt record must not be replaced in silence: it holds the previous deployment ID"
    (aside,) = corrupt_copies(tmp_path)
    assert aside.read_bytes() == truncated and not path.exists()
    assert re.fullmatch(r"deployment\.json\.corrupt-\d{8}T\d{6}Z", aside.name)
    msg = result["msg"]
    assert msg.startswith(f"the deployment record {path} is not JSON (")
    assert f"moved aside to {aside}" in msg and "rollback history" in msg
    # The archive's deployments, newest first, so the operator can still restore one by its ID.
    assert msg.index(second) < msg.index(first)
    assert "run the deployment again" in msg and "sglang_service_rollback_to" in msg

    # What the message promises: running again records the current deployment afresh, with no previous one.
    again, failed = run_module(deployment_record.main, args)
    assert not failed and again["changed"]
    assert again["deployment_id"] == second and again["record"]["previous_deployment_id"] is None
    assert corrupt_copies(tmp_path) == [aside]


@pytest.mark.parametrize("text, found", [
    ("[]", "is a list, not an object"),
    ('"deployment"', "is a string, not an object"),
    ("null", "is null, not an object"),
    ("5", "is a number, not an object"),
    ('{"deployment_id": 5}', "is not a record: its deployment_id is a number, not a deployment ID"),
    ('{"previous_deployment_id": null}', "is not a record: its deployment_id is null, not a deployment ID"),
    ('{"deployment_id": "%s", "previous_deployment_id": ["x"]}' % ("a" * 64), "its previous_deployment_id is a list"),
    ('{"deployment_id": "%s", "inputs": "x"}' % ("a" * 64), "its inputs are a string, not an object"),
    ('{"deployment_id": "%s\\n"}' % ("a" * 64), "its deployment_id is '%s\\n', not a deployment ID" % ("a" * 64)),
    (b"\xff\xfe{", "is not JSON"),
])
def test_a_record_of_the_wrong_type_fails_cleanly_naming_what_was_found(deployment, tmp_path, text, found):
    args = deployment[0]
    run_module(deployment_record.main, args)
    path = record_file(tmp_path)
    data = text if isinstance(text, bytes) else text.encode()
    path.write_bytes(data)
    result, failed = run_module(deployment_record.main, args)
    assert failed and result["msg"].startswith(f"the deployment record {path} ")
    assert found in result["msg"] and "moved aside to" in result["msg"]
    (aside,) = corrupt_copies(tmp_path)
    assert aside.read_bytes() == data


def test_check_mode_reports_a_corrupt_record_and_moves_nothing(deployment, tmp_path):
    args = deployment[0]
    run_module(deployment_record.main, args)
    path = record_file(tmp_path)
    path.write_text("{")
    result, failed = run_module(deployment_record.main, args, check_mode=True)
    assert failed and "is not JSON" in result["msg"]
    assert f"a real run moves it aside to {path}.corrupt-<UTC time>" in result["msg"]
    assert path.read_text() == "{" and corrupt_copies(tmp_path) == []


@pytest.mark.parametrize("make, found", [
    (lambda path: path.mkdir(), "a directory"),
    (lambda path: path.symlink_to(path.parent / "elsewhere.json"), "a symbolic link"),
])
def test_something_else_than_a_file_at_the_record_path_fails_naming_it_and_is_left_alone(deployment, tmp_path, make, found):
    args = deployment[0]
    path = record_file(tmp_path)
    path.parent.mkdir(parents=True)
    (path.parent / "elsewhere.json").write_text(json.dumps({"deployment_id": "a" * 64}))
    make(path)
    result, failed = run_module(deployment_record.main, args)
    assert failed
    assert result["msg"] == f"{path} is {found}, not a deployment record (a regular file): move it out of the way, then run again"
    assert os.path.lexists(path) and corrupt_copies(tmp_path) == []
    assert not (tmp_path / "etc" / "deployment.env").exists()


def test_the_staging_directories_of_an_interrupted_run_are_removed_by_the_next_run(deployment, tmp_path, monkeypatch):
    args, unit = deployment[0], deployment[1]
    run_module(deployment_record.main, args)
    unit.write_text("[Service]\nExecStart=/b\n")
    real_copy = shutil.copyfile
    copies = []

    def copy_then_crash(src, dst):
        copies.append(src)
        if len(copies) == 2:
            raise OSError(28, "No space left on device")
        return real_copy(src, dst)

    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, message: warnings.append(message))
    monkeypatch.setattr(deployment_record.shutil, "copyfile", copy_then_crash)
    result, failed = run_module(deployment_record.main, args)
    assert failed and "No space left on device" in result["msg"]
    archive_root = tmp_path / "state" / "qwen36" / "deployments"
    interrupted = result["deployment_id"] + ".partial"
    assert interrupted in os.listdir(archive_root)
    monkeypatch.setattr(deployment_record.shutil, "copyfile", real_copy)
    assert warnings == []

    # A staging directory of an even older crash, under another ID.
    older = archive_root / ("c" * 64 + ".partial")
    older.mkdir()
    (older / "00-sglang-qwen36.service").write_text("half")
    result, failed = run_module(deployment_record.main, args)
    assert not failed and result["changed"]
    assert result["pruned_partial"] == sorted([interrupted, older.name])
    assert [name for name in os.listdir(archive_root) if name.endswith(".partial")] == []
    assert warnings == ["removed the unfinished archives of an interrupted run: " + ", ".join(result["pruned_partial"])]


def test_a_run_waits_for_another_one_and_fails_naming_its_pid_when_the_wait_is_over(deployment, tmp_path):
    args = deployment[0]
    run_module(deployment_record.main, args)
    before = record_file(tmp_path).read_bytes()
    lock = tmp_path / "state" / "qwen36" / "deployment.lock"
    holder = hold_lock(lock)
    try:
        deployment[1].write_text("[Service]\nExecStart=/b\n")
        result, failed = run_module(deployment_record.main, dict(args, lock_timeout=1))
        assert failed
        assert result["msg"] == (
            f"another run is recording or restoring a deployment of instance qwen36: {lock} is locked by another run "
            f"(PID {holder.pid}), still after 1 s. Two runs at once would interleave their writes to the record and the "
            "archive; let the other run finish (or raise lock_timeout), then run again.")
        assert record_file(tmp_path).read_bytes() == before
    finally:
        release(holder)
    result, failed = run_module(deployment_record.main, dict(args, lock_timeout=1))
    assert not failed and result["changed"]


# --------------------------------------------------------------------------- what the unit runs (option unit)

def _run_with_unit(args, systemctl, check_mode=False):
    return systemctl.run_module(deployment_record.main, dict(args, unit=UNIT), check_mode=check_mode)


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    proc = FakeProc(tmp_path / "proc")
    monkeypatch.setattr(procfs, "PROC_ROOT", str(proc.root))
    return proc


def test_a_run_killed_between_record_and_restart_leaves_a_restart_the_next_run_sees(deployment, fake_proc):
    """The record was written by a run that died before its handler restarted the unit: the next run's record is
    unchanged, and only what runs (the old deployment's process) says that the unit must restart."""
    args, unit, env = deployment
    first, failed = run_module(deployment_record.main, args)
    assert not failed
    unit.write_text("[Service]\nExecStart=/y\n")
    recorded, failed = run_module(deployment_record.main, args)
    assert not failed and recorded["changed"]
    # The run died here: the unit still runs the first deployment.
    fake_proc.add_process(MAIN_PID, ["/opt/sglang/bin/python", "-m", "sglang.launch_server"],
                          environ={"LLMOPS_DEPLOYMENT_ID": first["deployment_id"], "SGLANG_API_KEY": "topsecret"})
    result, failed = _run_with_unit(args, FakeSystemctl(show_text()))
    assert not failed, result.get("msg")
    assert not result["changed"] and result["deployment_id"] == recorded["deployment_id"]
    assert result["restart_needed"] is True
    assert result["running"] == dict(active_state="active", sub_state="running", main_pid=MAIN_PID,
                                     invocation_id=INVOCATION, deployment_id=first["deployment_id"])
    assert "topsecret" not in json.dumps(result)
    # Check mode reads the same and writes nothing.
    checked, failed = _run_with_unit(args, FakeSystemctl(show_text()), check_mode=True)
    assert not failed and checked["restart_needed"] is True and not checked["changed"]


def test_a_unit_that_runs_the_recorded_deployment_needs_no_restart(deployment, fake_proc):
    args, unit, env = deployment
    recorded, failed = run_module(deployment_record.main, args)
    assert not failed
    fake_proc.add_process(MAIN_PID, ["sglang"], environ={"LLMOPS_DEPLOYMENT_ID": recorded["deployment_id"]})
    systemctl = FakeSystemctl(show_text())
    result, failed = _run_with_unit(args, systemctl)
    assert not failed and not result["changed"] and result["restart_needed"] is False
    assert systemctl.commands[0][-1] == UNIT


@pytest.mark.parametrize("show, environ", [
    # Stopped or failed: starting the unit is enough, there is nothing to replace.
    (show_text(ActiveState="inactive", SubState="dead", MainPID="0", InvocationID=""), None),
    (show_text(ActiveState="failed", SubState="failed", MainPID="0", Result="exit-code"), None),
])
def test_a_unit_without_a_process_needs_a_start_not_a_restart(deployment, fake_proc, show, environ):
    args, unit, env = deployment
    result, failed = _run_with_unit(args, FakeSystemctl(show))
    assert not failed and result["restart_needed"] is False
    assert result["running"]["main_pid"] == 0 and result["running"]["deployment_id"] is None


def test_a_process_without_a_deployment_id_is_not_this_deployment(deployment, fake_proc):
    """A unit whose main process carries no LLMOPS_DEPLOYMENT_ID (started by something else than this collection's
    launcher, or gone between systemctl and /proc) cannot be serving what was recorded."""
    args, unit, env = deployment
    fake_proc.add_process(MAIN_PID, ["python3", "-m", "http.server"], environ={"PATH": "/usr/bin"})
    result, failed = _run_with_unit(args, FakeSystemctl(show_text(ActiveState="activating", SubState="start")))
    assert not failed and result["restart_needed"] is True and result["running"]["deployment_id"] is None


def test_systemctl_failing_is_named_and_nothing_is_recorded(deployment, fake_proc):
    args, unit, env = deployment
    result, failed = _run_with_unit(args, FakeSystemctl((1, "", "Failed to connect to bus: No such file or directory")))
    assert failed and UNIT in result["msg"] and "Failed to connect to bus" in result["msg"]
    assert not os.path.exists(os.path.join(args["state_dir"], "qwen36", "deployment.json"))


def test_without_unit_nothing_about_it_is_read(deployment):
    args, unit, env = deployment
    result, failed = run_module(deployment_record.main, args)
    assert not failed and result["running"] is None and result["restart_needed"] is False
