# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's boot check (roles/pve_gpu_host/files/gpu_boot_check.py, issue 29 item 2), installed as the role installs
it (beside module_utils/lxc_device_rules.py) and run against the GPU kit's node: the uvm nodes after a reboot, a new uvm
major after a driver update, container configs that reach the node and ones that do not, and what it must not do
(follow a symlinked report, hang on a FIFO, crash without nvidia-modprobe)."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SIM_SOURCE = str(REPO / "simulators" / "pve_sim")
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import gpu_kit  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the GPU kit's device nodes need mknod (root)")

UVM = 238
DRIVER = "580.95.05"
# A dev-style config (PVE resolves the major at each start), a raw-style one for the current major, one for an old
# major (with the current one only in a snapshot section, which does not apply), and a container without GPUs.
DEV_CONFIG = """arch: amd64
hostname: gpu-dev
dev0: /dev/nvidia0,gid=44,mode=0660
dev1: /dev/nvidiactl,gid=44,mode=0660
dev2: /dev/nvidia-uvm,gid=44,mode=0660
dev3: /dev/nvidia-uvm-tools,gid=44,mode=0660
"""
RAW_CONFIG = """hostname: gpu-raw
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c %d:* rwm
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
"""
PLAIN_CONFIG = "arch: amd64\nhostname: web\nmemory: 512\n"


class BootNode:
    """A node after the role ran: the GPU kit, the stand-in nvidia-modprobe, container configs, the installed check."""

    def __init__(self, base, *faults):
        self.base = base
        self.dev = base / "dev"
        self.kit = gpu_kit.create_kit(str(base / "kit"), UVM, gpus=2, driver_version=DRIVER, dev_dir=str(self.dev), faults=faults)
        self.root = base / "root"
        gpu_kit.write_node_programs(str(self.root), self.kit["root"], UVM, 2, DRIVER, str(self.dev), False)
        self.configs = base / "etc-pve-lxc"
        self.configs.mkdir()
        self.lib = base / "lib"
        self.lib.mkdir()
        shutil.copyfile(REPO / "roles" / "pve_gpu_host" / "files" / "gpu_boot_check.py", self.lib / "gpu_boot_check.py")
        shutil.copyfile(REPO / "plugins" / "module_utils" / "lxc_device_rules.py", self.lib / "lxc_device_rules.py")
        self.report = base / "run" / "llmops-serving" / "gpu-boot-check.json"

    def write_config(self, vmid, text):
        (self.configs / ("%d.conf" % vmid)).write_text(text)

    def fault(self, *names):
        self.kit = gpu_kit.add_faults(self.kit["root"], list(names))

    def run(self, modprobe=None):
        argv = [sys.executable, str(self.lib / "gpu_boot_check.py"),
                "--nvidia-modprobe", modprobe or str(self.root / "usr" / "bin" / "nvidia-modprobe"),
                "--proc-devices", self.kit["proc_devices"], "--config-dir", str(self.configs),
                "--boot-id-file", self.kit["boot_id_file"], "--report", str(self.report),
                "--uvm-device=%s" % (self.dev / "nvidia-uvm"), "--uvm-device=%s" % (self.dev / "nvidia-uvm-tools")]
        # Installed without the collection: nothing but the standard library and the file beside it may be imported.
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=str(self.base),
                                env={"PATH": os.environ["PATH"]})
        return result.returncode, result.stdout, result.stderr, json.loads(self.report.read_text())

    def uvm_major_of_node(self):
        return os.major(os.stat(self.dev / "nvidia-uvm").st_rdev)

    def modprobe_calls(self):
        log = self.root / "nvidia-modprobe.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def node(tmp_path):
    return BootNode(tmp_path)


def test_a_healthy_boot_changes_nothing_and_reports_each_gpu_container(node):
    node.write_config(101, DEV_CONFIG)
    node.write_config(102, RAW_CONFIG % UVM)
    node.write_config(103, PLAIN_CONFIG)
    code, out, err, report = node.run()
    assert code == 0 and err == "", err
    assert node.modprobe_calls() == [] and report["modprobe"] is None and report["created"] == []
    assert [(entry["vmid"], entry["access"]) for entry in report["containers"]] == [(101, "dev"), (102, "allow")]
    assert report["uvm_major"] == UVM and report["problems"] == []
    assert report["boot_id"] == pathlib.Path(node.kit["boot_id_file"]).read_text().strip()
    assert "uvm major 238; created nothing; 2 GPU container config(s) checked; 0 problem(s)" in out
    assert stat.S_IMODE(os.stat(node.report).st_mode) == 0o644


