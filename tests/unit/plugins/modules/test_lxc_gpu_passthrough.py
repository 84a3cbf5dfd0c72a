from __future__ import annotations

import os
import re
import socket
import stat
from unittest import mock

import pytest
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import lxc_passthrough, lxc_passthrough_file, pve_api
from ansible_collections.llmops.serving.plugins.modules import lxc_gpu_passthrough
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_pve_lxc_config import (
    JELLYFIN_DEV_FRAGMENT,
    QUICKPOD_6006_CONF,
    changed_lines,
)

DEVICES_UVM_508 = [
    {"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"},
    {"path": "/dev/nvidiactl", "major": 195, "minor": 255, "type": "c"},
    {"path": "/dev/nvidia-modeset", "major": 195, "minor": 254, "type": "c"},
    {"path": "/dev/nvidia-uvm", "major": 508, "minor": 0, "type": "c"},
    {"path": "/dev/nvidia-uvm-tools", "major": 508, "minor": 1, "type": "c"},
    {"path": "/dev/nvidia-caps/nvidia-cap1", "major": 235, "minor": 1, "type": "c"},
    {"path": "/dev/nvidia-caps/nvidia-cap2", "major": 235, "minor": 2, "type": "c"},
]


class FakePct:
    """Stands in for run_command/get_bin_path: answers pct the way Proxmox does and records the calls."""

    def __init__(self, status="running", config_text="", fail=None):
        self.status = status
        self.config_text = config_text
        self.fail = fail or {}
        self.calls = []

    def run_command(self, _module, args, **_kwargs):
        args = list(args)
        self.calls.append(args)
        verb = args[1]
        if verb in self.fail:
            return self.fail[verb]
        if verb == "status":
            return 0, "status: %s\n" % self.status, ""
        if verb == "config":
            return 0, self.config_text, ""
        if verb in ("set", "reboot"):
            return 0, "", ""
        raise AssertionError("unexpected command %r" % args)

    def get_bin_path(self, _module, name, required=False, opt_dirs=None):
        return "/usr/sbin/pct" if name == "pct" else None

    def verbs(self):
        return [call[1] for call in self.calls]


@pytest.fixture
def node_dir(tmp_path):
    config_dir = tmp_path / "etc-pve-lxc"
    config_dir.mkdir()
    conf = config_dir / "6006.conf"
    conf.write_text(QUICKPOD_6006_CONF)
    conf.chmod(0o640)
    lock_dir = tmp_path / "run-lock-lxc"
    lock_dir.mkdir()
    return config_dir, conf, lock_dir


def file_args(config_dir, lock_dir, **extra):
    args = {"vmid": 6006, "devices": DEVICES_UVM_508, "style": "raw", "backend": "file", "config_dir": str(config_dir),
            "lock_dir": str(lock_dir), "cgroup_version": "v2"}
    args.update(extra)
    return args


@pytest.fixture
def pct():
    fake = FakePct()
    with mock.patch.object(AnsibleModule, "run_command", autospec=True, side_effect=fake.run_command), \
            mock.patch.object(AnsibleModule, "get_bin_path", autospec=True, side_effect=fake.get_bin_path):
        yield fake


@pytest.fixture
def no_pct():
    with mock.patch.object(AnsibleModule, "get_bin_path", autospec=True, return_value=None), \
            mock.patch.object(AnsibleModule, "run_command", autospec=True, side_effect=AssertionError("no command expected")):
        yield


def test_file_backend_check_mode_with_diff_changes_nothing(node_dir, pct):
    config_dir, conf, lock_dir = node_dir
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir), check_mode=True, diff=True)
    assert not failed, result
    assert result["changed"] is True and result["backup_file"] is None and result["restart_needed"] is True
    assert result["restarted"] is False
    assert conf.read_text() == QUICKPOD_6006_CONF
    assert sorted(os.listdir(config_dir)) == ["6006.conf"]
    removed, added = changed_lines(result["diff"]["before"], result["diff"]["after"])
    assert (removed, added) == (["lxc.cgroup2.devices.allow: c 510:* rwm\n"], ["lxc.cgroup2.devices.allow: c 508:* rwm\n"])
    assert result["diff"]["before"] == QUICKPOD_6006_CONF and result["diff"]["before_header"] == str(conf)
    assert pct.verbs() == ["status"]


