from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import deployment_record, deployment_restore
from ansible_collections.llmops.serving.tests.unit.lock_holder import hold_lock, release
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

SECRET_A = "SGLANG_API_KEY=topsecret-a\n"
SECRET_B = "SGLANG_API_KEY=topsecret-b\nHF_TOKEN=hf-secret-b\n"


class Fleet:
    """One instance's files under tmp_path, recorded with deployment_record and restored with deployment_restore."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.unit = tmp_path / "etc" / "systemd" / "sglang-qwen36.service"
        self.launcher = tmp_path / "libexec" / "sglang-launch"
        self.pruner = tmp_path / "libexec" / "sglang-prune-logs"
        self.server_env = tmp_path / "etc" / "qwen36" / "server.env"
        self.deployment_env = tmp_path / "etc" / "qwen36" / "deployment.env"
        self.state_dir = tmp_path / "state"
        self.record_path = self.state_dir / "qwen36" / "deployment.json"

    @property
    def managed(self):
        return [self.unit, self.launcher, self.pruner, self.server_env]

    def write(self, unit, launcher, launcher_mode, env, env_mode):
        for path, text, mode in ((self.unit, unit, 0o644), (self.launcher, launcher, launcher_mode),
                                 (self.pruner, "#!/bin/sh\nfind \"$1\" -delete\n", 0o755), (self.server_env, env, env_mode)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(mode)

    def files(self):
        """{path: (bytes, mode)} of the managed files."""
        return {str(p): (p.read_bytes(), stat.S_IMODE(os.stat(p).st_mode)) for p in self.managed}

    def record_args(self, revision, **inputs):
        return {
            "instance": "qwen36",
            "files": [str(self.unit), str(self.launcher), str(self.pruner)],
            "env_files": [str(self.server_env)],
            "inputs": dict({"model_path": "/models/Qwen3.6-27B", "model_revision": revision, "versions": {"sglang": "0.5.23"}},
                           **inputs),
            "state_dir": str(self.state_dir),
            "env_file": str(self.deployment_env),
        }

    def restore_args(self, **extra):
        return dict({"instance": "qwen36", "state_dir": str(self.state_dir), "env_file": str(self.deployment_env)}, **extra)

    def deploy_a(self, **inputs):
        self.write("[Service]\nExecStart=/a\n", "#!/bin/sh\nexec a\n", 0o755, SECRET_A, 0o600)
        result, failed = run_module(deployment_record.main, self.record_args("r1", **inputs))
        assert not failed and result["changed"]
        return result["deployment_id"]

    def deploy_b(self, **inputs):
        # B changes the unit and the launcher's content and mode, adds a secret variable and loosens the env file's mode.
        self.write("[Service]\nExecStart=/b\n", "#!/bin/sh\nexec b\n", 0o700, SECRET_B, 0o644)
        result, failed = run_module(deployment_record.main, self.record_args("r2", **inputs))
        assert not failed and result["changed"]
        return result["deployment_id"]

    def snapshot(self):
        """Every file under tmp_path with its content and mode, to prove that nothing was written. The lock file is
        left out: a run that writes takes it (and writes its PID into it) before it knows whether it will write."""
        found = {}
        for root, _dirs, names in os.walk(self.tmp_path):
            for name in names:
                if name == "deployment.lock":
                    continue
                path = os.path.join(root, name)
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as handle:
                        found[path] = (handle.read(), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
                else:
                    # A FIFO or a link the test put there: its kind and target, never opened.
                    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
                    found[path] = (stat.S_IFMT(st.st_mode), target, st.st_mtime_ns)
        return found


@pytest.fixture
def fleet(tmp_path):
    return Fleet(tmp_path)


def test_restore_puts_back_a_byte_for_byte_and_a_rerun_changes_nothing(fleet):
    id_a = fleet.deploy_a()
    files_a = fleet.files()
    id_b = fleet.deploy_b()
    assert id_a != id_b and fleet.files() != files_a

    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert not failed, result["msg"]
    assert result["changed"]
    assert result["deployment_id"] == id_a and result["rolled_back_from"] == id_b
    assert sorted(result["restored_files"]) == sorted([str(fleet.unit), str(fleet.launcher), str(fleet.server_env)])
    assert result["archive"] == str(fleet.state_dir / "qwen36" / "deployments" / id_a)
    assert result["notes"] == []

    assert fleet.files() == files_a
    assert stat.S_IMODE(os.stat(fleet.server_env).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(fleet.launcher).st_mode) == 0o755

    record = json.loads(fleet.record_path.read_text())
    assert record == result["record"]
    assert record["deployment_id"] == id_a
    assert record["previous_deployment_id"] == id_b and record["rolled_back_from"] == id_b
    assert record["inputs"] == fleet.record_args("r1")["inputs"]
    assert fleet.deployment_env.read_text() == (
        f"# Written by llmops.serving.deployment_record; loaded by the unit.\nLLMOPS_DEPLOYMENT_ID={id_a}\nLLMOPS_INSTANCE=qwen36\n"
    )
    leftovers = [name for root, _d, names in os.walk(fleet.tmp_path) for name in names if name.startswith(".tmp-")]
    assert leftovers == []

    again, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert not failed and not again["changed"]
    assert again["restored_files"] == [] and again["rolled_back_from"] is None
    assert "already on deployment " + id_a in again["msg"] and "nothing to restore" in again["msg"]

    # What deployment_record computes from A's files and inputs is exactly the restored record: it changes nothing.
    rerun, failed = run_module(deployment_record.main, fleet.record_args("r1"))
    assert not failed and not rerun["changed"]
    assert rerun["deployment_id"] == id_a and rerun["record"] == record
    assert json.loads(fleet.record_path.read_text()) == record


def test_deploying_again_after_a_rollback_chains_and_rolls_back_to_the_restored_one(fleet):
    id_a = fleet.deploy_a()
    id_b = fleet.deploy_b()
    run_module(deployment_restore.main, fleet.restore_args())
    id_b_again = fleet.deploy_b()
    assert id_b_again == id_b
    record = json.loads(fleet.record_path.read_text())
    assert record["previous_deployment_id"] == id_a and "rolled_back_from" not in record
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert not failed and result["changed"] and result["deployment_id"] == id_a and result["rolled_back_from"] == id_b


def test_a_requested_deployment_is_restored_instead_of_the_previous_one(fleet):
    id_a = fleet.deploy_a()
    files_a = fleet.files()
    fleet.deploy_b()
    fleet.write("[Service]\nExecStart=/c\n", "#!/bin/sh\nexec c\n", 0o755, SECRET_A, 0o600)
    id_c = run_module(deployment_record.main, fleet.record_args("r3"))[0]["deployment_id"]
    result, failed = run_module(deployment_restore.main, fleet.restore_args(deployment_id=id_a))
    assert not failed and result["deployment_id"] == id_a and result["rolled_back_from"] == id_c
    assert fleet.files() == files_a


def test_a_drifted_file_of_the_current_deployment_is_put_back_without_touching_the_record(fleet):
    fleet.deploy_a()
    id_b = fleet.deploy_b()
    files_b = fleet.files()
    record_before = fleet.record_path.read_bytes()
    fleet.unit.write_text("[Service]\nExecStart=/edited-by-hand\n")
    result, failed = run_module(deployment_restore.main, fleet.restore_args(deployment_id=id_b))
    assert not failed and result["changed"] and result["rolled_back_from"] is None
    # B's env file was 0644 on disk when it was recorded; the archive keeps secrets 0600, and so does the restore.
    assert result["restored_files"] == [str(fleet.unit), str(fleet.server_env)]
    files_b[str(fleet.server_env)] = (files_b[str(fleet.server_env)][0], 0o600)
    assert fleet.files() == files_b
    assert fleet.record_path.read_bytes() == record_before


def test_check_mode_writes_nothing_and_tells_the_truth(fleet):
    id_a = fleet.deploy_a()
    id_b = fleet.deploy_b()
    before = fleet.snapshot()
    result, failed = run_module(deployment_restore.main, fleet.restore_args(), check_mode=True)
    assert not failed and result["changed"]
    assert result["deployment_id"] == id_a and result["rolled_back_from"] == id_b
    assert len(result["restored_files"]) == 3 and "would restore" in result["msg"]
    assert result["record"]["deployment_id"] == id_a
    assert fleet.snapshot() == before


def test_diff_shows_the_record_and_lists_paths_but_no_contents(fleet):
    id_a = fleet.deploy_a()
    id_b = fleet.deploy_b()
    result, failed = run_module(deployment_restore.main, fleet.restore_args(), check_mode=True, diff=True)
    assert not failed
    record_diff, files_diff = result["diff"]
    assert json.loads(record_diff["before"])["deployment_id"] == id_b
    assert json.loads(record_diff["after"])["deployment_id"] == id_a
    listed = [line.split(" (")[0] for line in files_diff["after"].splitlines()]
    assert sorted(listed) == sorted(result["restored_files"])
    assert f"{fleet.server_env} (content, mode -> 0600)" in files_diff["after"]


@pytest.mark.parametrize("check_mode, diff", [(False, False), (True, True), (False, True)])
def test_no_secret_value_ever_reaches_the_result(fleet, check_mode, diff):
    fleet.deploy_a()
    fleet.deploy_b()
    result, failed = run_module(deployment_restore.main, fleet.restore_args(), check_mode=check_mode, diff=diff)
    assert not failed
    serialised = json.dumps(result)
    for secret in ("topsecret-a", "topsecret-b", "hf-secret-b"):
        assert secret not in serialised


def test_a_pruned_archive_fails_naming_the_directory_and_the_keep_setting(fleet):
    id_a = fleet.deploy_a()
    fleet.deploy_b()
    archive = fleet.state_dir / "qwen36" / "deployments" / id_a
    shutil.rmtree(archive)
    before = fleet.snapshot()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed
    assert str(archive) in result["msg"] and "sglang_service_deployment_history" in result["msg"] and "pruned" in result["msg"]
    assert fleet.snapshot() == before


def test_the_first_deployment_has_nothing_to_roll_back_to(fleet):
    id_a = fleet.deploy_a()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed
    assert f"current deployment {id_a} is the first recorded one" in result["msg"] and "nothing to roll back to" in result["msg"]


def test_no_record_fails_and_says_so(fleet):
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and f"no deployment record at {fleet.record_path}" in result["msg"]


def test_an_unreadable_manifest_fails_and_writes_nothing(fleet):
    id_a = fleet.deploy_a()
    fleet.deploy_b()
    manifest = fleet.state_dir / "qwen36" / "deployments" / id_a / "manifest.json"
    manifest.write_text("{truncated")
    before = fleet.snapshot()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and f"the manifest {manifest} is unreadable" in result["msg"]
    assert fleet.snapshot() == before


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_manifest_that_is_not_a_regular_file_fails_at_once_and_writes_nothing(fleet, tmp_path, kind):
    id_a = fleet.deploy_a()
    fleet.deploy_b()
    manifest = fleet.state_dir / "qwen36" / "deployments" / id_a / "manifest.json"
    good = manifest.read_text()
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    else:
        # A readable, valid manifest elsewhere: a link to it is still not the archive's own file.
        (tmp_path / "elsewhere.json").write_text(good)
        manifest.symlink_to(tmp_path / "elsewhere.json")
    before = fleet.snapshot()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and f"the manifest {manifest} is unreadable" in result["msg"]
    assert fleet.snapshot() == before


def test_an_archived_file_that_is_gone_fails_before_anything_is_written(fleet):
    id_a = fleet.deploy_a()
    fleet.deploy_b()
    archive = fleet.state_dir / "qwen36" / "deployments" / id_a
    (archive / json.loads((archive / "manifest.json").read_text())["files"][1]["archived"]).unlink()
    before = fleet.snapshot()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and f"the archive {archive} is incomplete" in result["msg"]
    assert fleet.snapshot() == before


def test_an_old_manifest_without_inputs_still_restores_with_empty_inputs_and_a_note(fleet):
    id_a = fleet.deploy_a()
    files_a = fleet.files()
    fleet.deploy_b()
    manifest_path = fleet.state_dir / "qwen36" / "deployments" / id_a / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({"files": manifest["files"]}))
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert not failed and result["changed"]
    assert fleet.files() == files_a
    assert result["record"]["inputs"] == {}
    assert len(result["notes"]) == 1 and "predates stored inputs" in result["notes"][0]
    # The deployment ID comes from the files, so a rerun of deployment_record still finds it and changes nothing.
    rerun, failed = run_module(deployment_record.main, fleet.record_args("r1"))
    assert not failed and not rerun["changed"] and rerun["deployment_id"] == id_a


@pytest.mark.parametrize("bad", ["../x", ".hidden", "a/b"])
def test_rejects_instance_names_that_escape_the_state_dir(fleet, bad):
    result, failed = run_module(deployment_restore.main, fleet.restore_args(instance=bad))
    assert failed and "not a valid instance name" in result["msg"]


def test_rejects_a_deployment_id_that_is_not_one(fleet):
    fleet.deploy_a()
    fleet.deploy_b()
    result, failed = run_module(deployment_restore.main, fleet.restore_args(deployment_id="../../../etc"))
    assert failed and "is not a deployment ID" in result["msg"]


# -- a record that is not one, two runs at once (issue #12) ---------------------------------------------------------


def test_a_corrupt_record_is_set_aside_and_the_restore_fails_saying_how_to_go_on(fleet):
    id_a = fleet.deploy_a()
    id_b = fleet.deploy_b()
    files_b = fleet.files()
    fleet.record_path.write_text('{"deployment_id": "%s", "previous_deployment_id": "%s"' % (id_b, id_a))
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed
    (aside,) = fleet.record_path.parent.glob("deployment.json.corrupt-*")
    assert not fleet.record_path.exists()
    assert result["msg"].startswith(f"the deployment record {fleet.record_path} is not JSON (")
    assert f"moved aside to {aside}" in result["msg"] and id_a in result["msg"] and id_b in result["msg"]
    assert fleet.files() == files_b, "nothing is restored on a guess"

    # The way on that the message names: record the current deployment afresh, then restore by ID.
    rerun, failed = run_module(deployment_record.main, fleet.record_args("r2"))
    assert not failed and rerun["deployment_id"] == id_b and rerun["record"]["previous_deployment_id"] is None
    result, failed = run_module(deployment_restore.main, fleet.restore_args(deployment_id=id_a))
    assert not failed and result["deployment_id"] == id_a and result["rolled_back_from"] == id_b


@pytest.mark.parametrize("text, found", [
    ("[1, 2]", "is a list, not an object"),
    ('{"deployment_id": null}', "its deployment_id is null, not a deployment ID"),
])
def test_a_record_of_the_wrong_type_fails_cleanly(fleet, text, found):
    fleet.deploy_a()
    fleet.deploy_b()
    fleet.record_path.write_text(text)
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and found in result["msg"] and "moved aside to" in result["msg"]


def test_a_directory_at_the_record_path_fails_naming_it(fleet):
    fleet.deploy_a()
    fleet.record_path.unlink()
    fleet.record_path.mkdir()
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and result["msg"].startswith(f"{fleet.record_path} is a directory, not a deployment record")
    assert fleet.record_path.is_dir()


def test_a_restore_waits_for_a_run_in_progress_and_fails_naming_its_pid(fleet):
    fleet.deploy_a()
    fleet.deploy_b()
    before = fleet.snapshot()
    lock = fleet.state_dir / "qwen36" / "deployment.lock"
    holder = hold_lock(lock)
    try:
        result, failed = run_module(deployment_restore.main, fleet.restore_args(lock_timeout=1))
        assert failed and f"{lock} is locked by another run (PID {holder.pid}), still after 1 s" in result["msg"]
        assert fleet.snapshot() == before
        # Check mode reads only: it waits for a writer as well.
        result, failed = run_module(deployment_restore.main, fleet.restore_args(lock_timeout=0), check_mode=True)
        assert failed and "is locked by another run" in result["msg"]
    finally:
        release(holder)
    result, failed = run_module(deployment_restore.main, fleet.restore_args(lock_timeout=1))
    assert not failed and result["changed"]


def test_without_a_state_directory_a_restore_creates_nothing(fleet):
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert failed and "no deployment record" in result["msg"]
    assert not fleet.state_dir.exists()


# -- the package environment the archived unit runs from ------------------------------------------------------------


def test_a_deployment_whose_package_environment_is_gone_is_not_restored(fleet):
    env_a, env_b = fleet.tmp_path / "envs" / "0.5.9-a41c07e2b9d3", fleet.tmp_path / "envs" / "0.5.23-3f2a9c1b7e0d"
    env_a.mkdir(parents=True)
    env_b.mkdir(parents=True)
    id_a = fleet.deploy_a(package_environment=str(env_a))
    fleet.deploy_b(package_environment=str(env_b))
    env_a.rmdir()
    before = fleet.snapshot()
    for check_mode in (False, True):
        result, failed = run_module(deployment_restore.main, fleet.restore_args(), check_mode=check_mode)
        assert failed and not result.get("changed")
        manifest = fleet.state_dir / "qwen36" / "deployments" / id_a / "manifest.json"
        assert result["msg"].startswith(f"deployment {id_a} cannot be restored: its package environment {env_a} "
                                        f"(package_environment of {manifest}) is not a directory any more")
        assert "deploy SGLang 0.5.23 again" in result["msg"] and "restore another deployment" in result["msg"]
        assert fleet.snapshot() == before

    # A file in its place is no environment either; a symlink to a directory is one.
    env_a.write_text("")
    assert run_module(deployment_restore.main, fleet.restore_args())[1]
    env_a.unlink()
    (fleet.tmp_path / "elsewhere").mkdir()
    env_a.symlink_to(fleet.tmp_path / "elsewhere")
    result, failed = run_module(deployment_restore.main, fleet.restore_args())
    assert not failed and result["changed"] and result["deployment_id"] == id_a