def test_after_a_reboot_it_creates_the_uvm_nodes_before_the_guests_start(node):
    node.write_config(101, DEV_CONFIG)
    boot_before = pathlib.Path(node.kit["boot_id_file"]).read_text().strip()
    node.fault("rebooted")
    assert not (node.dev / "nvidia-uvm").exists()
    code, out, err, report = node.run()
    assert code == 0, err
    assert node.modprobe_calls() == ["-c0 -u"]
    assert node.uvm_major_of_node() == UVM
    assert report["created"] == [str(node.dev / "nvidia-uvm"), str(node.dev / "nvidia-uvm-tools")]
    assert [item["state"] for item in report["nodes_before"]] == ["missing", "missing"]
    assert report["boot_id"] != boot_before and report["problems"] == []
    assert "created %s, %s" % (node.dev / "nvidia-uvm", node.dev / "nvidia-uvm-tools") in out


def test_a_new_uvm_major_names_the_raw_container_it_breaks_and_leaves_its_config_alone(node):
    node.write_config(101, DEV_CONFIG)
    stale = RAW_CONFIG % UVM + "\n[before-update]\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
    node.write_config(102, stale)
    node.write_config(104, (RAW_CONFIG % 511).replace("gpu-raw", "gpu-raw-current"))
    # A reboot after a driver update: nvidia-uvm registers 511 when it loads.
    node.fault("rebooted", "uvm-major=511")
    code, _out, err, report = node.run()
    assert code == 1
    assert node.uvm_major_of_node() == 511
    assert [(entry["vmid"], entry["access"], entry["allowed_majors"]) for entry in report["containers"]] == [
        (101, "dev", []), (102, "none", [195, UVM]), (104, "allow", [195, 511])]
    assert len(report["problems"]) == 1
    problem = report["problems"][0]
    assert "container 102" in problem and "major 511" in problem and "allows 195, 238" in problem and "error 999" in problem
    assert err == "llmops-gpu-boot-check: %s\n" % problem
    assert (node.configs / "102.conf").read_text() == stale


def test_a_uvm_node_left_with_another_major_is_recreated(node):
    os.unlink(node.dev / "nvidia-uvm")
    os.mknod(node.dev / "nvidia-uvm", 0o666 | stat.S_IFCHR, os.makedev(499, 0))
    code, _out, err, report = node.run()
    assert code == 0, err
    assert report["nodes_before"][0] == {"path": str(node.dev / "nvidia-uvm"), "state": "other-major", "major": 499}
    assert node.modprobe_calls() == ["-c0 -u"] and node.uvm_major_of_node() == UVM
    assert report["created"] == [str(node.dev / "nvidia-uvm")]


def test_without_nvidia_modprobe_it_says_what_is_missing_and_still_reports(node):
    node.write_config(101, DEV_CONFIG)
    node.fault("rebooted")
    code, _out, err, report = node.run(modprobe=str(node.base / "no-such-nvidia-modprobe"))
    assert code == 1
    assert report["modprobe"]["output"].endswith("no-such-nvidia-modprobe does not exist")
    assert report["uvm_major"] is None
    assert "nvidia-uvm is not loaded" in err and "is missing after the check" in err
    # Without a major no config can be judged stale: the missing module is the one problem to fix.
    assert not any("container 101" in problem for problem in report["problems"])


def test_hostile_report_path_fifo_and_unreadable_config(node):
    # The report path a symlink to a file elsewhere: replaced, never written through.
    target = node.base / "elsewhere"
    target.write_text("keep\n")
    node.report.parent.mkdir(parents=True)
    os.symlink(target, node.report)
    # A FIFO named like a config: read without blocking, reported, never waited on.
    os.mkfifo(node.configs / "105.conf")
    node.write_config(101, DEV_CONFIG)
    code, _out, err, report = node.run()
    assert target.read_text() == "keep\n" and not node.report.is_symlink()
    assert [(entry["vmid"], entry["access"]) for entry in report["containers"]] == [(101, "dev"), (105, "unreadable")]
    assert code == 1 and "container 105" in err
    assert not list(node.report.parent.glob("*.tmp"))


def test_the_role_installs_the_same_parser_the_preflight_imports():
    # One owner of the config format: the file the role copies is the module_utils file the GPU preflight imports.
    tasks = (REPO / "roles" / "pve_gpu_host" / "tasks" / "boot_check.yml").read_text()
    assert "{{ role_path }}/../../plugins/module_utils/lxc_device_rules.py" in tasks
    checks = (REPO / "plugins" / "module_utils" / "gpu_preflight_checks.py").read_text()
    assert "module_utils.lxc_device_rules import" in checks
    source = (REPO / "plugins" / "module_utils" / "lxc_device_rules.py").read_text()
    assert "ansible" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))
