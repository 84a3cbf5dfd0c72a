# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU kit: what an NVIDIA host shows, without a GPU.

Character nodes with NVIDIA's majors (195:minor for each GPU, 195:255 nvidiactl, 195:254 nvidia-modeset, a chosen
dynamic major for nvidia-uvm (minor 0) and nvidia-uvm-tools (minor 1)); what the kernel module shows under
/proc/driver/nvidia (the version file, and one gpus/<bus>/information file per GPU); the GPUs' memory, a ledger every
container of the node shares (DIR/gpu-memory); and the node's nvidia-smi. The driver's behaviour (which GPUs a process
may open, their memory, nvidia-smi's answers and refusals) is the driver stand-in's,
simulators/standins/nvidia_driver/nvidia_standin.py, copied into the kit: the node's nvidia-smi and the containers'
(installed by the installer stand-in) are the same program.

Opening a node fails with ENXIO (no driver behind the major), which is what makes a devices-cgroup test possible:
ENXIO = allowed, EPERM = not allowed. The GPUs' device minors are not in nvidia-smi's index order (pairs swapped:
index 0 is /dev/nvidia1), as on real hosts where minors follow the order the driver probed the boards: whatever maps
an index to a node by its number fails here too.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import stat
import sys
import time
import uuid

from pve_sim import gpu_host

NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
MAX_GPUS = 32
DEFAULT_GPU_NAME = "NVIDIA RTX A6000"
DEFAULT_MEMORY_MIB = 49140  # nvidia-smi --query-gpu=memory.total of an RTX A6000
KIT_RECORD = "kit.json"
DRIVER_STANDIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "standins",
                              "nvidia_driver", "nvidia_standin.py")

# The version line of the open kernel module, e.g. from a dmesg quoted publicly:
# "NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Sun Jul 27 06:54:38 UTC 2025"
VERSION_TEMPLATE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (pve-sim@gpu-kit)  {date}\n"
                    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n")

NVIDIA_SMI = """#!%(python)s
# pve-sim GPU kit: the node's nvidia-smi, answered by the driver stand-in (no GPU behind it).
import sys
sys.path.insert(0, %(lib)r)
import nvidia_standin
sys.exit(nvidia_standin.main(["--config", %(config)r] + sys.argv[1:]))
"""


# Where a container of the node sees the kit's driver state (pve-sim binds it into every container it starts, as a real
# container sees the host's /proc/driver/nvidia): the stand-in installer's nvidia-smi and the SGLang simulator read it
# there (scripts/sandbox-mirror.py gives the installer these paths).
CONTAINER_PROC_DIR = "/srv/host-proc-driver-nvidia"
CONTAINER_LEDGER_DIR = "/srv/host-gpu-memory-ledger"
# The kit's procfs files of the node (devices, cmdline): where a real container reads the host's /proc/devices (not
# namespaced) for the uvm major, a sandbox container reads the kit's here (the GPU preflight's proc_devices).
CONTAINER_HOST_PROC_DIR = "/srv/host-proc"


def driver_mounts(root):
    """(host directory, path in the container, read-only) of the kit at ``root`` for a container; none without a kit."""
    if not root:
        return []
    return [(os.path.join(root, "proc", "driver", "nvidia"), CONTAINER_PROC_DIR, True),
            (os.path.join(root, "gpu-memory"), CONTAINER_LEDGER_DIR, False),
            (os.path.join(root, "proc"), CONTAINER_HOST_PROC_DIR, True)]


def load_driver_standin():
    """The driver stand-in module (simulators/standins/nvidia_driver/nvidia_standin.py)."""
    spec = importlib.util.spec_from_file_location("nvidia_standin", DRIVER_STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mknod(path, major, minor, mode=0o666):
    try:
        info = os.stat(path)
        if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == major and os.minor(info.st_rdev) == minor:
            os.chmod(path, mode)
            return False
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)
    return True


