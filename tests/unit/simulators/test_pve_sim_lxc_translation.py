# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's translation of a PVE container config into an LXC config, and the GPU kit's files."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import configfile, idmap, pct_config  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.gpu_kit import create_kit, write_node_programs  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim import runtime as runtime_module  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.runtime import TaskFailed, parse_cpuset, render_lxc_config, translate_raw  # noqa: E402  pylint: disable=wrong-import-position

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


def test_configs_are_read_with_the_simulators_own_parser(tmp_path):
    (tmp_path / "120.conf").write_text(CONFIG)
    config, raw, digest = configfile.load(str(tmp_path), 120)
    assert isinstance(config, pct_config.PctConfig) and raw == CONFIG
    assert digest == hashlib.sha1(CONFIG.encode("utf-8")).hexdigest()
    # CONFIG is in PVE's own order, so writing it back changes nothing.
    assert config.render() == CONFIG
    assert os.path.dirname(pct_config.__file__) == os.path.join(SIM_SOURCE, "pve_sim")


def test_cgroup_v1_host_gets_v1_keys_for_limits_devices_and_raw_lines():
    lines = render_lxc_config(120, pct_config.parse(CONFIG), "/r", 1).splitlines()
    null = os.stat("/dev/null").st_rdev
    zero = os.stat("/dev/zero").st_rdev
    assert "lxc.cgroup.memory.limit_in_bytes = 2147483648" in lines
    assert "lxc.cgroup.devices.allow = c %d:%d r" % (os.major(null), os.minor(null)) in lines
    assert "lxc.cgroup.devices.deny = c %d:%d w" % (os.major(null), os.minor(null)) in lines
    assert "lxc.cgroup.devices.allow = c %d:%d rw" % (os.major(zero), os.minor(zero)) in lines
    # dev[n]: the copy PVE's prestart hook makes below the passthrough directory, not the host node.
    assert "lxc.mount.entry = /var/lib/lxc/120/passthrough/dev/zero dev/zero none bind,create=file 0 0" in lines
    assert not [line for line in lines if line.startswith("lxc.mount.entry = /dev/zero ")]
    assert lines.count("lxc.cgroup.devices.allow = c 195:* rwm") == 1 and "lxc.cgroup.devices.allow = c 508:* rwm" in lines
    assert "# dropped (no equivalent on cgroup v1): lxc.cgroup2.cpu.weight = 50" in lines
    assert "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file" in lines
    assert "lxc.cgroup.cpuset.cpus = 0" in lines and "lxc.uts.name = gpu1" in lines and "lxc.rootfs.path = dir:/r" in lines
    assert not [line for line in lines if line.startswith("lxc.cgroup2.")]


# What only an unprivileged container gets (update_lxc_config, PVE's userns.conf.d/01-pve.conf).
USERNS_V1 = ["lxc.include = /usr/share/lxc/config/userns.conf", "lxc.cgroup.devices.deny =", "lxc.cgroup.devices.allow =",
             "lxc.cgroup.devices.allow = a"]
DEFAULT_IDMAP = ["lxc.idmap = u 0 100000 65536", "lxc.idmap = g 0 100000 65536"]


def test_a_privileged_container_keeps_the_allow_list_of_common_conf_and_no_id_map():
    for text in (CONFIG, CONFIG + "unprivileged: 0\n"):
        lines = render_lxc_config(120, pct_config.parse(text), "/r", 1).splitlines()
        assert lines[1] == "lxc.include = /usr/share/lxc/config/common.conf"
        assert not set(USERNS_V1 + DEFAULT_IDMAP + ["lxc.mount.auto = sys:mixed"]) & set(lines)
        assert not [line for line in lines if line.startswith("lxc.idmap")]


