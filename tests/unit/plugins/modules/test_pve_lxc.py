"""pve_lxc against the Proxmox VE simulator (simulators/pve_sim) in --no-lxc mode on 127.0.0.1 (free port): real HTTPS,
real proxmoxer, PVE's validation, tasks with UPIDs. The module runs in-process."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from unittest import mock

import pytest

pytest.importorskip("proxmoxer")

from ansible_collections.llmops.serving.plugins.modules import pve_lxc  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module  # noqa: E402  pylint: disable=wrong-import-position

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "simulators", "pve_sim"))
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.gz"
BROKEN_TEMPLATE = "local:vztmpl/broken-template_1.0_amd64.tar.zst"


def _write_templates(directory):
    os.makedirs(directory, exist_ok=True)
    data = b'ID=debian\n'
    with tarfile.open(os.path.join(directory, TEMPLATE.rsplit("/", maxsplit=1)[-1]), "w:gz") as archive:
        info = tarfile.TarInfo("./etc/os-release")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    # Not an archive at all: the create task fails while extracting it (an HTTP 200 with a UPID, then a failed task).
    with open(os.path.join(directory, BROKEN_TEMPLATE.rsplit("/", maxsplit=1)[-1]), "wb") as handle:
        handle.write(b"this is not a tarball\n")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    state = tmp_path_factory.mktemp("pve-sim-pve-lxc")
    _write_templates(state / "var" / "lib" / "vz" / "template" / "cache")
    env = dict(os.environ, PYTHONPATH=SIM_SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(state / "serve.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pve_sim", "serve", "--state-dir", str(state), "--listen", "127.0.0.1:0", "--no-lxc"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while not (state / "endpoint.json").exists():
            assert proc.poll() is None and time.time() < deadline, (state / "serve.log").read_text()
            time.sleep(0.05)
        time.sleep(0.1)
        endpoint = json.loads((state / "endpoint.json").read_text())
        users = json.loads((state / "users.json").read_text())
        yield {
            "state": state,
            "password": {"api_host": "127.0.0.1", "api_port": endpoint["port"], "api_user": "root@pam",
                         "api_password": users["users"]["root@pam"]["password"], "node": "pve",
                         "ca_path": str(state / "etc" / "pve" / "local" / "pve-ssl.pem")},
            "token": {"api_host": "127.0.0.1", "api_port": endpoint["port"], "api_user": "root@pam", "api_token_id": "ansible",
                      "api_token_secret": users["tokens"]["root@pam!ansible"]["secret"], "node": "pve",
                      "ca_path": str(state / "etc" / "pve" / "local" / "pve-ssl.pem")},
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def args(sim, vmid, auth="password", **extra):
    result = dict(sim[auth], vmid=vmid)
    result.update(extra)
    return result


def conf(sim, vmid):
    path = sim["state"] / "etc" / "pve" / "lxc" / ("%d.conf" % vmid)
    return path.read_text() if path.exists() else None


CONFIG = {"hostname": "sglang", "cores": 2, "memory": 1024, "swap": 0, "features": "nesting=1", "onboot": True,
          "description": "SGLang server\nmanaged by llmops.serving"}


def test_create_check_mode_then_create_then_rerun_is_unchanged(sim):
    module_args = args(sim, 301, ostemplate=TEMPLATE, config=CONFIG)
    result, failed = run_module(pve_lxc.main, module_args, check_mode=True, diff=True)
    assert not failed, result
    assert result["changed"] and result["created"] and result["status"] == "absent"
    assert "cores: 2\n" in result["diff"]["after"] and result["diff"]["before"] == ""
    assert conf(sim, 301) is None

    result, failed = run_module(pve_lxc.main, module_args)
    assert not failed, result
    assert result["changed"] and result["created"] and result["status"] == "stopped" and result["power"] is None
    assert [task["exitstatus"] for task in result["tasks"]] == ["OK"] and ":vzcreate:301:root@pam:" in result["tasks"][0]["upid"]
    text = conf(sim, 301)
    assert text.startswith("#SGLang server\n#managed by llmops.serving\n") and "cores: 2\n" in text and "onboot: 1\n" in text

    result, failed = run_module(pve_lxc.main, module_args)
    assert not failed and not result["changed"] and result["changes"] == [] and result["tasks"] == []


def test_update_sends_only_the_difference_with_diff_and_check_mode(sim):
    base = args(sim, 302, ostemplate=TEMPLATE, config=dict(CONFIG, tags="gpu"))
    assert not run_module(pve_lxc.main, base)[1]
    before = conf(sim, 302)
    changed = args(sim, 302, config={"memory": 2048, "tags": None, "cores": 2})
    result, failed = run_module(pve_lxc.main, changed, check_mode=True, diff=True)
    assert not failed and result["changed"]
    assert result["changes"] == [{"key": "memory", "action": "set", "old": "1024", "new": "2048"},
                                 {"key": "tags", "action": "delete", "old": "gpu", "new": None}]
    assert "memory: 1024\n" in result["diff"]["before"] and "memory: 2048\n" in result["diff"]["after"]
    assert "tags: gpu\n" not in result["diff"]["after"]
    assert conf(sim, 302) == before

    result, failed = run_module(pve_lxc.main, changed)
    assert not failed and result["changed"] and result["config"]["memory"] == "2048" and "tags" not in result["config"]
    assert "memory: 2048\n" in conf(sim, 302) and "tags:" not in conf(sim, 302)
    assert not run_module(pve_lxc.main, changed)[0]["changed"]


def test_power_states_and_absent(sim):
    module_args = args(sim, 303, ostemplate=TEMPLATE, config=CONFIG)
    result, failed = run_module(pve_lxc.main, dict(module_args, state="started"))
    assert not failed and result["created"] and result["power"] == "started" and result["status"] == "running"
    assert [task["upid"].split(":")[5] for task in result["tasks"]] == ["vzcreate", "vzstart"]
    assert not run_module(pve_lxc.main, dict(module_args, state="started"))[0]["changed"]
    result, failed = run_module(pve_lxc.main, dict(module_args, state="restarted"))
    assert not failed and result["changed"] and result["tasks"][0]["upid"].split(":")[5] == "vzreboot"
    result, failed = run_module(pve_lxc.main, dict(module_args, state="stopped"))
    assert not failed and result["power"] == "stopped" and result["status"] == "stopped"
    assert result["tasks"][0]["upid"].split(":")[5] == "vzshutdown"
    result, failed = run_module(pve_lxc.main, dict(module_args, state="absent"), check_mode=True)
    assert not failed and result["changed"] and conf(sim, 303) is not None
    result, failed = run_module(pve_lxc.main, dict(module_args, state="absent"))
    assert not failed and result["changed"] and result["status"] == "absent" and conf(sim, 303) is None
    assert not run_module(pve_lxc.main, dict(module_args, state="absent"))[0]["changed"]


def test_a_failed_create_task_fails_at_once_with_its_exit_status_and_log(sim):
    started = time.monotonic()
    result, failed = run_module(pve_lxc.main, args(sim, 304, ostemplate=BROKEN_TEMPLATE, config=CONFIG, task_timeout=120))
    elapsed = time.monotonic() - started
    assert failed
    assert elapsed < 10, "the failure must not wait for task_timeout (%.1f s)" % elapsed
    assert result["task_exitstatus"].startswith("unable to create CT 304 - ")
    assert result["msg"].startswith("creating CT 304 failed: unable to create CT 304 - ")
    assert result["task_log_tail"][-1].startswith("TASK ERROR: unable to create CT 304")
    assert conf(sim, 304) is None


def vzcreate_tasks(sim, vmid):
    """The create tasks the simulator ran for ``vmid`` (its task logs are named after the UPID, with _ for :)."""
    found = []
    for _directory, _dirs, files in os.walk(sim["state"] / "var" / "log" / "pve" / "tasks"):
        found.extend(name for name in files if "_vzcreate_%d_" % vmid in name)
    return found


def test_a_template_the_storage_does_not_hold_is_refused_before_anything_is_sent(sim):
    missing = "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"
    for check_mode in (True, False):
        result, failed = run_module(pve_lxc.main, args(sim, 308, ostemplate=missing, config=CONFIG),
                                    check_mode=check_mode)
        assert failed, result
        assert result["msg"].startswith(
            "CT 308 on node pve: the container template %s is not on storage 'local' (it holds " % missing)
        assert "'pveam download local debian-13-standard_13.1-2_amd64.tar.zst'" in result["msg"]
        assert TEMPLATE in result["msg"] and result["tasks"] == [] and not result["created"]
    assert conf(sim, 308) is None and vzcreate_tasks(sim, 308) == []
    # Without the check Proxmox takes the create and fails its task (what the module spares the user).
    api_args = args(sim, 308, ostemplate=missing, config=CONFIG)
    with mock.patch.object(pve_lxc, "missing_template", return_value=None):
        result, failed = run_module(pve_lxc.main, api_args)
    assert failed and result["task_exitstatus"] == "unable to create CT 308 - volume '%s' does not exist" % missing
    assert len(vzcreate_tasks(sim, 308)) == 1 and conf(sim, 308) is None


def test_a_template_storage_that_does_not_exist_is_proxmoxs_error(sim):
    module_args = args(sim, 309, ostemplate="nosuch:vztmpl/debian.tar.zst", config=CONFIG)
    result, failed = run_module(pve_lxc.main, module_args, check_mode=True)
    assert failed and result["msg"] == ("Proxmox API error for CT 309 on node pve: GET /nodes/pve/storage/nosuch/content "
                                        "answered 500 Internal Server Error: storage 'nosuch' does not exist")


def test_a_token_may_create_but_never_set_dev_entries(sim):
    module_args = args(sim, 305, auth="token", ostemplate=TEMPLATE, config=CONFIG)
    result, failed = run_module(pve_lxc.main, module_args)
    assert not failed and result["created"]
    result, failed = run_module(pve_lxc.main, dict(module_args, config=dict(CONFIG, dev0="/dev/null")))
    assert failed
    assert result["msg"].startswith("dev[n] passthrough can only be set by root@pam: an API token is never root@pam, even one owned "
                                    "by root@pam (it authenticates as root@pam!ansible); ")
    assert "so dev0 would be refused" in result["msg"] and "Use api_user=root@pam with api_password" in result["msg"]
    assert "dev0" not in conf(sim, 305)
    assert not run_module(pve_lxc.main, args(sim, 305, state="absent"))[1]


def test_missing_template_option_and_unprivileged_change_are_explained(sim):
    result, failed = run_module(pve_lxc.main, args(sim, 306, config=CONFIG))
    assert failed and result["msg"] == "CT 306 does not exist on node pve and ostemplate is not set: give the template to create it from"
    assert not run_module(pve_lxc.main, args(sim, 306, ostemplate=TEMPLATE, config=CONFIG))[1]
    result, failed = run_module(pve_lxc.main, args(sim, 306, config={"unprivileged": False}))
    assert failed and "option 'unprivileged' is 1 on the existing container and cannot change after creation" in result["msg"]


def test_api_errors_and_bad_credentials_name_the_cause(sim):
    result, failed = run_module(pve_lxc.main, args(sim, 307, ostemplate=TEMPLATE, config={"cores": "many"}))
    assert failed and result["msg"] == ("Proxmox API error for CT 307 on node pve: POST /nodes/pve/lxc (create CT 307) "
                                        "answered 400 Bad Request: Parameter verification failed. - cores: type check "
                                        "('integer') failed - got 'many'")
    result, failed = run_module(pve_lxc.main, dict(args(sim, 307, config=CONFIG), api_password="wrong"))
    assert failed and result["msg"].startswith("authentication to the Proxmox API at https://127.0.0.1:%d as root@pam failed" % sim["password"]["api_port"])
    assert "wrong" not in json.dumps(result)
