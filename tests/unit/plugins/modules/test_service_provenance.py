# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""service_provenance on fake /proc trees, with `systemctl show` answered by a patched run_command."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import unit_check
from ansible_collections.llmops.serving.plugins.modules import service_provenance
from ansible_collections.llmops.serving.tests.unit.fakes import (
    CONTROL_GROUP, HEX_V4_ANY, HEX_V6_ANY, HEX_V6_MAPPED_LOOPBACK, INVOCATION, MAIN_PID, UNIT, FakeProc, FakeSystemctl, show_text,
    tcp_row, vanish_mid_scan)

SESSION = "/user.slice/user-0.slice/session-3.scope"
DEPLOYMENT = "3f" * 32
OLD_DEPLOYMENT = "aa" * 32
API_KEY = "sk-do-not-leak-0123456789"
STRAY_PID = 4242


class Target:
    """A fake host: /proc tree, GPU device stand-ins (regular files), and systemctl's answer."""

    def __init__(self, tmp_path, monkeypatch):
        self.proc = FakeProc(tmp_path / "proc")
        self.dev = tmp_path / "dev"
        self.dev.mkdir()
        for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
            (self.dev / name).write_text("")
        self.gpu_globs = [str(self.dev / "nvidia[0-9]*"), str(self.dev / "nvidiactl"), str(self.dev / "nvidia-uvm")]
        monkeypatch.setattr(procfs, "PROC_ROOT", str(self.proc.root))
        self.systemctl = FakeSystemctl(show_text())

    @property
    def show(self):
        return self.systemctl.replies[0]

    @show.setter
    def show(self, text):
        self.systemctl.replies = [text]

    def gpu(self, name):
        return str(self.dev / name)

    def healthy_server(self):
        """The unit's server (listening on 30000 on IPv4 and IPv6) and two TP workers on the GPUs."""
        self.proc.set_net([tcp_row(0, HEX_V4_ANY, 30000, 5001), tcp_row(1, "0100007F", 22, 5009)],
                          [tcp_row(0, HEX_V6_ANY, 30000, 6001)])
        self.proc.add_process(MAIN_PID, ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--port", "30000"],
                              cgroup_path=CONTROL_GROUP, starttime=1000,
                              environ={"LLMOPS_DEPLOYMENT_ID": DEPLOYMENT, "SGLANG_API_KEY": API_KEY, "INVOCATION_ID": INVOCATION},
                              fds={0: "/dev/null", 3: "socket:[5001]", 4: "socket:[6001]"})
        for index, pid in enumerate((4790, 4791)):
            self.proc.add_process(pid, ["sglang::scheduler_TP%d" % index], cgroup_path=CONTROL_GROUP + "/workers", starttime=1100,
                                  fds={5: self.gpu("nvidia%d" % index), 6: self.gpu("nvidiactl"), 7: self.gpu("nvidia-uvm")})
        self.proc.add_process(1, ["/lib/systemd/systemd"], cgroup_path="/init.scope", starttime=1)
        self.proc.add_process(800, ["/usr/sbin/sshd", "-D"], cgroup_path="/system.slice/ssh.service",
                              fds={3: "socket:[5009]"})

    def run(self, **args):
        params = dict({"name": UNIT, "port": 30000, "deployment_id": DEPLOYMENT, "gpu_devices": self.gpu_globs}, **args)
        return self.systemctl.run_module(service_provenance.main, params, check_mode=True)


@pytest.fixture
def target(tmp_path, monkeypatch):
    return Target(tmp_path, monkeypatch)