def test_an_unprivileged_container_gets_the_id_map_and_a_deny_list_devices_cgroup():
    config = pct_config.parse(CONFIG + "unprivileged: 1\n")
    lines = render_lxc_config(120, config, "/r", 1, passthrough_dir="/s/lxc/pvesimab12cd-120/passthrough").splitlines()
    # userns.conf right after common.conf, then the reset and "allow everything" of PVE's 01-pve.conf.
    assert lines[1:6] == ["lxc.include = /usr/share/lxc/config/common.conf"] + USERNS_V1
    assert "lxc.mount.auto = sys:mixed" in lines
    assert [line for line in lines if line.startswith("lxc.idmap")] == DEFAULT_IDMAP
    # update_lxc_config's own lines for dev[n] still follow the reset (a deny-write still denies writing).
    null = os.stat("/dev/null").st_rdev
    deny_write = "lxc.cgroup.devices.deny = c %d:%d w" % (os.major(null), os.minor(null))
    assert lines.index(deny_write) > lines.index("lxc.cgroup.devices.allow = a")
    assert "lxc.mount.entry = /s/lxc/pvesimab12cd-120/passthrough/dev/null dev/null none bind,create=file 0 0" in lines
    assert "lxc.mount.entry = /s/lxc/pvesimab12cd-120/passthrough/dev/zero dev/zero none bind,create=file 0 0" in lines
    # Raw lines as they are (the GPU "raw" style binds the host node itself).
    assert "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file" in lines
    v2 = render_lxc_config(120, config, "/r", 2).splitlines()
    assert v2[2:6] == ["lxc.include = /usr/share/lxc/config/userns.conf", "lxc.cgroup2.devices.deny =", "lxc.cgroup2.devices.allow =",
                       "lxc.cgroup2.devices.allow = a"]


def test_a_raw_lxc_idmap_line_is_a_custom_map_that_replaces_the_default():
    custom = "lxc.idmap: u 0 200000 65536\nlxc.idmap: g 0 200000 65536\n"
    for flag in ("unprivileged: 1\n", "unprivileged: 0\n"):
        # A custom map makes the container unprivileged even without the flag ($conf->{unprivileged} || $custom_idmap).
        config = pct_config.parse(CONFIG + flag + custom)
        lines = render_lxc_config(120, config, "/r", 1).splitlines()
        assert [line for line in lines if line.startswith("lxc.idmap")] == ["lxc.idmap = u 0 200000 65536", "lxc.idmap = g 0 200000 65536"]
        assert set(USERNS_V1) <= set(lines)
        id_map, root_uid, root_gid = idmap.config_id_maps(config)
        assert (root_uid, root_gid) == (200000, 200000) and idmap.map_to_host(44, id_map, "g") == 200044
    privileged = idmap.config_id_maps(pct_config.parse(CONFIG))
    assert privileged == ([], 0, 0) and idmap.map_to_host(44, privileged[0], "g") == 44
    assert idmap.map_to_host(70000, list(idmap.DEFAULT_ID_MAP), "u") == 70000  # outside the map: unmapped, as PVE leaves it
    with pytest.raises(TaskFailed, match="^failed to parse idmap: u 0 100000$"):
        idmap.config_id_maps(pct_config.parse("lxc.idmap: u 0 100000\n"))


def test_a_container_without_console_gets_no_dev_console():
    lines = render_lxc_config(120, pct_config.parse("console: 0\nunprivileged: 1\n"), "/r", 1).splitlines()
    assert "lxc.console.path = none" in lines
    assert lines.index("lxc.cgroup.devices.deny = c 5:1 rwm") > lines.index("lxc.cgroup.devices.allow = a")
    assert "lxc.console.path = none" not in render_lxc_config(120, pct_config.parse("console: 1\n"), "/r", 1).splitlines()


def test_cgroup_v2_host_keeps_v2_keys_and_a_hybrid_nodes_v1_ones():
    config = pct_config.parse(CONFIG + "lxc.cgroup.devices.allow: c 10:200 rwm\n")
    lines = render_lxc_config(120, config, "/r", 2, node_cgroup_version=1).splitlines()
    assert "lxc.cgroup2.memory.max = 2147483648" in lines and "lxc.cgroup2.devices.allow = c 10:200 rwm" in lines
    # A hybrid node's devices controller is v1: its v2 settings are not applied.
    assert "# ignored (not applied on the node's cgroup v1): lxc.cgroup2.devices.allow = c 195:* rwm" in lines
    lines = render_lxc_config(120, config, "/r", 2).splitlines()
    assert "lxc.cgroup2.devices.allow = c 195:* rwm" in lines and "lxc.cgroup2.cpu.weight = 50" in lines
    assert translate_raw("lxc.cgroup2.memory.max", "1G", 1) == ("lxc.cgroup.memory.limit_in_bytes", "1G")
    assert translate_raw("lxc.environment", "A=1", 1) == ("lxc.environment", "A=1")


