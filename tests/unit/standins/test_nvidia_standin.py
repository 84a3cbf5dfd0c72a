# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA driver stand-in (simulators/standins/nvidia_driver/nvidia_standin.py) says no where the driver says no:
a node the cgroup denies, a node that is not there, nvidiactl missing or unreadable, GPU memory another process holds,
a userspace of another version; and gives memory back when its holder dies."""
from __future__ import annotations

import errno
import importlib.util
import io
import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

STANDIN = pathlib.Path(__file__).resolve().parents[3] / "simulators" / "standins" / "nvidia_driver" / "nvidia_standin.py"
_spec = importlib.util.spec_from_file_location("nvidia_standin", str(STANDIN))
ns = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ns)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-in's device nodes need mknod (root)")

VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (pve-sim@gpu-kit)  "
           "Tue Sep 30 10:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
GPUS = [{"bus_id": "0000:%02x:00.0" % (0x11 + index * 7), "uuid": "GPU-%08x-5e1d-4c0a-9b7e-%012x" % (0x5e1d0000 + index, index),
         "name": "NVIDIA RTX A6000", "minor": index ^ 1, "memory_total_mib": 49140} for index in range(4)]


class Kit:
    """A node's driver state in a temporary directory: proc files, memory ledger, device nodes (by minor)."""

    def __init__(self, root, minors=None, ctl=True):
        self.root = root
        self.proc, self.dev, self.ledger = root / "proc", root / "dev", root / "ledger"
        self.dev.mkdir()
        ns.write_driver_state(str(self.proc), str(self.ledger), GPUS, "580.95.05")
        (self.proc / "version").write_text(VERSION)
        for minor in (minors if minors is not None else [gpu["minor"] for gpu in GPUS]):
            os.mknod(str(self.dev / ("nvidia%d" % minor)), stat.S_IFCHR | 0o666, os.makedev(195, minor))
        if ctl:
            os.mknod(str(self.dev / "nvidiactl"), stat.S_IFCHR | 0o666, os.makedev(195, 255))
        self.config = root / "driver.json"
        self.config.write_text(json.dumps({"proc_dir": str(self.proc), "dev_dir": str(self.dev), "ledger_dir": str(self.ledger),
                                           "driver_version": "580.95.05"}))

    def driver(self, opener=None, driver_version="580.95.05"):
        return ns.Driver(str(self.proc), str(self.dev), str(self.ledger), driver_version, opener=opener)

    def smi(self, *args, driver=None):
        out = io.StringIO()
        code = ns.nvidia_smi(list(args), driver or self.driver(), out=out, err=out)
        return code, out.getvalue()


@pytest.fixture
def kit(tmp_path):
    return Kit(tmp_path)


def denying(denied):
    """An open(2) that fails with EPERM (the devices cgroup) for the paths in ``denied``, ENXIO otherwise (no driver)."""
    def opener(path):
        raise OSError(errno.EPERM if os.path.basename(path) in denied else errno.ENXIO, "stand-in")
    return opener


def test_every_gpu_whose_node_opens_is_listed_in_pci_order_with_its_minor(kit):
    code, text = kit.smi("--query-gpu=index,uuid,pci.bus_id,memory.total,memory.used", "--format=csv,noheader,nounits")
    assert code == 0
    assert text.splitlines()[:2] == ["0, %s, 00000000:11:00.0, 49140, 0" % GPUS[0]["uuid"],
                                     "1, %s, 00000000:18:00.0, 49140, 0" % GPUS[1]["uuid"]]


def test_a_gpu_whose_node_is_missing_or_denied_is_not_listed_and_the_rest_are_renumbered(tmp_path):
    kit = Kit(tmp_path, minors=[1, 3, 2])  # GPU 1 (minor 0) was not passed in
    code, text = kit.smi("-L", driver=kit.driver(opener=denying({"nvidia2"})))  # GPU 3 (minor 2) denied by the cgroup
    assert code == 0
    assert text.splitlines() == ["GPU 0: NVIDIA RTX A6000 (UUID: %s)" % GPUS[0]["uuid"],
                                 "GPU 1: NVIDIA RTX A6000 (UUID: %s)" % GPUS[2]["uuid"]]
    # The node index is kept for the process that maps it (usable_gpus), the container's own numbering is nvidia-smi's.
    assert [gpu.index for gpu in kit.driver(opener=denying({"nvidia2"})).usable_gpus()] == [0, 2]


def test_no_openable_gpu_is_nvidia_smis_no_devices(tmp_path):
    kit = Kit(tmp_path, minors=[])
    assert kit.smi("-L") == (ns.EXIT_NOT_FOUND, "No devices were found\n")


@pytest.mark.parametrize("problem, code, message", [
    ("missing", ns.EXIT_DRIVER_NOT_LOADED, ns.DRIVER_NOT_LOADED),
    ("EPERM", ns.EXIT_UNKNOWN, "Failed to initialize NVML: Unknown Error"),
    ("EACCES", ns.EXIT_NO_PERMISSION, "Failed to initialize NVML: Insufficient Permissions"),
])
def test_nvml_does_not_start_without_an_openable_nvidiactl(tmp_path, problem, code, message):
    kit = Kit(tmp_path, ctl=problem != "missing")

    def opener(path):
        if os.path.basename(path) == "nvidiactl":
            raise OSError(getattr(errno, problem), "stand-in")
        raise OSError(errno.ENXIO, "stand-in")

    assert kit.smi("-L", driver=kit.driver(opener=opener)) == (code, message + "\n")