def test_file_backend_writes_atomically_with_backup_then_is_idempotent(node_dir, pct):
    config_dir, conf, lock_dir = node_dir
    inode_before = conf.stat().st_ino
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir))
    assert not failed, result
    assert result["changed"] is True and result["config_path"] == str(conf)
    assert [change["action"] for change in result["changes"]] == ["update"]
    after = conf.read_text()
    assert after == QUICKPOD_6006_CONF.replace("c 510:* rwm", "c 508:* rwm")
    # Replaced by rename (a new inode), mode kept, no temporary file left, backup holds the old bytes.
    assert conf.stat().st_ino != inode_before
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640
    backup = result["backup_file"]
    assert backup.startswith(str(conf) + ".") and backup.endswith(".bak")
    with open(backup) as handle:
        assert handle.read() == QUICKPOD_6006_CONF
    assert sorted(os.listdir(config_dir)) == sorted(["6006.conf", os.path.basename(backup)])
    assert os.path.exists(lock_dir / "pve-config-6006.lock")
    # Running container, restart not allowed: the caller is told.
    assert result["restart_needed"] is True and result["restarted"] is False

    second, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir), diff=True)
    assert not failed and second["changed"] is False and second["changes"] == [] and second["backup_file"] is None
    assert second["restart_needed"] is False
    assert conf.read_text() == after and len(os.listdir(config_dir)) == 2


def test_file_backend_restarts_only_when_changed_and_allowed(node_dir, pct):
    config_dir, _conf, lock_dir = node_dir
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, restart=True))
    assert not failed, result
    assert result["restarted"] is True and result["restart_needed"] is False
    assert ["/usr/sbin/pct", "reboot", "6006", "--timeout", "120"] in pct.calls
    pct.calls.clear()
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, restart=True))
    assert not failed and result["changed"] is False and result["restarted"] is False
    assert "reboot" not in pct.verbs()


def test_file_backend_does_not_restart_a_stopped_container(node_dir, pct):
    config_dir, _conf, lock_dir = node_dir
    pct.status = "stopped"
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, restart=True))
    assert not failed and result["changed"] is True
    assert result["restarted"] is False and result["restart_needed"] is False
    assert "reboot" not in pct.verbs()


def test_file_backend_dev_style_without_pct_on_the_path(node_dir, no_pct):
    config_dir, conf, lock_dir = node_dir
    devices = [{"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"}]
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, style="dev", devices=devices, dev_gid=44, backup=False))
    assert not failed, result
    assert result["devices"] == {"dev0": "/dev/nvidia0,gid=44"} and result["backup_file"] is None
    text = conf.read_text()
    assert "cores: 46\ndev0: /dev/nvidia0,gid=44\nfeatures:" in text
    assert "lxc.mount.entry: /dev/nvidia0 dev/nvidia0" not in text
    # The running state is unknown without pct: a restart may be needed.
    assert result["restart_needed"] is True and result["restarted"] is False
    assert len(os.listdir(config_dir)) == 1


def test_file_backend_detects_cgroup_v1(node_dir, no_pct, tmp_path):
    config_dir, conf, lock_dir = node_dir
    conf.write_text(JELLYFIN_DEV_FRAGMENT)
    devices = [{"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"}]
    with mock.patch.object(lxc_passthrough, "CGROUP2_PROBE", str(tmp_path / "absent")):
        result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, devices=devices, cgroup_version="auto"))
    assert not failed, result
    assert result["cgroup_version"] == "v1"
    assert conf.read_text() == JELLYFIN_DEV_FRAGMENT + (
        "lxc.cgroup.devices.allow: c 195:* rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")


def test_file_backend_fails_plainly_for_a_missing_container(tmp_path, no_pct):
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(tmp_path, tmp_path, vmid=999))
    assert failed and "CT 999 has no config" in result["msg"]


def test_file_backend_refuses_bad_devices(node_dir, no_pct):
    config_dir, conf, lock_dir = node_dir
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, devices=[{"path": "/dev/nvidia0", "type": "c"}]))
    assert failed and "major number is required" in result["msg"]
    assert conf.read_text() == QUICKPOD_6006_CONF


