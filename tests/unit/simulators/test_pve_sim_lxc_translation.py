# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's translation of a PVE container config into an LXC config, and the GPU kit's files."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim.configfile import pve_lxc_config  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.gpu_kit import create_kit  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.runtime import TaskFailed, render_lxc_config, translate_raw  # noqa: E402  pylint: disable=wrong-import-position

CONFIG = """#GPU box
arch: amd64
cores: 1
dev0: /dev/null,deny-write=1
dev1: /dev/zero,gid=44
hostname: gpu1
memory: 2048
rootfs: local:120/subvol-120-disk-0.subvol,size=8G
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 508:* rwm
lxc.cgroup2.cpu.weight: 50
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
"""


def test_the_parser_is_the_collections_one():
    assert pve_lxc_config.parse(CONFIG).render() == CONFIG
    assert pve_lxc_config.__file__.endswith(os.path.join("plugins", "module_utils", "pve_lxc_config.py"))


def test_cgroup_v1_host_gets_v1_keys_for_limits_devices_and_raw_lines():
    lines = render_lxc_config(120, pve_lxc_config.parse(CONFIG), "/r", 1).splitlines()
    null = os.stat("/dev/null").st_rdev
    zero = os.stat("/dev/zero").st_rdev
    assert "lxc.cgroup.memory.limit_in_bytes = 2147483648" in lines
    assert "lxc.cgroup.devices.allow = c %d:%d r" % (os.major(null), os.minor(null)) in lines
    assert "lxc.cgroup.devices.deny = c %d:%d w" % (os.major(null), os.minor(null)) in lines
    assert "lxc.cgroup.devices.allow = c %d:%d rw" % (os.major(zero), os.minor(zero)) in lines
    assert "lxc.mount.entry = /dev/zero dev/zero none bind,optional,create=file 0 0" in lines
    assert lines.count("lxc.cgroup.devices.allow = c 195:* rwm") == 1 and "lxc.cgroup.devices.allow = c 508:* rwm" in lines
    assert "# dropped (no equivalent on cgroup v1): lxc.cgroup2.cpu.weight = 50" in lines
    assert "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file" in lines
    assert "lxc.cgroup.cpuset.cpus = 0" in lines and "lxc.uts.name = gpu1" in lines and "lxc.rootfs.path = dir:/r" in lines
    assert not [line for line in lines if line.startswith("lxc.cgroup2.")]


def test_cgroup_v2_host_keeps_v2_keys_and_translates_v1_ones():
    lines = render_lxc_config(120, pve_lxc_config.parse(CONFIG + "lxc.cgroup.devices.allow: c 10:200 rwm\n"), "/r", 2).splitlines()
    assert "lxc.cgroup2.memory.max = 2147483648" in lines and "lxc.cgroup2.devices.allow = c 195:* rwm" in lines
    assert "lxc.cgroup2.cpu.weight = 50" in lines and "lxc.cgroup2.devices.allow = c 10:200 rwm" in lines
    assert translate_raw("lxc.cgroup2.memory.max", "1G", 1) == ("lxc.cgroup.memory.limit_in_bytes", "1G")
    assert translate_raw("lxc.environment", "A=1", 1) == ("lxc.environment", "A=1")


def test_a_missing_or_non_device_dev_entry_fails_like_pve():
    with pytest.raises(TaskFailed, match="^Device /dev/pve-sim-nothing-here does not exist$"):
        render_lxc_config(1, pve_lxc_config.parse("dev0: /dev/pve-sim-nothing-here\n"), "/r", 1)
    with pytest.raises(TaskFailed, match="is not a device$"):
        render_lxc_config(1, pve_lxc_config.parse("dev0: /dev/\n"), "/r", 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_gpu_kit_nodes_version_file_and_nvidia_smi(tmp_path):
    kit = create_kit(str(tmp_path), uvm_major=509, gpus=2, driver_version="580.95.05")
    found = {}
    for node in sorted(os.listdir(tmp_path / "dev")):
        info = os.stat(tmp_path / "dev" / node)
        assert stat.S_ISCHR(info.st_mode)
        found[node] = (os.major(info.st_rdev), os.minor(info.st_rdev))
    assert found == {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "nvidia-modeset": (195, 254),
                     "nvidia-uvm": (509, 0), "nvidia-uvm-tools": (509, 1)}
    version = (tmp_path / "proc" / "driver" / "nvidia" / "version").read_text()
    assert version.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build")
    assert "509 nvidia-uvm" in (tmp_path / "proc" / "devices").read_text()
    listed = subprocess.run([kit["nvidia_smi"], "--query-gpu=index,driver_version", "--format=csv,noheader"], capture_output=True,
                            text=True, timeout=30, check=True).stdout
    assert listed == "0, 580.95.05\n1, 580.95.05\n"
    # A driver update moves the uvm major: a second run replaces the nodes.
    create_kit(str(tmp_path), uvm_major=511, gpus=1)
    assert os.major(os.stat(tmp_path / "dev" / "nvidia-uvm").st_rdev) == 511
    assert not os.path.exists(tmp_path / "dev" / "nvidia1")