def test_happy_path(target):
    target.healthy_server()
    result, failed = target.run()
    assert not failed, result.get("msg")
    assert result["changed"] is False
    assert result["unit"]["main_pid"] == MAIN_PID and result["unit"]["invocation_id"] == INVOCATION
    assert result["deployment_id"] == DEPLOYMENT
    assert (result["listener"]["pid"], result["listener"]["in_unit"], result["listener"]["port"]) == (MAIN_PID, True, 30000)
    assert "sglang.launch_server" in result["listener"]["cmdline"]
    assert sorted((entry["address"], entry["pid"]) for entry in result["listeners"]) == [("0.0.0.0", MAIN_PID), ("::", MAIN_PID)]
    assert [(p["pid"], p["in_unit"], p["devices"]) for p in result["gpu_processes"]] == [
        (4790, True, [target.gpu("nvidia0"), target.gpu("nvidiactl"), target.gpu("nvidia-uvm")]),
        (4791, True, [target.gpu("nvidia1"), target.gpu("nvidiactl"), target.gpu("nvidia-uvm")])]
    assert result["strays"] == [] and result["problems"] == []
    assert sorted(result["gpu_devices_found"]) == sorted(target.gpu(n) for n in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"))
    assert target.systemctl.commands == [["systemctl", "show", target.systemctl.commands[0][2], "--", UNIT]]


def test_secrets_from_environ_never_leave_the_module(target):
    target.healthy_server()
    for expected in (DEPLOYMENT, OLD_DEPLOYMENT):
        result, dummy = target.run(deployment_id=expected)
        assert API_KEY not in json.dumps(result)


def test_command_lines_with_the_api_key_come_back_masked(target):
    # The launcher used to pass the key as --api-key: the unit's own server and a stray started by hand with it (and a
    # client that sends it as a header) are shown without it, in the listener, the GPU holders, the strays and the message.
    target.healthy_server()
    main = target.proc.root / str(MAIN_PID) / "cmdline"
    main.write_bytes(b"\0".join(word.encode() for word in [
        "/opt/sglang/bin/python", "-m", "sglang.launch_server", "--port", "30000", "--api-key", API_KEY]) + b"\0")
    target.proc.add_process(STRAY_PID, ["python3", "-m", "sglang.launch_server", "--api-key=" + API_KEY], cgroup_path=SESSION,
                            starttime=2000, fds={5: target.gpu("nvidia1")})
    target.proc.add_process(4343, ["curl", "-H", "Authorization: Bearer " + API_KEY, "http://127.0.0.1:30000/v1/models"],
                            cgroup_path=SESSION, starttime=2100, fds={5: target.gpu("nvidia0")})
    result, failed = target.run()
    assert failed
    assert result["listener"]["cmdline"] == "/opt/sglang/bin/python -m sglang.launch_server --port 30000 --api-key ********"
    assert [stray["cmdline"] for stray in result["strays"]] == [
        "python3 -m sglang.launch_server --api-key=********",
        "curl -H Authorization: Bearer ******** http://127.0.0.1:30000/v1/models"]
    assert "PID 4242 (python3 -m sglang.launch_server --api-key=********, started" in result["msg"]
    assert API_KEY not in json.dumps(result)


def test_bare_name_gets_service_suffix(target):
    target.healthy_server()
    result, failed = target.run(name="sglang-qwen36")
    assert not failed, result.get("msg")
    assert target.systemctl.commands[0][-1] == UNIT


def test_unit_not_loaded(target):
    target.proc.set_net([])
    target.show = show_text(LoadState="not-found", ActiveState="inactive", SubState="dead", MainPID="0", InvocationID="",
                            ExecMainStartTimestamp="", ControlGroup="")
    result, failed = target.run(port=None)
    assert failed
    assert result["msg"].startswith("sglang-qwen36.service is not loaded (LoadState=not-found)")


def test_unit_not_active(target):
    target.proc.set_net([])
    target.show = show_text(ActiveState="failed", SubState="failed", Result="exit-code", MainPID="0")
    result, failed = target.run(port=None)
    assert failed
    assert result["msg"].startswith(
        "sglang-qwen36.service is not running (ActiveState=failed, SubState=failed, Result=exit-code, MainPID=0)")
    assert "journalctl -u sglang-qwen36.service" in result["msg"]
    assert result["unit"]["active_state"] == "failed" and result["deployment_id"] is None


def test_stray_server_holds_the_port_after_the_unit_was_stopped(target):
    # The incident: the unit is stopped, a nohup'ed server from an SSH session still answers on the port (v4-mapped IPv6).
    target.show = show_text(ActiveState="inactive", SubState="dead", MainPID="0")
    target.proc.set_net([], [tcp_row(0, HEX_V6_MAPPED_LOOPBACK, 30000, 7001)])
    target.proc.add_process(STRAY_PID, ["python3", "-m", "http.server", "30000"], cgroup_path=SESSION, starttime=2000,
                            fds={3: "socket:[7001]", 1: "/tmp/nohup.out"})
    result, failed = target.run()
    assert failed
    started = target.proc.start_iso(2000)
    assert result["problems"][0].startswith("sglang-qwen36.service is not running")
    assert result["problems"][1] == (
        "port 30000 is held by PID 4242 (python3 -m http.server 30000, started %s), which is outside sglang-qwen36.service "
        "(cgroup %s). A server started by hand (nohup?) is answering instead of the unit. Stop it by its PID after checking "
        "it (kill 4242); never kill by name (no pkill -f)." % (started, SESSION))
    assert result["problems"][1] in result["msg"]
    assert result["listener"] == {
        "port": 30000, "address": "::ffff:127.0.0.1", "family": "ipv6", "pid": STRAY_PID, "cmdline": "python3 -m http.server 30000",
        "comm": "python3", "started_at": started, "cgroup": SESSION, "in_unit": False}
    assert result["strays"] == [{"pid": STRAY_PID, "cmdline": "python3 -m http.server 30000", "started_at": started,
                                 "cgroup": SESSION, "reason": "listens on port 30000 (::ffff:127.0.0.1) outside sglang-qwen36.service"}]


def test_stray_listener_next_to_a_running_unit(target):
    # A failed relaunch left the unit running on IPv4 while an old server kept an IPv6 socket on the same port.
    target.healthy_server()
    target.proc.set_net([tcp_row(0, HEX_V4_ANY, 30000, 5001)], [tcp_row(0, HEX_V6_ANY, 30000, 7001)])
    target.proc.add_process(STRAY_PID, ["python3", "-m", "sglang.launch_server", "--port", "30000"], cgroup_path=SESSION,
                            starttime=900, fds={3: "socket:[7001]"})
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("port 30000 is held by PID 4242 (python3 -m sglang.launch_server --port 30000, started ")
    assert result["listener"]["pid"] == STRAY_PID
    assert [(entry["pid"], entry["in_unit"]) for entry in result["listeners"]] == [(MAIN_PID, True), (STRAY_PID, False)]


def test_listener_whose_owner_is_invisible(target):
    target.healthy_server()
    target.proc.set_net([tcp_row(0, HEX_V4_ANY, 30000, 5001), tcp_row(1, HEX_V4_ANY, 30000, 8888)])
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("port 30000 (0.0.0.0) is held by socket inode 8888 whose process is not visible in /proc")
    assert result["listeners"][1] == {"port": 30000, "address": "0.0.0.0", "family": "ipv4", "pid": None, "cmdline": None,
                                      "comm": None, "started_at": None, "cgroup": None, "in_unit": False}
    assert set(result["listeners"][1]) == set(result["listeners"][0])


def test_nothing_listens_while_the_unit_is_active(target):
    target.healthy_server()
    target.proc.set_net([tcp_row(0, HEX_V4_ANY, 8080, 5001)], [])
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("nothing listens on TCP port 30000 although sglang-qwen36.service is active (MainPID 4711)")
    assert result["listener"] is None and result["listeners"] == []


def test_running_invocation_belongs_to_another_deployment(target):
    target.healthy_server()
    result, failed = target.run(deployment_id=OLD_DEPLOYMENT)
    assert failed
    assert result["deployment_id"] == DEPLOYMENT
    assert result["msg"].startswith(
        "the running invocation %s of sglang-qwen36.service (main PID 4711 (/opt/sglang/bin/python -m sglang.launch_server "
        "--port 30000, started %s)) belongs to deployment %s, not to %s that was just deployed: the unit was not restarted"
        % (INVOCATION, target.proc.start_iso(1000), DEPLOYMENT, OLD_DEPLOYMENT))


def test_running_invocation_without_deployment_id(target):
    target.healthy_server()
    environ = target.proc.root / str(MAIN_PID) / "environ"
    environ.write_bytes(b"SGLANG_API_KEY=" + API_KEY.encode() + b"\0PATH=/usr/bin\0")
    result, failed = target.run()
    assert failed
    assert "has no LLMOPS_DEPLOYMENT_ID in its environment" in result["msg"]
    assert result["deployment_id"] is None
    assert API_KEY not in json.dumps(result)
    # Without an expected ID there is nothing to compare: only reported.
    result, failed = target.run(deployment_id=None)
    assert not failed, result.get("msg")


def test_restart_that_did_not_happen(target):
    target.healthy_server()
    result, failed = target.run(previous_invocation_id=INVOCATION)
    assert failed
    assert result["msg"].startswith(
        "the restart did not happen: sglang-qwen36.service still runs invocation %s, the same as before (main PID 4711" % INVOCATION)
    result, failed = target.run(previous_invocation_id="0" * 32)
    assert not failed, result.get("msg")


def test_gpu_holder_outside_the_unit(target):
    target.healthy_server()
    target.proc.add_process(5151, ["python3", "leftover_worker.py"], cgroup_path=SESSION, starttime=3000,
                            fds={4: target.gpu("nvidia1"), 5: target.gpu("nvidiactl")})
    result, failed = target.run()
    assert failed
    assert result["msg"] == (
        "PID 5151 (python3 leftover_worker.py, started %s) holds %s, %s but is outside sglang-qwen36.service (cgroup %s): it takes "
        "GPU memory the server needs (a leftover server or worker?). Stop it by its PID after checking it (kill 5151); never "
        "kill by name (no pkill -f)." % (target.proc.start_iso(3000), target.gpu("nvidia1"), target.gpu("nvidiactl"), SESSION))
    assert [stray["pid"] for stray in result["strays"]] == [5151]
    assert [(p["pid"], p["in_unit"]) for p in result["gpu_processes"]] == [(4790, True), (4791, True), (5151, False)]


def test_gpu_holder_outside_the_unit_allowed(target):
    target.healthy_server()
    target.proc.add_process(5151, ["nvidia-persistenced"], cgroup_path="/system.slice/nvidia-persistenced.service",
                            fds={4: target.gpu("nvidiactl")})
    result, failed = target.run(allow_strays=True)
    assert not failed, result.get("msg")
    assert result["strays"][0]["reason"] == "holds %s outside sglang-qwen36.service" % target.gpu("nvidiactl")


def test_pids_vanishing_mid_scan(target, monkeypatch):
    target.healthy_server()
    # A worker that exits between the pid listing and the fd scan, and one whose fd closes between listdir and readlink.
    target.proc.add_process(6000, ["short-lived"], cgroup_path=SESSION, fds={3: "socket:[5001]", 4: target.gpu("nvidia0")})
    vanish_mid_scan(monkeypatch, listdir={"/6000/fd": FileNotFoundError}, readlink={"/4791/fd/5": FileNotFoundError})
    result, failed = target.run()
    assert not failed, result.get("msg")
    assert [(p["pid"], len(p["devices"])) for p in result["gpu_processes"]] == [(4790, 3), (4791, 2)]


def test_systemctl_failure(target):
    target.show = (1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n")
    result, failed = target.run(port=None)
    assert failed and result["unit"] is None
    assert result["msg"].startswith("cannot ask systemd about sglang-qwen36.service: systemctl show")
    assert "has not been booted with systemd" in result["msg"]


def test_port_out_of_range(target):
    result, failed = target.run(port=70000)
    assert failed and result["msg"] == "port must be between 1 and 65535, got 70000"


def test_default_gpu_globs_are_the_nvidia_nodes():
    assert service_provenance.DEFAULT_GPU_DEVICES == ["/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert "/dev/nvidia[0-9]*" in service_provenance.DOCUMENTATION


def test_stray_with_ipv4_and_ipv6_sockets_is_named_once(target):
    target.show = show_text(ActiveState="inactive", SubState="dead", MainPID="0")
    target.proc.set_net([tcp_row(0, HEX_V4_ANY, 30000, 7001)], [tcp_row(0, HEX_V6_ANY, 30000, 7002)])
    target.proc.add_process(STRAY_PID, ["python3", "-m", "sglang.launch_server"], cgroup_path=SESSION,
                            fds={3: "socket:[7001]", 4: "socket:[7002]"})
    result, failed = target.run()
    assert failed
    assert len(result["problems"]) == 2  # the unit is down; the stray, once
    assert [s["reason"] for s in result["strays"]] == ["listens on port 30000 (0.0.0.0, ::) outside sglang-qwen36.service"]
    assert len(result["listeners"]) == 2


def test_real_proc_our_own_listener_is_a_stray(target, monkeypatch):
    """On this machine's real /proc: a socket this test listens on is found, with this process named as its holder."""
    import socket  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(procfs, "PROC_ROOT", "/proc")
    my_pid = os.getpid()
    me = procfs.describe_process(my_pid)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        # The module leaves its own PID out of scans; here it runs inside this test's process, so switch that off.
        monkeypatch.setattr(unit_check.os, "getpid", lambda: -1)
        target.show = show_text(ActiveState="inactive", SubState="dead", MainPID="0")
        result, failed = target.run(port=port, gpu_devices=[])
    assert failed
    assert result["listener"]["pid"] == my_pid and result["listener"]["address"] == "127.0.0.1"
    assert result["listener"]["in_unit"] is False
    assert "port %d is held by PID %d (%s, started %s), which is outside sglang-qwen36.service" % (
        port, my_pid, me["cmdline"], me["started_at"]) in result["msg"]


# ---- the GPUs the unit holds against the deployment's -----------------------------------------------------------------

GPU_UUIDS = ["GPU-5e1d0000-5e1d-4c0a-9b7e-000000000000", "GPU-5e1d0001-5e1d-4c0a-9b7e-000000000001",
             "GPU-5e1d0002-5e1d-4c0a-9b7e-000000000002"]


def gpu_host(target, tmp_path, monkeypatch, present=(0, 1)):
    """Real character nodes for the driver's minors (GPU index i is minor i ^ 1, as the GPU kit numbers them) and the
    driver's list of three GPUs; only the minors of ``present`` GPUs have a node here."""
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3"):
        path = target.dev / name
        if path.exists():
            path.unlink()
    for index in present:
        os.mknod(str(target.dev / ("nvidia%d" % (index ^ 1))), 0o20666, os.makedev(195, index ^ 1))
    proc = tmp_path / "proc-driver-nvidia"
    for index, uuid in enumerate(GPU_UUIDS):
        directory = proc / "gpus" / ("0000:%02x:00.0" % (0x11 + index * 7))
        directory.mkdir(parents=True)
        (directory / "information").write_text(
            "Model: \t\t NVIDIA RTX A6000\nGPU UUID: \t %s\nBus Location: \t 0000:%02x:00.0\nDevice Minor: \t %d\n"
            % (uuid, 0x11 + index * 7, index ^ 1))
    monkeypatch.setattr(service_provenance, "DEV_DIR", str(target.dev))
    return str(proc)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


@needs_root
def test_the_gpus_the_unit_holds_are_named_by_uuid_and_node_index(target, tmp_path, monkeypatch):
    proc = gpu_host(target, tmp_path, monkeypatch)
    target.healthy_server()
    result, failed = target.run(gpus=GPU_UUIDS[:2], proc_driver_dir=proc)
    assert not failed, result.get("msg")
    # The workers hold /dev/nvidia0 and /dev/nvidia1: minors 0 and 1, which are the node's GPUs 1 and 0.
    assert result["gpus_held"] == [{"index": 0, "uuid": GPU_UUIDS[0], "minor": 1, "bus_id": "0000:11:00.0"},
                                   {"index": 1, "uuid": GPU_UUIDS[1], "minor": 0, "bus_id": "0000:18:00.0"}]


@needs_root
def test_an_assigned_gpu_the_unit_does_not_hold_is_named_with_its_node(target, tmp_path, monkeypatch):
    proc = gpu_host(target, tmp_path, monkeypatch)
    target.healthy_server()
    result, failed = target.run(gpus=GPU_UUIDS[1:], proc_driver_dir=proc)
    assert failed
    assert ("does not hold its assigned GPU 2 (%s), /dev/nvidia3 on the host: %s is not in this container"
            % (GPU_UUIDS[2], target.dev / "nvidia3")) in result["msg"]
    assert "holds GPU 0 (%s) (/dev/nvidia1), which is not one of the GPUs assigned" % GPU_UUIDS[0] in result["msg"]


@needs_root
def test_an_assigned_gpu_whose_node_is_here_but_unused_says_so(target, tmp_path, monkeypatch):
    proc = gpu_host(target, tmp_path, monkeypatch, present=(0, 1, 2))
    target.healthy_server()
    result, failed = target.run(gpus=GPU_UUIDS, proc_driver_dir=proc)
    assert failed and "is here but the server does not use it" in result["msg"]


def test_without_the_drivers_list_assigned_gpus_cannot_be_told(target, tmp_path):
    target.healthy_server()
    result, failed = target.run(gpus=GPU_UUIDS[:1], proc_driver_dir=str(tmp_path / "no-driver"))
    assert failed and "cannot be told" in result["msg"] and result["gpus_held"] == []
    # Without assigned GPUs nothing is expected: the held ones are only reported.
    result, failed = target.run(proc_driver_dir=str(tmp_path / "no-driver"))
    assert not failed and result["gpus_held"] == []