def kit_gpus(count, gpu_name=DEFAULT_GPU_NAME, memory_mib=DEFAULT_MEMORY_MIB, topology=gpu_host.DEFAULT_TOPOLOGY):
    """The kit's GPUs in PCI order (nvidia-smi's index order), each with its device minor (pairs swapped)."""
    if not 0 <= count <= MAX_GPUS:
        raise ValueError("a GPU kit has 0 to %d GPUs, not %d" % (MAX_GPUS, count))
    gpus = []
    for index, bus_id in enumerate(gpu_host.gpu_bus_ids(topology, count)):
        minor = index ^ 1 if (index ^ 1) < count else index
        gpus.append({"index": index, "minor": minor, "name": gpu_name, "memory_total_mib": memory_mib,
                     "uuid": "GPU-%08x-5e1d-4c0a-9b7e-%012x" % (0x5e1d0000 + index, index), "bus_id": bus_id})
    return gpus


def read_record(root):
    """The kit's kit.json ({} without one)."""
    try:
        with open(os.path.join(root, KIT_RECORD), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def create_kit(root, uvm_major, gpus=2, driver_version="580.95.05", dev_dir=None, cuda_version="13.0", gpu_name=DEFAULT_GPU_NAME,
               memory_mib=DEFAULT_MEMORY_MIB, topology=gpu_host.DEFAULT_TOPOLOGY, iommu=gpu_host.DEFAULT_IOMMU,
               kernel=gpu_host.DEFAULT_KERNEL, faults=(), boot_id=None):
    """Create the kit under ``root`` (dev nodes in ``dev_dir``, default ROOT/dev); returns a description of what exists.
    ``topology``, ``iommu``, ``kernel``: the node's hardware and kernel (gpu_host); ``faults``: gpu_host fault switches
    ("NAME" or "NAME=VALUE" strings, or {"name", "value"} as kit.json keeps them); ``boot_id``: the node's boot ID
    (ROOT/proc/sys/kernel/random/boot_id), default the kit's own so far or a new one."""
    if topology not in gpu_host.TOPOLOGIES:
        raise ValueError("topology must be one of %s, not %r" % (", ".join(gpu_host.TOPOLOGIES), topology))
    if iommu not in gpu_host.IOMMU_MODES:
        raise ValueError("iommu must be one of %s, not %r" % (", ".join(gpu_host.IOMMU_MODES), iommu))
    faults = [fault if isinstance(fault, dict) else gpu_host.parse_fault(fault, gpus) for fault in faults]
    dev_dir = dev_dir or os.path.join(root, "dev")
    os.makedirs(dev_dir, exist_ok=True)
    described = kit_gpus(gpus, gpu_name, memory_mib, topology)
    description = {"uvm_major": uvm_major, "gpus": gpus, "driver_version": driver_version, "dev_dir": dev_dir,
                   "cuda_version": cuda_version, "gpu_name": gpu_name, "memory_mib": memory_mib, "topology": topology,
                   "iommu": iommu, "kernel": kernel}
    host = gpu_host.write_host(root, described, description, faults, uvm_major, driver_version)
    # The kernel gives every boot a new random ID; the kit keeps its node's until a simulated reboot.
    previous_record = read_record(root)
    boot_id = boot_id or previous_record.get("boot_id") or str(uuid.uuid4())
    # The version file's date is when the module was built: the same after a reboot, new with another driver version.
    module_built = previous_record.get("module_built")
    if not module_built or (previous_record.get("description") or {}).get("driver_version") != driver_version:
        module_built = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    random_dir = os.path.join(root, "proc", "sys", "kernel", "random")
    os.makedirs(random_dir, exist_ok=True)
    with open(os.path.join(random_dir, "boot_id"), "w", encoding="utf-8") as handle:
        handle.write(boot_id + "\n")
    for gpu in described:
        gpu["health"] = gpu_host.gpu_health(gpu["index"], gpu, host["links"], host["found"])
    nodes = [("nvidia%d" % gpu["minor"], NVIDIA_MAJOR, gpu["minor"]) for gpu in described]
    nodes += [("nvidiactl", NVIDIA_MAJOR, CTL_MINOR), ("nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR)]
    uvm_nodes = [("nvidia-uvm", host["uvm_major"], 0), ("nvidia-uvm-tools", host["uvm_major"], 1)]
    if host["uvm_nodes"]:
        nodes += uvm_nodes
    else:
        # Gone with the reboot (a tmpfs /dev) or never made: remove the kit's own.
        for name, _major, _minor in uvm_nodes:
            path = os.path.join(dev_dir, name)
            if os.path.lexists(path) and stat.S_ISCHR(os.lstat(path).st_mode):
                os.unlink(path)
    for minor in range(gpus, MAX_GPUS):
        stale = os.path.join(dev_dir, "nvidia%d" % minor)
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
        handle.write(VERSION_TEMPLATE.format(version=driver_version, date=module_built))
    ledger_dir = os.path.join(root, "gpu-memory")
    standin = load_driver_standin()
    standin.write_driver_state(proc_dir, ledger_dir, described, driver_version,
                               topology=gpu_host.smi_topology(topology, host["tree"], described))
    # ROOT/proc/devices (gpu_host): where a host looks up the dynamic uvm major.
    # The node's nvidia-smi: the driver stand-in, copied into the kit, with the kit's paths.
    lib_dir = os.path.join(root, "usr", "lib", "nvidia-standin")
    os.makedirs(lib_dir, exist_ok=True)
    shutil.copyfile(DRIVER_STANDIN, os.path.join(lib_dir, "nvidia_standin.py"))
    config = os.path.join(lib_dir, "driver.json")
    with open(config, "w", encoding="utf-8") as handle:
        json.dump({"proc_dir": proc_dir, "dev_dir": dev_dir, "ledger_dir": ledger_dir, "driver_version": driver_version,
                   "cuda_version": cuda_version}, handle, sort_keys=True)
    bin_dir = os.path.join(root, "usr", "bin")
    os.makedirs(bin_dir, exist_ok=True)
    smi = os.path.join(bin_dir, "nvidia-smi")
    with open(smi, "w", encoding="utf-8") as handle:
        handle.write(NVIDIA_SMI % {"python": sys.executable, "lib": lib_dir, "config": config})
    os.chmod(smi, 0o755)
    # What remove_kit takes away again (only nodes that are still these devices).
    # (and what gpu-fault re-creates the kit from).
    previous = read_record(root).get("nodes") or []
    made = set(node["path"] for node in created)
    created += [node for node in previous if node["path"] not in made and os.path.lexists(node["path"])]
    with open(os.path.join(root, KIT_RECORD), "w", encoding="utf-8") as handle:
        json.dump({"nodes": created, "description": description, "faults": faults, "boot_id": boot_id,
                   "module_built": module_built}, handle, indent=1, sort_keys=True)
    return dict(host["paths"], root=root, dev_dir=dev_dir, nodes=created, gpus=described, proc_version=version_file,
                proc_dir=proc_dir, ledger_dir=ledger_dir, nvidia_smi=smi, proc_devices=os.path.join(root, "proc", "devices"),
                driver_version=driver_version, uvm_major=host["uvm_major"], topology=topology, iommu=iommu,
                faults=faults, boot_id=boot_id, boot_id_file=os.path.join(root, "proc", "sys", "kernel", "random", "boot_id"))


def set_faults(root, faults, boot_id=None):
    """Re-create the kit at ``root`` from its kit.json with ``faults`` (parsed dicts) instead of its own."""
    record = read_record(root)
    description = record.get("description")
    if not description:
        raise ValueError("no GPU kit at %s (no %s with a description)" % (root, KIT_RECORD))
    return create_kit(root, faults=faults, boot_id=boot_id, **description)


def add_faults(root, names):
    """Add the fault switches ``names`` ("NAME" or "NAME=VALUE") to the kit at ``root``; one of a name replaces the
    one before it (xid adds another line); ``rebooted`` also gives the node a new boot ID; returns the kit."""
    record = read_record(root)
    gpus = (record.get("description") or {}).get("gpus", 0)
    faults = list(record.get("faults") or [])
    rebooted = False
    for name in names:
        fault = gpu_host.parse_fault(name, gpus)
        if fault["name"] != "xid":
            faults = [item for item in faults if item["name"] != fault["name"]]
        faults.append(fault)
        rebooted = rebooted or fault["name"] == "rebooted"
    return set_faults(root, faults, boot_id=str(uuid.uuid4()) if rebooted else None)


def clear_faults(root, names=()):
    """Remove the named fault switches (all without names) from the kit at ``root``; returns the kit."""
    faults = read_record(root).get("faults") or []
    return set_faults(root, [fault for fault in faults if names and fault["name"] not in names])


def remove_kit(root):
    """Remove the device nodes the kit at ``root`` made (each only while it is still that device) and the kit itself."""
    removed = []
    try:
        with open(os.path.join(root, KIT_RECORD), encoding="utf-8") as handle:
            nodes = json.load(handle)["nodes"]
    except (OSError, ValueError, KeyError):
        nodes = []
    for node in nodes:
        try:
            info = os.lstat(node["path"])
        except FileNotFoundError:
            continue
        if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == node["major"] and os.minor(info.st_rdev) == node["minor"]:
            os.unlink(node["path"])
            removed.append(node["path"])
    shutil.rmtree(root, ignore_errors=True)
    return removed


NVIDIA_MODPROBE = """#!/usr/bin/env bash
# pve-sim stand-in for nvidia-modprobe: logs its arguments and (re)creates the GPU kit's nodes, the uvm ones with the
# major in %(major_file)s (a node's driver update changes it), as nvidia-modprobe -c0 -u does on a real node; the kit's
# hardware and GPU faults stay, but for those nvidia-modprobe repairs (gpu-kit --modprobe).
set -eu
echo "$*" >> %(log)s
PYTHONPATH=%(source)s exec %(python)s -m pve_sim gpu-kit --root %(kit)s --uvm-major "$(cat %(major_file)s)" --gpus %(gpus)d \\
  --driver-version %(driver)s --dev-dir %(dev_dir)s%(real_dev)s --modprobe >/dev/null
"""

UDEVADM = """#!/usr/bin/env bash
# pve-sim stand-in for udevadm: logs its arguments.
echo "$*" >> %(log)s
"""

SYSTEMCTL = """#!/usr/bin/env bash
# pve-sim stand-in for the node's systemctl: logs its arguments. The sandbox node runs no systemd, so only daemon-reload
# (nothing to reload) answers; anything else is refused as systemctl refuses it on a machine not booted with systemd.
echo "$*" >> %(log)s
if [ "$*" = daemon-reload ]; then exit 0; fi
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
echo "Failed to connect to bus: Host is down" >&2
exit 1
"""


def write_node_programs(node_root, kit_root, uvm_major, gpus, driver_version, dev_dir, real_dev):
    """Stand-ins for the node's programs the GPU roles call, under ``node_root``: usr/bin/nvidia-modprobe (recreates the
    kit's nodes, logging to nvidia-modprobe.log), usr/bin/udevadm (logs to udevadm.log) and usr/bin/systemctl (logs to
    systemctl.log, answers daemon-reload only); ``node_root``/uvm-major
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
        os.path.join(bin_dir, "systemctl"): SYSTEMCTL % {"log": shlex.quote(os.path.join(node_root, "systemctl.log"))},
    }
    for path, text in programs.items():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o755)
    return {"uvm_major_file": major_file, "programs": sorted(programs)}