def test_protected_majors_come_from_stat_of_other_mount_sources(tmp_path):
    # /dev/null is a character device on every Linux host (major 1); a directory's nodes are looked at too.
    from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import normalize_devices
    from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

    document = parse("lxc.mount.entry: /dev/null dev/null none bind,optional,create=file\n"
                     "lxc.mount.entry: %s x none bind,optional,create=dir\n"
                     "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n" % tmp_path)
    nodes = normalize_devices([{"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"}])
    assert lxc_passthrough_file.host_protected_majors(document, nodes) == {os.major(os.stat("/dev/null").st_rdev)}


def test_lock_held_by_someone_else_fails_after_waiting(node_dir, no_pct):
    import fcntl

    config_dir, conf, lock_dir = node_dir
    with open(lock_dir / "pve-config-6006.lock", "a") as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        with mock.patch.object(lxc_passthrough_file, "LOCK_WAIT_SECONDS", 0.3):
            result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir))
    assert failed and "locked" in result["msg"]
    assert conf.read_text() == QUICKPOD_6006_CONF


# -- api backend ----------------------------------------------------------------------------------

API_ARGS = {"vmid": 120, "devices": DEVICES_UVM_508[:2], "style": "dev", "backend": "api", "node": "pve1", "api_host": "127.0.0.1"}


@pytest.fixture
def no_network():
    with mock.patch.object(pve_api, "ProxmoxAPI", side_effect=AssertionError("must fail before connecting")) as api:
        yield api


def test_api_backend_with_a_token_fails_at_once_and_says_what_to_use(no_network):
    args = dict(API_ARGS, api_user="root@pam", api_token_id="ansible", api_token_secret="s3cr3t-token")
    result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert failed
    assert result["msg"].startswith("dev[n] passthrough can only be set by root@pam: an API token is never root@pam, even one owned by "
                                    "root@pam (it authenticates as root@pam!ansible); Proxmox answers 'configuring device passthrough "
                                    "is only allowed for root@pam' to API tokens and every other user, so /dev/nvidia0, /dev/nvidiactl "
                                    "would be refused")
    assert result["msg"].endswith("Use api_user=root@pam with api_password (a ticket), or backend=cli/file over SSH on the node.")
    assert "s3cr3t-token" not in str(result)
    no_network.assert_not_called()


def test_api_backend_with_another_user_fails_at_once(no_network):
    args = dict(API_ARGS, api_user="ansible@pve", api_password="pw")
    result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert failed and "api_user is ansible@pve" in result["msg"] and "Use api_user=root@pam" in result["msg"]
    no_network.assert_not_called()


def test_raw_style_with_the_api_fails_plainly(no_network):
    args = dict(API_ARGS, style="raw", api_user="root@pam", api_password="pw")
    result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert failed and "raw lxc.* keys cannot be set through the Proxmox API" in result["msg"]
    no_network.assert_not_called()


def fake_proxmox(config, status="running"):
    """A MagicMock shaped like proxmoxer's attribute-call API for the paths the module uses."""
    api = mock.MagicMock(name="ProxmoxAPI()")
    container = api.nodes.return_value.lxc.return_value
    container.config.get.return_value = config
    container.status.current.get.return_value = {"status": status}
    container.status.reboot.post.return_value = "UPID:pve1:00001234:00005678:65A0B0C0:vzreboot:120:root@pam:"
    api.nodes.return_value.tasks.return_value.status.get.return_value = {"status": "stopped", "exitstatus": "OK"}
    return api, container


def test_api_backend_as_root_sets_dev_entries_with_the_digest_and_reboots():
    api, container = fake_proxmox({"arch": "amd64", "dev0": "/dev/dri/card0,gid=44", "digest": "abc123", "lxc": [["lxc.apparmor.profile", "unconfined"]]})
    args = dict(API_ARGS, api_user="root@pam", api_password="pw", dev_gid=44, restart=True, validate_certs=False)
    with mock.patch.object(pve_api, "ProxmoxAPI", return_value=api) as factory:
        result, failed = run_module(lxc_gpu_passthrough.main, args, diff=True)
    assert not failed, result
    factory.assert_called_once_with("127.0.0.1", port=8006, user="root@pam", password="pw", verify_ssl=False, timeout=30)
    api.nodes.assert_any_call("pve1")
    container.config.put.assert_called_once_with(dev1="/dev/nvidia0,gid=44", dev2="/dev/nvidiactl,gid=44", digest="abc123")
    assert result["diff"] == {"before": {"dev0": "/dev/dri/card0,gid=44"},
                              "after": {"dev0": "/dev/dri/card0,gid=44", "dev1": "/dev/nvidia0,gid=44", "dev2": "/dev/nvidiactl,gid=44"}}
    container.status.reboot.post.assert_called_once_with(timeout=120)
    assert result["restarted"] is True and result["cgroup_version"] is None
    assert "pw" not in [str(value) for value in result.values()]