def test_a_node_with_the_name_but_another_device_is_not_the_gpu(tmp_path):
    kit = Kit(tmp_path, minors=[0, 2, 3])
    os.mknod(str(kit.dev / "nvidia1"), stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    assert [gpu.uuid for gpu in kit.driver().visible_gpus()] == [GPUS[1]["uuid"], GPUS[2]["uuid"], GPUS[3]["uuid"]]


def test_another_userspace_version_or_no_module_fails_like_nvml(kit):
    assert kit.smi("-L", driver=kit.driver(driver_version="580.82.07")) == (
        18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.82\n")
    (kit.proc / "version").unlink()
    assert kit.smi("-L") == (ns.EXIT_DRIVER_NOT_LOADED, ns.DRIVER_NOT_LOADED + "\n")


def test_memory_is_the_nodes_a_second_holder_is_refused_and_the_holders_are_named(kit):
    driver = kit.driver()
    gpu = driver.visible_gpus()[0]
    first = driver.allocate(gpu, 40000, "sglang::scheduler_TP0")
    with pytest.raises(ns.OutOfMemory) as refused:
        driver.allocate(gpu, 10000, "sglang::scheduler_TP0")
    assert (refused.value.requested_mib, refused.value.free_mib) == (10000, 9140)
    assert [holder["pid"] for holder in refused.value.holders] == [os.getpid()]
    with pytest.raises(ns.OutOfMemory):
        first.resize(50000)
    assert first.mib == 40000
    code, text = kit.smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader")
    assert text == "%d, sglang::scheduler_TP0, 40000 MiB, %s\n" % (os.getpid(), gpu.uuid)
    first.release()
    assert driver.memory_used_mib(gpu) == 0


def test_the_memory_of_a_process_that_died_is_free_at_once(kit, tmp_path):
    holder = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); import nvidia_standin as ns; "
         "d = ns.Driver.from_config(%r); a = d.allocate(d.visible_gpus()[0], 30000, 'holder'); "
         "print('held', flush=True); time.sleep(300)" % (str(STANDIN.parent), str(kit.config))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        gpu = kit.driver().visible_gpus()[0]
        assert kit.driver().memory_used_mib(gpu) == 30000
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()
    # The record is still on disk; its lock is gone with the process, and so is the memory.
    assert list((kit.ledger / "allocations").glob("*.json"))
    assert kit.driver().memory_used_mib(gpu) == 0


def test_an_allocation_is_never_written_through_a_symlink(kit):
    driver = kit.driver()
    allocation = driver.allocate(driver.visible_gpus()[0], 100, "x")
    target = kit.root / "elsewhere"
    target.write_text("keep")
    temporary = pathlib.Path("%s.%d.tmp" % (allocation.path, os.getpid()))
    temporary.symlink_to(target)
    with pytest.raises(OSError):
        allocation.resize(200)
    assert target.read_text() == "keep"


def test_cuda_visible_devices_follows_cudas_rules(kit):
    gpus = kit.driver().usable_gpus()
    pick = ns.cuda_visible_devices
    assert pick(gpus, None) == gpus
    assert [gpu.uuid for gpu in pick(gpus, "2,0")] == [GPUS[2]["uuid"], GPUS[0]["uuid"]]
    assert [gpu.uuid for gpu in pick(gpus, "GPU-5e1d0003")] == [GPUS[3]["uuid"]]
    # The list ends at the first entry that names no device, or one already named.
    assert [gpu.index for gpu in pick(gpus, "1,7,2")] == [1]
    assert [gpu.index for gpu in pick(gpus, "1,1,2")] == [1]
    assert pick(gpus, "") == [] and pick(gpus, "-1") == []
    assert pick(gpus, "GPU-5e1d") == []  # ambiguous prefix


def test_the_installed_nvidia_smi_runs_from_its_config_and_says_when_it_has_none(kit, tmp_path):
    ran = subprocess.run([sys.executable, str(STANDIN), "--config", str(kit.config), "-L"], capture_output=True, text=True,
                         timeout=30, check=False)
    assert ran.returncode == 0 and ran.stdout.count("GPU ") == 4
    missing = subprocess.run([sys.executable, str(STANDIN), "--config", str(tmp_path / "none.json"), "-L"], capture_output=True,
                             text=True, timeout=30, check=False)
    assert missing.returncode == 12 and "couldn't find libnvidia-ml.so" in missing.stdout


def test_a_query_of_an_unknown_field_or_without_csv_is_refused(kit):
    assert kit.smi("--query-gpu=power.draw", "--format=csv")[0] == ns.EXIT_INVALID_ARGUMENT
    assert kit.smi("--query-gpu=index")[0] == ns.EXIT_INVALID_ARGUMENT
