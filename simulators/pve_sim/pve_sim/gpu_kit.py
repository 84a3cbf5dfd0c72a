# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU kit: what an NVIDIA host shows, without a GPU.

Character nodes with NVIDIA's majors (195:N for nvidiaN, 195:255 nvidiactl, 195:254 nvidia-modeset,
a chosen dynamic major for nvidia-uvm (minor 0) and nvidia-uvm-tools (minor 1)), a stand-in for
/proc/driver/nvidia/version in the driver's format, and a stand-in nvidia-smi reporting that version.
Opening a node fails with ENXIO (no driver behind the major), which is what makes a devices-cgroup
test possible: ENXIO = allowed, EPERM = not allowed.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import time

NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254

# The version line of the open kernel module, e.g. from a dmesg quoted publicly:
# "NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Sun Jul 27 06:54:38 UTC 2025"
VERSION_TEMPLATE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (pve-sim@gpu-kit)  {date}\n"
                    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n")

NVIDIA_SMI = r'''#!/usr/bin/env python3
# pve-sim GPU kit stand-in for nvidia-smi: reports the kit's driver version and GPUs; no GPU behind it.
import json, sys
KIT = json.loads(%(kit)r)
args = sys.argv[1:]
gpus = KIT["gpus"]
if "--version" in args or "-v" in args:
    print("NVIDIA-SMI version  : %%s" %% KIT["driver_version"])
    print("NVML version        : %%s" %% ".".join(KIT["driver_version"].split(".")[:2]))
    print("DRIVER version      : %%s" %% KIT["driver_version"])
    print("CUDA Version        : %%s" %% KIT["cuda_version"])
    sys.exit(0)
if "-L" in args or "--list-gpus" in args:
    for gpu in gpus:
        print("GPU %%d: %%s (UUID: %%s)" %% (gpu["index"], gpu["name"], gpu["uuid"]))
    sys.exit(0)
query = [a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")]
if query:
    fields = [f.strip() for f in query[0].split(",")]
    noheader = any("noheader" in a for a in args)
    nounits = any("nounits" in a for a in args)
    names = {"index": "index", "name": "name", "uuid": "uuid", "driver_version": "driver_version", "pci.bus_id": "pci.bus_id",
             "memory.total": "memory.total [MiB]", "memory.used": "memory.used [MiB]", "count": "count"}
    if not noheader:
        print(", ".join(names.get(f, f) for f in fields))
    for gpu in gpus:
        row = []
        for f in fields:
            value = {"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"], "driver_version": KIT["driver_version"],
                     "pci.bus_id": gpu["pci_bus_id"], "memory.total": gpu["memory_mib"], "memory.used": 0, "count": len(gpus)}.get(f)
            if value is None:
                sys.stderr.write('Field "%%s" is not a valid field to query.\n' %% f)
                sys.exit(2)
            if f.startswith("memory.") and not nounits:
                value = "%%s MiB" %% value
            row.append(str(value))
        print(", ".join(row))
    sys.exit(0)
print("+-----------------------------------------------------------------------------------------+")
print("| NVIDIA-SMI %%-22s Driver Version: %%-14s CUDA Version: %%-8s|" %% (KIT["driver_version"], KIT["driver_version"], KIT["cuda_version"]))
print("|-----------------------------------------+------------------------+----------------------+")
for gpu in gpus:
    print("| %%3d  %%-34s | %%-22s | %%20s |" %% (gpu["index"], gpu["name"], gpu["pci_bus_id"], "0MiB / %%dMiB" %% gpu["memory_mib"]))
print("+-----------------------------------------------------------------------------------------+")
'''


def _mknod(path, major, minor, mode=0o666):
    try:
        info = os.stat(path)
        if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == major and os.minor(info.st_rdev) == minor:
            return False
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)
    return True