def test_api_backend_check_mode_and_unchanged_run_put_nothing():
    api, container = fake_proxmox({"dev0": "/dev/nvidia0", "dev1": "/dev/nvidiactl", "digest": "d"})
    args = dict(API_ARGS, api_user="root@pam", api_password="pw")
    with mock.patch.object(pve_api, "ProxmoxAPI", return_value=api):
        result, failed = run_module(lxc_gpu_passthrough.main, args)
        assert not failed and result["changed"] is False and result["restart_needed"] is False
        result, failed = run_module(lxc_gpu_passthrough.main, dict(args, dev_mode="0666"), check_mode=True)
    assert not failed and result["changed"] is True and result["restart_needed"] is True
    assert [change["action"] for change in result["changes"]] == ["update", "update"]
    container.config.put.assert_not_called()
    container.status.reboot.post.assert_not_called()


def test_api_backend_reports_a_failed_reboot_task_with_its_exit_status():
    api, _container = fake_proxmox({"digest": "d"})
    task = api.nodes.return_value.tasks.return_value
    task.status.get.return_value = {"status": "stopped", "exitstatus": "command 'lxc-start -n 120' failed: exit code 1"}
    task.log.get.return_value = [{"n": 1, "t": "Device /dev/nvidia-uvm does not exist"}, {"n": 2, "t": "TASK ERROR: startup for container '120' failed"}]
    args = dict(API_ARGS, api_user="root@pam", api_password="pw", restart=True)
    with mock.patch.object(pve_api, "ProxmoxAPI", return_value=api):
        result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert failed
    assert result["msg"].startswith("rebooting CT 120 failed: command 'lxc-start -n 120' failed: exit code 1 (task UPID:pve1:")
    assert "Device /dev/nvidia-uvm does not exist" in result["msg"]
    assert result["task_exitstatus"] == "command 'lxc-start -n 120' failed: exit code 1"
    assert result["task_log_tail"][-1] == "TASK ERROR: startup for container '120' failed"