def test_a_pure_cgroup_v2_node_applies_no_v1_setting_on_either_host():
    # LXC on such a node ignores every lxc.cgroup.* setting (cgfsng_setup_limits_legacy), whatever this host mounts:
    # a v1 devices.allow line there allows nothing, so the simulator must not translate it into one that would.
    config = pct_config.parse("lxc.cgroup.devices.allow: c 10:200 rwm\nlxc.cgroup.relative: 1\nlxc.cgroup2.devices.allow: c 1:3 rwm\n")
    assert [entry.key for entry in runtime_module.ignored_on_node(config, 2)] == ["lxc.cgroup.devices.allow"]
    for host in (1, 2):
        lines = render_lxc_config(120, config, "/r", host).splitlines()
        assert not [line for line in lines if "10:200" in line and not line.startswith("# ignored")]
        assert "# ignored (not applied on the node's cgroup v2): lxc.cgroup.devices.allow = c 10:200 rwm" in lines
        # LXC's own key is not a cgroup setting; the v2 one is applied as this host needs it.
        assert "lxc.cgroup.relative = 1" in lines
        assert ("lxc.cgroup.devices.allow = c 1:3 rwm" if host == 1 else "lxc.cgroup2.devices.allow = c 1:3 rwm") in lines


def test_a_missing_or_non_device_dev_entry_fails_like_pve():
    with pytest.raises(TaskFailed, match="^Device /dev/pve-sim-nothing-here does not exist$"):
        render_lxc_config(1, pct_config.parse("dev0: /dev/pve-sim-nothing-here\n"), "/r", 1)
    with pytest.raises(TaskFailed, match="is not a device$"):
        render_lxc_config(1, pct_config.parse("dev0: /dev/\n"), "/r", 1)


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


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_node_stand_ins_recreate_the_kit_with_the_current_uvm_major_and_log_their_calls(tmp_path):
    kit = create_kit(str(tmp_path / "kit"), uvm_major=508, gpus=2)
    root = tmp_path / "root"
    written = write_node_programs(str(root), kit["root"], 508, 2, "580.95.05", kit["dev_dir"], real_dev=False)
    assert written["programs"] == [str(root / "usr/bin/nvidia-modprobe"), str(root / "usr/bin/systemctl"), str(root / "usr/bin/udevadm")]
    # A driver update on the node: the uvm nodes are gone and the driver now has another major.
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        os.unlink(os.path.join(kit["dev_dir"], name))
    (root / "uvm-major").write_text("509\n")
    subprocess.run([str(root / "usr/bin/nvidia-modprobe"), "-c0", "-u"], check=True, timeout=60)
    assert [os.major(os.stat(os.path.join(kit["dev_dir"], name)).st_rdev) for name in ("nvidia-uvm", "nvidia-uvm-tools")] == [509, 509]
    subprocess.run([str(root / "usr/bin/udevadm"), "control", "--reload-rules"], check=True, timeout=30)
    assert (root / "nvidia-modprobe.log").read_text() == "-c0 -u\n"
    assert (root / "udevadm.log").read_text() == "control --reload-rules\n"


def test_cores_take_the_cpus_the_other_running_containers_use_least(monkeypatch):
    # pvestatd's rebalance_lxc_containers spreads one-core containers over the node's CPUs: on two CPUs, four
    # containers end up on 0, 1, 0, 1 (pinning them all to CPU 0 would make a fleet look serial).
    monkeypatch.setattr(runtime_module.os, "cpu_count", lambda: 2)
    config = pct_config.parse("hostname: ct\ncores: 1\n")
    placed, load = [], [0, 0]
    for _container in range(4):
        lines = render_lxc_config(120, config, "/r", 1, cpu_load=load).splitlines()
        cpus = [line.split("=", 1)[1].strip() for line in lines if line.startswith("lxc.cgroup.cpuset.cpus")]
        placed.append(cpus[0])
        load[int(cpus[0])] += 1
    assert placed == ["0", "1", "0", "1"]
    two = pct_config.parse("hostname: ct\ncores: 2\n")
    assert "lxc.cgroup.cpuset.cpus = 0-1" in render_lxc_config(120, two, "/r", 1, cpu_load=[5, 3]).splitlines()


def test_cpuset_lists_are_read_as_the_kernel_writes_them():
    assert parse_cpuset("0-2,5") == {0, 1, 2, 5}
    assert parse_cpuset(" 1 ") == {1}
    assert parse_cpuset("") == set() and parse_cpuset("x-1,3") == {3}