def create_kit(root, uvm_major, gpus=2, driver_version="580.95.05", dev_dir=None, cuda_version="13.0", gpu_name="NVIDIA H100 80GB HBM3",
               memory_mib=81559):
    """Create the kit under ``root`` (dev nodes in ``dev_dir``, default ROOT/dev); returns a description of what exists."""
    dev_dir = dev_dir or os.path.join(root, "dev")
    os.makedirs(dev_dir, exist_ok=True)
    nodes = []
    for index in range(gpus):
        nodes.append(("nvidia%d" % index, NVIDIA_MAJOR, index))
    nodes += [("nvidiactl", NVIDIA_MAJOR, CTL_MINOR), ("nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR),
              ("nvidia-uvm", uvm_major, 0), ("nvidia-uvm-tools", uvm_major, 1)]
    for index in range(gpus, 16):
        stale = os.path.join(dev_dir, "nvidia%d" % index)
        if os.path.exists(stale):
            os.unlink(stale)
    created = []
    for name, major, minor in nodes:
        path = os.path.join(dev_dir, name)
        _mknod(path, major, minor)
        created.append({"path": path, "major": major, "minor": minor, "type": "c"})
    proc_dir = os.path.join(root, "proc", "driver", "nvidia")
    os.makedirs(proc_dir, exist_ok=True)
    version_file = os.path.join(proc_dir, "version")
    with open(version_file, "w", encoding="utf-8") as handle:
        handle.write(VERSION_TEMPLATE.format(version=driver_version, date=time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())))
    # /proc/devices stand-in: where a host looks up the dynamic uvm major.
    with open(os.path.join(root, "proc", "devices"), "w", encoding="utf-8") as handle:
        handle.write("Character devices:\n  1 mem\n  5 /dev/tty\n195 nvidia-frontend\n%3d nvidia-uvm\n\nBlock devices:\n  7 loop\n" % uvm_major)
    kit = {"driver_version": driver_version, "cuda_version": cuda_version, "gpus": [
        {"index": index, "name": gpu_name, "uuid": "GPU-%08x-5e1d-4c0a-9b7e-%012x" % (0x5e1d0000 + index, index),
         "pci_bus_id": "00000000:%02X:00.0" % (0x18 + index * 0x10), "memory_mib": memory_mib} for index in range(gpus)]}
    bin_dir = os.path.join(root, "usr", "bin")
    os.makedirs(bin_dir, exist_ok=True)
    smi = os.path.join(bin_dir, "nvidia-smi")
    with open(smi, "w", encoding="utf-8") as handle:
        handle.write(NVIDIA_SMI % {"kit": json.dumps(kit)})
    os.chmod(smi, 0o755)
    return {"root": root, "dev_dir": dev_dir, "nodes": created, "proc_version": version_file, "nvidia_smi": smi,
            "proc_devices": os.path.join(root, "proc", "devices"), "driver_version": driver_version, "uvm_major": uvm_major}


NVIDIA_MODPROBE = """#!/usr/bin/env bash
# pve-sim stand-in for nvidia-modprobe: logs its arguments and (re)creates the GPU kit's nodes, the uvm ones with the
# major in %(major_file)s (a node's driver update changes it), as nvidia-modprobe -c0 -u does on a real node.
set -eu
echo "$*" >> %(log)s
PYTHONPATH=%(source)s exec %(python)s -m pve_sim gpu-kit --root %(kit)s --uvm-major "$(cat %(major_file)s)" --gpus %(gpus)d \\
  --driver-version %(driver)s --dev-dir %(dev_dir)s%(real_dev)s >/dev/null
"""

UDEVADM = """#!/usr/bin/env bash
# pve-sim stand-in for udevadm: logs its arguments.
echo "$*" >> %(log)s
"""


def write_node_programs(node_root, kit_root, uvm_major, gpus, driver_version, dev_dir, real_dev):
    """Stand-ins for the node's programs the GPU roles call, under ``node_root``: usr/bin/nvidia-modprobe (recreates the
    kit's nodes, logging to nvidia-modprobe.log) and usr/bin/udevadm (logs to udevadm.log); ``node_root``/uvm-major
    holds the uvm major nvidia-modprobe uses. Returns the paths written."""
    bin_dir = os.path.join(node_root, "usr", "bin")
    os.makedirs(bin_dir, exist_ok=True)
    major_file = os.path.join(node_root, "uvm-major")
    with open(major_file, "w", encoding="utf-8") as handle:
        handle.write("%d\n" % uvm_major)
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    quoted = dict((key, shlex.quote(value)) for key, value in (
        ("major_file", major_file), ("log", os.path.join(node_root, "nvidia-modprobe.log")), ("source", source),
        ("python", sys.executable), ("kit", kit_root), ("driver", driver_version), ("dev_dir", dev_dir)))
    programs = {
        os.path.join(bin_dir, "nvidia-modprobe"): NVIDIA_MODPROBE % dict(quoted, gpus=gpus, real_dev=" --real-dev" if real_dev else ""),
        os.path.join(bin_dir, "udevadm"): UDEVADM % {"log": shlex.quote(os.path.join(node_root, "udevadm.log"))},
    }
    for path, text in programs.items():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o755)
    return {"uvm_major_file": major_file, "programs": sorted(programs)}