@pytest.mark.parametrize("extra,timeout,verify", [
    ({"timeout": 45}, 45, True),
    ({"api_timeout": 50, "ca_path": "CA"}, 50, "CA"),
])
def test_api_backend_takes_the_shared_connection_options_and_the_old_timeout_name(extra, timeout, verify, tmp_path):
    if verify == "CA":
        # The CA file must exist where the module runs (pve_api refuses one it cannot read before any request).
        verify = str(tmp_path / "pve-root-ca.pem")
        (tmp_path / "pve-root-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
        extra = dict(extra, ca_path=verify)
    api, _container = fake_proxmox({"dev0": "/dev/nvidia0", "dev1": "/dev/nvidiactl", "digest": "d"})
    args = dict(API_ARGS, api_user="root@pam", api_password="pw", **extra)
    with mock.patch.object(pve_api, "ProxmoxAPI", return_value=api) as factory:
        result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert not failed and result["changed"] is False, result
    factory.assert_called_once_with("127.0.0.1", port=8006, user="root@pam", password="pw", verify_ssl=verify, timeout=timeout)


def test_api_backend_names_an_unreachable_api(monkeypatch):
    # A port where nothing listens: the connection is refused, so the login never reached a node and is tried again.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps = []
    monkeypatch.setattr(pve_api, "pause", sleeps.append)
    args = dict(API_ARGS, api_user="root@pam", api_password="pw", api_port=port)
    result, failed = run_module(lxc_gpu_passthrough.main, args)
    assert failed and result["msg"].startswith(
        "Proxmox API error for CT 120 on node pve1: POST /access/ticket (the login of root@pam): cannot reach the "
        "Proxmox API at https://127.0.0.1:%d (" % port), result["msg"]
    assert "Connection refused" in result["msg"] and re.search(r"\(tried 4 times over \d+\.\d s\)$", result["msg"])
    assert sleeps == list(pve_api.RETRY_DELAYS)


def test_api_backend_without_proxmoxer_names_the_library(monkeypatch):
    monkeypatch.setattr(pve_api, "ProxmoxAPI", None)
    monkeypatch.setattr(pve_api, "PROXMOXER_IMPORT_ERROR", "Traceback: No module named 'proxmoxer'")
    result, failed = run_module(lxc_gpu_passthrough.main, dict(API_ARGS, api_user="root@pam", api_password="pw"))
    assert failed and "proxmoxer" in result["msg"]


# -- cli backend ----------------------------------------------------------------------------------

CLI_ARGS = {"vmid": 120, "devices": DEVICES_UVM_508[:2], "style": "dev", "backend": "cli", "cgroup_version": "v2"}


def test_cli_backend_runs_pct_set_without_a_shell(pct):
    pct.config_text = "arch: amd64\n" + JELLYFIN_DEV_FRAGMENT + "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    with mock.patch.object(AnsibleModule, "warn", autospec=True) as warn:
        result, failed = run_module(lxc_gpu_passthrough.main, dict(CLI_ARGS, dev_mode="0666"), diff=True)
    assert not failed, result
    assert ["/usr/sbin/pct", "config", "120"] in pct.calls
    assert ["/usr/sbin/pct", "set", "120", "-dev2", "/dev/nvidia0,mode=0666", "-dev3", "/dev/nvidiactl,mode=0666"] in pct.calls
    assert result["diff"]["after"]["dev3"] == "/dev/nvidiactl,mode=0666"
    assert result["restart_needed"] is True
    # pct cannot remove the raw mount of /dev/nvidia0: the module says so.
    warnings = [call.args[1] for call in warn.call_args_list]
    assert len(warnings) == 1 and "/dev/nvidia0" in warnings[0] and "use backend=file" in warnings[0]


def test_cli_backend_second_run_and_check_mode_do_not_set(pct):
    pct.config_text = "dev0: /dev/nvidia0\ndev1: /dev/nvidiactl\n"
    result, failed = run_module(lxc_gpu_passthrough.main, CLI_ARGS)
    assert not failed and result["changed"] is False
    result, failed = run_module(lxc_gpu_passthrough.main, dict(CLI_ARGS, dev_gid=44), check_mode=True)
    assert not failed and result["changed"] is True
    assert "set" not in pct.verbs() and "reboot" not in pct.verbs()


def test_cli_backend_reports_pct_failures(pct):
    pct.config_text = ""
    pct.fail["set"] = (255, "", "Device /dev/nvidia0 does not exist\n")
    result, failed = run_module(lxc_gpu_passthrough.main, CLI_ARGS)
    assert failed and "pct set 120 failed (rc=255): Device /dev/nvidia0 does not exist" == result["msg"]


def test_cli_backend_removes_duplicate_entries_with_delete(pct):
    pct.config_text = "dev0: /dev/nvidia0\ndev4: /dev/nvidia0\ndev1: /dev/nvidiactl\n"
    result, failed = run_module(lxc_gpu_passthrough.main, CLI_ARGS)
    assert not failed, result
    assert ["/usr/sbin/pct", "set", "120", "-delete", "dev4"] in pct.calls


def test_raw_style_with_the_cli_fails_plainly(pct):
    result, failed = run_module(lxc_gpu_passthrough.main, dict(CLI_ARGS, style="raw"))
    assert failed and "pct set cannot set" in result["msg"]
    assert pct.calls == []


# -- issue #13: the file back end stats what the config binds -------------------------------------


def test_file_backend_keeps_a_bound_copy_that_is_the_same_device_and_repoints_one_that_is_not(node_dir, no_pct, tmp_path):
    # Constructed: /dev/null (c 1:3 on every Linux host) stands in for a per-container copy of a node with those
    # numbers; a regular file stands in for a copy that is no device at all (a stale or broken one).
    config_dir, conf, lock_dir = node_dir
    stale_copy = tmp_path / "nvidia1"
    stale_copy.write_text("")
    null = os.stat("/dev/null").st_rdev
    text = ("lxc.cgroup2.devices.allow: c 195:* rwm\n"
            "lxc.mount.entry: /dev/null dev/nvidia0 none bind,optional,create=file\n"
            "lxc.mount.entry: %s /dev/nvidia1 none bind,optional,create=file\n" % stale_copy)
    conf.write_text(text)
    devices = [{"path": "/dev/nvidia0", "major": os.major(null), "minor": os.minor(null), "type": "c"},
               {"path": "/dev/nvidia1", "major": 195, "minor": 1, "type": "c"}]
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, devices=devices, backup=False))
    assert not failed, result
    assert conf.read_text() == (
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.mount.entry: /dev/null dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia1 /dev/nvidia1 none bind,optional,create=file\n"
        "lxc.cgroup2.devices.allow: c %d:* rwm\n" % os.major(null))
    assert [(change["action"], change["key"]) for change in result["changes"]] == [
        ("add", "lxc.cgroup2.devices.allow"), ("update", "lxc.mount.entry")]


def test_mounts_onto_discovered_nodes_places_are_not_other_devices():
    from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import normalize_devices
    from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

    # Whatever is bound onto dev/nvidia0 is what the plan binds there (kept or repointed), so /dev/zero's major is not
    # another device's. A bind elsewhere still counts.
    nodes = normalize_devices([{"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"}])
    document = parse("lxc.mount.entry: /dev/zero /dev/nvidia0 none bind,optional,create=file\n")
    assert lxc_passthrough_file.host_protected_majors(document, nodes) == set()
    document = parse("lxc.mount.entry: /dev/zero dev/zero none bind,optional,create=file\n")
    assert lxc_passthrough_file.host_protected_majors(document, nodes) == {os.major(os.stat("/dev/zero").st_rdev)}


def test_stat_mount_sources_reports_nodes_directories_their_entries_and_missing_paths(tmp_path):
    from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

    (tmp_path / "plain").write_text("")
    document = parse("lxc.mount.entry: /dev/null dev/null none bind,optional,create=file\n"
                     "lxc.mount.entry: %s x none bind,optional,create=dir\n"
                     "lxc.mount.entry: %s/absent y none bind,optional,create=file\n" % (tmp_path, tmp_path))
    null = os.stat("/dev/null").st_rdev
    assert lxc_passthrough_file.stat_mount_sources(document) == {
        "/dev/null": ("c", os.major(null), os.minor(null)),
        str(tmp_path): ("d", None, None),
        str(tmp_path / "plain"): None,
        str(tmp_path / "absent"): None,
    }


def test_file_backend_reports_a_bind_it_cannot_take_over_plainly(node_dir, no_pct):
    # Constructed: the container's whole /dev bound from another directory.
    config_dir, conf, lock_dir = node_dir
    conf.write_text("lxc.mount.entry: /srv/ct-dev dev none bind,create=dir\n")
    devices = [{"path": "/dev/nvidia0", "major": 195, "minor": 0, "type": "c"}]
    result, failed = run_module(lxc_gpu_passthrough.main, file_args(config_dir, lock_dir, devices=devices))
    assert failed
    assert result["msg"].startswith("/dev/nvidia0 would be mounted inside the bind mount 'lxc.mount.entry: /srv/ct-dev dev none bind,create=dir'")
    assert conf.read_text() == "lxc.mount.entry: /srv/ct-dev dev none bind,create=dir\n"


def test_cli_backend_warns_about_a_copy_bound_onto_a_nodes_place(pct):
    # The frigate#8652 shape (a per-container copy bound onto dev/nvidia0): pct cannot remove it, the module says so.
    pct.config_text = "lxc.mount.entry: /lxc/102010/devices/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    with mock.patch.object(AnsibleModule, "warn", autospec=True) as warn:
        result, failed = run_module(lxc_gpu_passthrough.main, CLI_ARGS)
    assert not failed, result
    warnings = [call.args[1] for call in warn.call_args_list]
    assert len(warnings) == 1 and warnings[0].startswith("the config also passes /dev/nvidia0 with a raw line (lxc.mount.entry: /lxc/102010/")
