# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A STAND-IN for what NVIDIA's driver shows userspace, for tests only: no GPU, no driver behind it.

One file, standard library only (Python >= 3.7), used three ways: the GPU kit's nvidia-smi on the simulated Proxmox
node, the nvidia-smi and the "CUDA driver" the stand-in installer puts into a container, and the SGLang simulator,
which asks it which GPUs its ranks can use and takes their memory from it. It answers what the real driver answers and
refuses what the real driver refuses, from the same evidence:

- The GPUs the kernel module drives: ``<proc_dir>/gpus/<domain:bus:device.function>/information``, the real file
  format (``Model:``, ``GPU UUID:``, ``Bus Location:``, ``Device Minor:``), in PCI bus order, which is nvidia-smi's
  index order. Inside an LXC container that directory lists every GPU of the node (procfs is the host's).
- Which of them a process may use: the character node ``<dev_dir>/nvidia<Device Minor>`` must exist with major 195
  and that minor, and opening it must get past the devices cgroup and the file permissions. A kit node has no driver
  behind its major, so an allowed open fails with ENXIO (a real node would open); EPERM is the devices cgroup saying
  no, EACCES the node's owner and mode, ENOENT a node that was not passed in.
- ``/dev/nvidiactl`` first, as NVML does: missing, denied by the cgroup or by its mode, NVML cannot initialise, and
  nvidia-smi prints what it prints then (``NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA
  driver...``, ``Failed to initialize NVML: Unknown Error``, ``Failed to initialize NVML: Insufficient Permissions``).
- GPU memory is the node's: a ledger directory shared by every container of the node holds each GPU's total
  (``hardware.json``, what the GPU itself would report) and one allocation file per process and GPU. A process owns
  its allocation for as long as it holds an flock on the allocation's lock file, so the memory of a process that died
  is free again at once, as the driver frees it, whatever container the process ran in. Allocations are checked and
  made under one ledger-wide lock: two servers cannot both take the last free memory.

- What the GPUs report about themselves (persistence mode, PCIe link generation and width, ECC mode, retired pages and
  remapped rows) is in the ledger's ``hardware.json`` beside their memory, each GPU's ``health`` (healthy values when
  absent); how they are connected (``nvidia-smi topo -m``'s matrix, CPU and NUMA affinity) in the ledger's
  ``topology.json``, both written by the GPU kit from its hardware description and faults.

``python3 nvidia_standin.py --config FILE [nvidia-smi arguments]`` is nvidia-smi; the installer and the GPU kit write
FILE (``driver.json``: proc_dir, version_path (default proc_dir/version), dev_dir, ledger_dir, driver_version,
cuda_version).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import sys
import time
import uuid as uuid_module

NVIDIA_MAJOR = 195
CTL_MINOR = 255
# Where the stand-in installer puts this file and its driver.json (beside the userspace driver's libraries).
INSTALLED_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"
CONFIG_NAME = "driver.json"
HARDWARE_NAME = "hardware.json"
TOPOLOGY_NAME = "topology.json"
ALLOCATIONS_DIR = "allocations"
LEDGER_LOCK = ".ledger.lock"

# nvidia-smi's exit codes (nvidia-smi(1), RETURN VALUE) and NVML's messages for the failures a container meets.
EXIT_INVALID_ARGUMENT = 2
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_VERSION_MISMATCH = 18
EXIT_UNKNOWN = 255
DRIVER_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                     "latest NVIDIA driver is installed and running.")
UNKNOWN_ERROR = "Failed to initialize NVML: Unknown Error"
NO_PERMISSION = "Failed to initialize NVML: Insufficient Permissions"
VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
NO_DEVICES = "No devices were found"

# What a healthy GPU reports (nvidia-smi --query-gpu, noheader,nounits), as the H200 captured with driver 580.159.04
# (tests/unit/plugins/module_utils/data/gpu_preflight/h200-vm-580.159.04/query-gpu-csv.txt): persistence Enabled, link
# at its maximum, ECC Enabled, "[N/A]" for retired pages (GPUs since Ampere remap rows instead), no row remapping pending
# or failed. pcie_gen_hostmax: what the slot allows (pcie.link.gen.max is the lower of it and the GPU's own).
HEALTHY = {"persistence_mode": "Enabled", "pcie_gen_current": 4, "pcie_gen_gpumax": 4, "pcie_gen_hostmax": 4,
           "pcie_width_current": 16, "pcie_width_max": 16, "ecc_mode": "Enabled", "retired_pages_pending": "[N/A]",
           "remapped_rows_pending": "No", "remapped_rows_failure": "No"}
_NVRM_VERSION = re.compile(r"^NVRM version: NVIDIA UNIX [A-Za-z0-9_ ]*Kernel Module[A-Za-z0-9_ ]*?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)\s")
_INFORMATION_LINE = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_BUS_ID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,64}$")


class NvmlError(Exception):
    """What nvidia-smi prints (``lines``) and its exit status when NVML cannot answer."""

    def __init__(self, lines, code):
        super().__init__("\n".join(lines))
        self.lines = list(lines)
        self.code = code


class OutOfMemory(Exception):
    """An allocation the GPU cannot hold: its total, what is free and who holds the rest (live allocations)."""

    def __init__(self, gpu, requested_mib, free_mib, holders):
        super().__init__("GPU %s: %d MiB requested, %d MiB free" % (gpu.uuid, requested_mib, free_mib))
        self.gpu = gpu
        self.requested_mib = requested_mib
        self.free_mib = free_mib
        self.holders = holders


class Gpu:
    """One GPU as the kernel module describes it, with the index nvidia-smi gives it (PCI order)."""

    def __init__(self, bus_id, uuid, name, minor, index=None):
        self.bus_id = bus_id
        self.uuid = uuid
        self.name = name
        self.minor = minor
        self.index = index

    @property
    def smi_bus_id(self):
        """nvidia-smi's ``pci.bus_id``: an 8-digit domain, upper case (``00000000:18:00.0``)."""
        domain, rest = self.bus_id.split(":", 1)
        return ("%08X:%s" % (int(domain, 16), rest)).upper()

    def as_dict(self):
        return {"index": self.index, "uuid": self.uuid, "name": self.name, "bus_id": self.bus_id, "minor": self.minor}

    def __repr__(self):
        return "Gpu(%r, %r, minor=%r, index=%r)" % (self.bus_id, self.uuid, self.minor, self.index)


def parse_information(text):
    """The fields of a ``/proc/driver/nvidia/gpus/<bus>/information`` file (``Key: \\t value`` lines)."""
    fields = {}
    for line in text.splitlines():
        match = _INFORMATION_LINE.match(line)
        if match:
            fields[match.group(1).strip()] = match.group(2)
    return fields


def parse_kernel_version(text):
    """The driver version of a ``/proc/driver/nvidia/version`` file, or None."""
    for line in text.splitlines():
        match = _NVRM_VERSION.match(line)
        if match:
            return match.group(1)
    return None


def _bus_sort_key(bus_id):
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))


class Allocation:
    """GPU memory held by this process: a record in the ledger and the flock that keeps it alive."""

    def __init__(self, ledger, gpu, path, lock_fd, record):
        self._ledger = ledger
        self.gpu = gpu
        self.path = path
        self._lock_fd = lock_fd
        self.record = record

    @property
    def mib(self):
        return self.record["used_mib"]

    def resize(self, mib):
        """Hold ``mib`` MiB from now on; OutOfMemory (and no change) when the GPU does not have the difference free."""
        self._ledger.resize(self, int(mib))

    def release(self):
        self._ledger.release(self)


class Ledger:
    """The node's GPU memory: totals and the live allocations, in a directory every container of the node shares."""

    def __init__(self, directory):
        self.directory = directory

    @property
    def allocations_dir(self):
        return os.path.join(self.directory, ALLOCATIONS_DIR)

    def hardware(self):
        """{uuid: {"memory_total_mib": N, ...}} as the GPU kit wrote it; {} without a ledger."""
        try:
            with open(os.path.join(self.directory, HARDWARE_NAME), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def total_mib(self, gpu):
        return int((self.hardware().get(gpu.uuid) or {}).get("memory_total_mib") or 0)

    def health(self, gpu):
        """What ``gpu`` reports about itself: HEALTHY with the kit's ``health`` entry for it laid over."""
        health = dict(HEALTHY)
        health.update((self.hardware().get(gpu.uuid) or {}).get("health") or {})
        return health

    def topology(self):
        """``topology.json`` as the GPU kit wrote it ({"links": {uuid: {uuid: code}}, "cpu_affinity": {uuid: cpus},
        "numa_affinity": {uuid: node}}); {} without one."""
        try:
            with open(os.path.join(self.directory, TOPOLOGY_NAME), encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _lock(self):
        """The ledger-wide lock: allocations are checked and written under it (a read-only open suffices for flock)."""
        fd = os.open(os.path.join(self.directory, LEDGER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def live(self, gpu=None):
        """The allocations whose owner still holds its lock, oldest first (``gpu``: only that GPU's)."""
        found = []
        try:
            names = sorted(os.listdir(self.allocations_dir))
        except OSError:
            return found
        for name in names:
            if not name.endswith(".json"):
                continue
            base = name[:-len(".json")]
            if gpu is not None and not base.startswith(gpu.uuid + "."):
                continue
            if not self._owner_alive(os.path.join(self.allocations_dir, base + ".lock")):
                continue
            try:
                # Anyone may write here: never follow a link, read only a small regular file.
                fd = os.open(os.path.join(self.allocations_dir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                with os.fdopen(fd, "rb") as handle:
                    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                        continue
                    record = json.loads(handle.read(4096).decode("utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and isinstance(record.get("used_mib"), int):
                found.append(record)
        found.sort(key=lambda record: (record.get("started") or 0, record.get("pid") or 0))
        return found

    @staticmethod
    def _owner_alive(lock_path):
        """Whether a process still holds the allocation's lock (the kernel drops it when the process dies)."""
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        finally:
            os.close(fd)
        return False

    def used_mib(self, gpu):
        return sum(record["used_mib"] for record in self.live(gpu))

    def _check_free(self, gpu, extra_mib, exclude=None):
        total = self.total_mib(gpu)
        holders = [record for record in self.live(gpu) if exclude is None or record["id"] != exclude]
        free = total - sum(record["used_mib"] for record in holders)
        if extra_mib > free:
            raise OutOfMemory(gpu, extra_mib, max(free, 0), holders)

    def allocate(self, gpu, mib, process_name, pid=None, host=None):
        """Take ``mib`` MiB of ``gpu`` for this process until it dies or releases it; OutOfMemory when it is not free."""
        if not os.path.isdir(self.allocations_dir):
            raise OSError(errno.ENOENT, "no GPU memory ledger at %s" % self.allocations_dir)
        ledger_lock = self._lock()
        try:
            self._check_free(gpu, int(mib))
            ident = "%s.%s.%d.%s" % (gpu.uuid, re.sub(r"[^A-Za-z0-9_-]", "_", host or os.uname().nodename),
                                     pid or os.getpid(), uuid_module.uuid4().hex[:8])
            base = os.path.join(self.allocations_dir, ident)
            lock_fd = os.open(base + ".lock", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            record = {"id": ident, "gpu_uuid": gpu.uuid, "pid": pid or os.getpid(), "process_name": process_name,
                      "host": host or os.uname().nodename, "used_mib": int(mib), "started": time.time(),
                      "pid_ns": _pid_namespace("self")}
            allocation = Allocation(self, gpu, base + ".json", lock_fd, record)
            self._write(allocation)
            return allocation
        finally:
            os.close(ledger_lock)

    def resize(self, allocation, mib):
        ledger_lock = self._lock()
        try:
            self._check_free(allocation.gpu, mib, exclude=allocation.record["id"])
            allocation.record["used_mib"] = mib
            self._write(allocation)
        finally:
            os.close(ledger_lock)

    def release(self, allocation):
        for path in (allocation.path, allocation.path[:-len(".json")] + ".lock"):
            try:
                os.unlink(path)
            except OSError:
                pass
        if allocation._lock_fd is not None:  # pylint: disable=protected-access
            os.close(allocation._lock_fd)  # pylint: disable=protected-access
            allocation._lock_fd = None  # pylint: disable=protected-access

    @staticmethod
    def _write(allocation):
        temporary = "%s.%d.tmp" % (allocation.path, os.getpid())
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(allocation.record, handle, sort_keys=True)
        os.replace(temporary, allocation.path)


class Driver:
    """The driver as one process sees it: the module's GPUs, which of them it may open, their memory."""

    def __init__(self, proc_dir, dev_dir="/dev", ledger_dir=None, driver_version=None, cuda_version="13.0", opener=None,
                 version_path=None):
        self.proc_dir = proc_dir
        self.version_path = version_path or os.path.join(proc_dir, "version")
        self.dev_dir = dev_dir
        self.ledger = Ledger(ledger_dir) if ledger_dir else None
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        # The open(2) behind the access checks (tests pass one that fails with the errno they need).
        self._open = opener or (lambda path: os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY))

    @classmethod
    def from_config(cls, path=None):
        """The driver an installed stand-in describes (``driver.json``); OSError when there is none."""
        path = path or os.path.join(INSTALLED_DIR, CONFIG_NAME)
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        return cls(config["proc_dir"], config.get("dev_dir") or "/dev", config.get("ledger_dir"), config.get("driver_version"),
                   config.get("cuda_version") or "13.0", version_path=config.get("version_path"))

    # ---- what the kernel module says -----------------------------------------------------------------------------
    def kernel_version(self):
        try:
            with open(self.version_path, encoding="utf-8", errors="replace") as handle:
                return parse_kernel_version(handle.read())
        except OSError:
            return None

    def gpus(self):
        """Every GPU the kernel module drives, in PCI bus order, indexed as nvidia-smi indexes them on the node."""
        gpus = []
        directory = os.path.join(self.proc_dir, "gpus")
        try:
            entries = os.listdir(directory)
        except OSError:
            return gpus
        for entry in entries:
            try:
                with open(os.path.join(directory, entry, "information"), encoding="utf-8", errors="replace") as handle:
                    fields = parse_information(handle.read())
            except OSError:
                continue
            bus_id, uuid, minor = fields.get("Bus Location", entry), fields.get("GPU UUID", ""), fields.get("Device Minor", "")
            if not _BUS_ID.match(bus_id) or not _UUID.match(uuid) or not minor.isdigit():
                continue
            gpus.append(Gpu(bus_id.lower(), uuid, fields.get("Model", "NVIDIA GPU"), int(minor)))
        gpus.sort(key=lambda gpu: _bus_sort_key(gpu.bus_id))
        for index, gpu in enumerate(gpus):
            gpu.index = index
        return gpus

    # ---- what this process may open -----------------------------------------------------------------------------
    def node_error(self, path, minor):
        """None when the node at ``path`` is NVIDIA's (195, minor) and opening it gets past the cgroup and the
        permissions; otherwise the errno name that stops it (ENOENT, ENODEV for another device, EPERM, EACCES)."""
        try:
            info = os.stat(path)
        except OSError as error:
            return errno.errorcode.get(error.errno, "ENOENT")
        if not stat.S_ISCHR(info.st_mode) or os.major(info.st_rdev) != NVIDIA_MAJOR or os.minor(info.st_rdev) != minor:
            return "ENODEV"
        try:
            fd = self._open(path)
        except OSError as error:
            # No driver behind a kit node: an allowed open ends in the driver's absence, ENXIO (or ENODEV).
            if error.errno in (errno.ENXIO, errno.ENODEV):
                return None
            return errno.errorcode.get(error.errno, str(error.errno))
        os.close(fd)
        return None

    def init(self):
        """NVML's initialisation: raises NvmlError with nvidia-smi's message when it fails."""
        kernel = self.kernel_version()
        if kernel is None:
            raise NvmlError([DRIVER_NOT_LOADED], EXIT_DRIVER_NOT_LOADED)
        if self.driver_version and kernel != self.driver_version:
            raise NvmlError([VERSION_MISMATCH, "NVML library version: %s" % ".".join(self.driver_version.split(".")[:2])],
                            EXIT_VERSION_MISMATCH)
        problem = self.node_error(os.path.join(self.dev_dir, "nvidiactl"), CTL_MINOR)
        if problem in ("ENOENT", "ENODEV"):
            # NVML would create the node with nvidia-modprobe, which a container cannot do.
            raise NvmlError([DRIVER_NOT_LOADED], EXIT_DRIVER_NOT_LOADED)
        if problem == "EACCES":
            raise NvmlError([NO_PERMISSION], EXIT_NO_PERMISSION)
        if problem is not None:
            raise NvmlError([UNKNOWN_ERROR], EXIT_UNKNOWN)

    def usable_gpus(self):
        """The GPUs this process can open, in PCI order, each keeping its node index (NvmlError as init())."""
        self.init()
        return [gpu for gpu in self.gpus() if self.node_error(self.node_path(gpu), gpu.minor) is None]

    def visible_gpus(self):
        """What nvidia-smi lists here: the usable GPUs, indexed 0.. in PCI order (a container's own numbering)."""
        visible = []
        for index, gpu in enumerate(self.usable_gpus()):
            visible.append(Gpu(gpu.bus_id, gpu.uuid, gpu.name, gpu.minor, index))
        return visible

    def node_path(self, gpu):
        return os.path.join(self.dev_dir, "nvidia%d" % gpu.minor)

    # ---- memory -------------------------------------------------------------------------------------------------
    def memory_total_mib(self, gpu):
        return self.ledger.total_mib(gpu) if self.ledger else 0

    def memory_used_mib(self, gpu):
        return self.ledger.used_mib(gpu) if self.ledger else 0

    def allocate(self, gpu, mib, process_name, pid=None):
        if self.ledger is None:
            raise OSError(errno.ENOENT, "this driver stand-in has no GPU memory ledger")
        return self.ledger.allocate(gpu, mib, process_name, pid=pid)


# ---- the driver's state, as the GPU kit writes it -------------------------------------------------------------------
INFORMATION_TEMPLATE = ("Model: \t\t {name}\nIRQ:   \t\t {irq}\nGPU UUID: \t {uuid}\nVideo BIOS: \t 94.02.5c.00.01\n"
                        "Bus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t {bus_id}\n"
                        "Device Minor: \t {minor}\nGPU Firmware: \t {firmware}\nGPU Excluded:\t No\n")


def _pid_namespace(pid):
    """The PID namespace of a process (``pid:[4026531836]``, the same text in every namespace that sees it), or None."""
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def host_pid(record, proc_dir="/proc"):
    """The PID of an allocation's process as this caller's namespace numbers it, as NVML reports PIDs: a server in a
    container allocated with its container PID; the node sees it under another number (the first in its NSpid line,
    whose last is the container's). A process this namespace cannot see keeps the recorded number, as NVML's does for
    a namespace that cannot see the owner."""
    recorded_ns = record.get("pid_ns")
    if not recorded_ns or recorded_ns == _pid_namespace("self"):
        return record["pid"]
    try:
        candidates = [name for name in os.listdir(proc_dir) if name.isdigit()]
    except OSError:
        return record["pid"]
    for name in candidates:
        try:
            if os.readlink(os.path.join(proc_dir, name, "ns", "pid")) != recorded_ns:
                continue
            with open(os.path.join(proc_dir, name, "status")) as status:
                for line in status:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == record["pid"]:
                            return int(name)
                        break
        except (OSError, ValueError):
            continue
    return record["pid"]


def write_driver_state(proc_dir, ledger_dir, gpus, driver_version, topology=None):
    """What the kernel module and the GPUs would show, for ``gpus`` (dicts: bus_id, uuid, name, minor, memory_total_mib,
    optionally health: HEALTHY's keys): ``<proc_dir>/gpus/<bus>/information`` in the driver's format (GPUs no longer
    listed are removed) and the memory ledger (``hardware.json``, an ``allocations`` directory anyone may add to, its
    lock file). Live allocations stay. ``topology`` (see Ledger.topology) is written to ``topology.json`` when given."""
    gpus_dir = os.path.join(proc_dir, "gpus")
    os.makedirs(gpus_dir, exist_ok=True)
    wanted = set()
    for number, gpu in enumerate(gpus):
        if not _BUS_ID.match(gpu["bus_id"]) or not _UUID.match(gpu["uuid"]):
            raise ValueError("not a PCI bus ID and GPU UUID: %r, %r" % (gpu["bus_id"], gpu["uuid"]))
        wanted.add(gpu["bus_id"])
        directory = os.path.join(gpus_dir, gpu["bus_id"])
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "information"), "w", encoding="utf-8") as handle:
            handle.write(INFORMATION_TEMPLATE.format(name=gpu["name"], irq=180 + number, uuid=gpu["uuid"], bus_id=gpu["bus_id"],
                                                     minor=gpu["minor"], firmware=driver_version))
    for entry in os.listdir(gpus_dir):
        if entry not in wanted:
            path = os.path.join(gpus_dir, entry)
            for name in os.listdir(path):
                os.unlink(os.path.join(path, name))
            os.rmdir(path)
    allocations = os.path.join(ledger_dir, ALLOCATIONS_DIR)
    os.makedirs(allocations, exist_ok=True)
    # Like /tmp: every user of every container may hold GPU memory; only its owner may remove a record.
    os.chmod(ledger_dir, 0o755)
    os.chmod(allocations, 0o1777)
    hardware = {}
    for gpu in gpus:
        hardware[gpu["uuid"]] = {"memory_total_mib": int(gpu["memory_total_mib"]), "name": gpu["name"]}
        if gpu.get("health"):
            unknown = set(gpu["health"]) - set(HEALTHY)
            if unknown:
                raise ValueError("unknown GPU health keys: %s" % ", ".join(sorted(unknown)))
            hardware[gpu["uuid"]]["health"] = dict(gpu["health"])
    temporary = os.path.join(ledger_dir, HARDWARE_NAME + ".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(hardware, handle, sort_keys=True, indent=1)
    os.chmod(temporary, 0o644)
    os.replace(temporary, os.path.join(ledger_dir, HARDWARE_NAME))
    if topology is not None:
        temporary = os.path.join(ledger_dir, TOPOLOGY_NAME + ".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(topology, handle, sort_keys=True, indent=1)
        os.chmod(temporary, 0o644)
        os.replace(temporary, os.path.join(ledger_dir, TOPOLOGY_NAME))
    lock = os.path.join(ledger_dir, LEDGER_LOCK)
    if not os.path.exists(lock):
        with open(lock, "w", encoding="utf-8"):
            pass
    os.chmod(lock, 0o644)


def cuda_visible_devices(gpus, value):
    """The GPUs a CUDA process sees under CUDA_VISIBLE_DEVICES=``value`` (None: unset), in that order: indices into
    ``gpus`` or (prefixes of) UUIDs; like CUDA, the list ends at the first entry that names no device or repeats one."""
    if value is None:
        return list(gpus)
    chosen = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit():
            match = gpus[int(entry)] if int(entry) < len(gpus) else None
        elif entry.startswith("GPU-"):
            candidates = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
            match = candidates[0] if len(candidates) == 1 else None
        else:
            match = None
        if match is None or match in chosen:
            break
        chosen.append(match)
    return chosen


# ---- nvidia-smi ---------------------------------------------------------------------------------------------------
_HEADERS = {"index": "index", "name": "name", "uuid": "uuid", "pci.bus_id": "pci.bus_id",
            "memory.total": "memory.total [MiB]", "memory.used": "memory.used [MiB]", "memory.free": "memory.free [MiB]",
            "driver_version": "driver_version", "count": "count", "pid": "pid", "process_name": "process_name",
            "used_memory": "used_gpu_memory [MiB]", "used_gpu_memory": "used_gpu_memory [MiB]", "gpu_uuid": "gpu_uuid",
            "gpu_bus_id": "gpu_bus_id"}
# The fields below are answered from the GPU's health (HEALTHY's keys); each is a field of the real --help-query-gpu
# (580.159.04), and the header is the field's name, as the real one prints it.
_HEALTH_FIELDS = {"persistence_mode": "persistence_mode", "pcie.link.gen.current": "pcie_gen_current",
                  "pcie.link.gen.gpucurrent": "pcie_gen_current", "pcie.link.gen.gpumax": "pcie_gen_gpumax",
                  "pcie.link.gen.hostmax": "pcie_gen_hostmax", "pcie.link.width.current": "pcie_width_current",
                  "pcie.link.width.max": "pcie_width_max", "ecc.mode.current": "ecc_mode", "ecc.mode.pending": "ecc_mode",
                  "retired_pages.pending": "retired_pages_pending", "remapped_rows.pending": "remapped_rows_pending",
                  "remapped_rows.failure": "remapped_rows_failure"}
_GPU_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used", "memory.free",
               "driver_version", "count", "pcie.link.gen.max") + tuple(_HEALTH_FIELDS)
_APP_FIELDS = ("pid", "process_name", "used_memory", "used_gpu_memory", "gpu_uuid", "gpu_bus_id")
_MIB_FIELDS = ("memory.total", "memory.used", "memory.free", "used_memory", "used_gpu_memory")
# nvidia-smi topo -m: the legend as driver 580.159.04 prints it (h200-vm-580.159.04/topo-m.txt).
TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
UNDERLINE, RESET = "\x1b[4m", "\x1b[0m"
# Without a topology.json (a driver state written without the kit's hardware description): every pair of GPUs on
# root ports of one host bridge, CPUs 0-15 of NUMA node 0.
DEFAULT_LINK, DEFAULT_CPUS, DEFAULT_NUMA = "PHB", "0-15", "0"


def _csv(rows, fields, options, out):
    if "noheader" not in options:
        out.write(", ".join(_HEADERS.get(field, field) for field in fields) + "\n")
    for row in rows:
        values = []
        for field in fields:
            value = row[field]
            if field in _MIB_FIELDS and "nounits" not in options:
                value = "%s MiB" % value
            values.append(str(value))
        out.write(", ".join(values) + "\n")


def _gpu_row(driver, gpu, count):
    total, used = driver.memory_total_mib(gpu), driver.memory_used_mib(gpu)
    row = {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "pci.bus_id": gpu.smi_bus_id,
           "memory.total": total, "memory.used": used, "memory.free": max(total - used, 0),
           "driver_version": driver.driver_version or driver.kernel_version(), "count": count}
    health = driver.ledger.health(gpu) if driver.ledger else dict(HEALTHY)
    for field, key in _HEALTH_FIELDS.items():
        row[field] = health[key]
    # "The maximum PCI-E link generation possible with this GPU and system configuration" (--help-query-gpu).
    limits = [value for value in (health["pcie_gen_gpumax"], health["pcie_gen_hostmax"]) if isinstance(value, int)]
    row["pcie.link.gen.max"] = min(limits) if limits else "[N/A]"
    return row


def _topology(driver, gpus, out):
    """``nvidia-smi topo -m``: the matrix of the GPUs this process sees, tab-separated, the header underlined."""
    topology = driver.ledger.topology() if driver.ledger else {}
    links = topology.get("links") or {}
    names = ["GPU%d" % gpu.index for gpu in gpus]
    out.write("\t%s%s%s\n" % (UNDERLINE, "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]), RESET))
    for gpu in gpus:
        cells = []
        for other in gpus:
            cells.append(" X " if other is gpu else (links.get(gpu.uuid) or {}).get(other.uuid, DEFAULT_LINK))
        cpus = (topology.get("cpu_affinity") or {}).get(gpu.uuid, DEFAULT_CPUS)
        numa = (topology.get("numa_affinity") or {}).get(gpu.uuid, DEFAULT_NUMA)
        # The real one leaves an empty cell before GPU NUMA ID (h200-vm-580.159.04/topo-m.txt).
        out.write("GPU%d\t%s\t%s\t%s\t\tN/A\n" % (gpu.index, "\t".join(cells), cpus, numa))
    out.write(TOPO_LEGEND)
    return 0


def _visible_gpus_or_exit(driver, out):
    """(GPUs this process may use, None), or (None, nvidia-smi's exit status) after printing why there are none: NVML's
    failure (on standard output, as nvidia-smi prints it) or "No devices were found"."""
    try:
        gpus = driver.visible_gpus()
    except NvmlError as failure:
        out.write("\n".join(failure.lines) + "\n")
        return None, failure.code
    if not gpus:
        out.write(NO_DEVICES + "\n")
        return None, EXIT_NOT_FOUND
    return gpus, None


def topo(argv, driver, out, err):
    """``nvidia-smi topo``: ``-m``/``--matrix`` only (the stand-in's part of it)."""
    if argv in (["-m"], ["--matrix"]):
        gpus, code = _visible_gpus_or_exit(driver, out)
        return _topology(driver, gpus, out) if code is None else code
    if "-i" in argv and not ({"-n", "-p"} & set(argv)):
        # What the real one answers (cfregly/ai-performance-engineering issue 8, "nvidia-smi topo -m -i 0").
        out.write("The -i command line argument must be used in conjunction with -n or -p.\n")
        return EXIT_INVALID_ARGUMENT
    err.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    return EXIT_INVALID_ARGUMENT


def _table(driver, gpus, out):
    version = driver.driver_version or driver.kernel_version()
    out.write("+-----------------------------------------------------------------------------------------+\n")
    out.write("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-8s|\n" % (version, version, driver.cuda_version))
    out.write("|-----------------------------------------+------------------------+----------------------+\n")
    out.write("| GPU  Name                               | Bus-Id                 |         Memory-Usage |\n")
    out.write("|=========================================+========================+======================|\n")
    for gpu in gpus:
        usage = "%dMiB / %dMiB" % (driver.memory_used_mib(gpu), driver.memory_total_mib(gpu))
        out.write("| %3d  %-34s | %-22s | %20s |\n" % (gpu.index, gpu.name[:34], gpu.smi_bus_id, usage))
    out.write("+-----------------------------------------------------------------------------------------+\n")
    out.write("| Processes:                                                                              |\n")
    out.write("|  GPU   PID   Process name                                                    GPU Memory |\n")
    rows = [(gpu, record) for gpu in gpus for record in (driver.ledger.live(gpu) if driver.ledger else [])]
    if not rows:
        out.write("|  No running processes found                                                             |\n")
    for gpu, record in rows:
        out.write("|  %3d %7d  %-56s %7dMiB |\n" % (gpu.index, host_pid(record), record["process_name"][:56], record["used_mib"]))
    out.write("+-----------------------------------------------------------------------------------------+\n")


def nvidia_smi(argv, driver, out=None, err=None):
    """nvidia-smi with ``argv``: -L, --query-gpu=..., --query-compute-apps=..., --format=csv[,noheader][,nounits],
    -i INDEX|UUID|BUS, --version, topo -m, or the summary table. Returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if argv[:1] == ["topo"]:
        return topo(list(argv[1:]), driver, out, err)
    if "--version" in argv or "-v" in argv:
        version = driver.driver_version or driver.kernel_version() or "N/A"
        out.write("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n"
                  % (version, ".".join(version.split(".")[:2]), version, driver.cuda_version))
        return 0
    options, queries, select = [], {}, None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--format="):
            options = arg.split("=", 1)[1].split(",")
        elif arg.startswith("--query-gpu=") or arg.startswith("--query-compute-apps="):
            kind, fields = arg[2:].split("=", 1)
            queries[kind] = [field.strip() for field in fields.split(",")]
        elif arg in ("-i", "--id") and args:
            select = args.pop(0)
        elif arg.startswith("--id="):
            select = arg.split("=", 1)[1]
        elif arg in ("-L", "--list-gpus"):
            queries["list"] = True
        else:
            err.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
            return EXIT_INVALID_ARGUMENT
    gpus, code = _visible_gpus_or_exit(driver, out)
    if code is not None:
        return code
    if select is not None:
        chosen = [gpu for gpu in gpus if select in (str(gpu.index), gpu.uuid, gpu.smi_bus_id, gpu.bus_id)]
        if not chosen:
            out.write("No devices were found\n")
            return EXIT_NOT_FOUND
        gpus = chosen
    if queries.get("list"):
        for gpu in gpus:
            out.write("GPU %d: %s (UUID: %s)\n" % (gpu.index, gpu.name, gpu.uuid))
        return 0
    for kind, allowed in (("query-gpu", _GPU_FIELDS), ("query-compute-apps", _APP_FIELDS)):
        for field in queries.get(kind, []):
            if field not in allowed:
                out.write('Field "%s" is not a valid field to query.\n\n' % field)
                return EXIT_INVALID_ARGUMENT
    if queries and "csv" not in options:
        err.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
        return EXIT_INVALID_ARGUMENT
    if "query-gpu" in queries:
        _csv([_gpu_row(driver, gpu, len(gpus)) for gpu in gpus], queries["query-gpu"], options, out)
        return 0
    if "query-compute-apps" in queries:
        rows = []
        for gpu in gpus:
            for record in driver.ledger.live(gpu) if driver.ledger else []:
                rows.append({"pid": host_pid(record), "process_name": record["process_name"], "used_memory": record["used_mib"],
                             "used_gpu_memory": record["used_mib"], "gpu_uuid": gpu.uuid, "gpu_bus_id": gpu.smi_bus_id})
        _csv(rows, queries["query-compute-apps"], options, out)
        return 0
    _table(driver, gpus, out)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    config = None
    if argv[:1] == ["--config"] and len(argv) > 1:
        config, argv = argv[1], argv[2:]
    try:
        driver = Driver.from_config(config)
    except (OSError, ValueError, KeyError):
        # The userspace half of the driver is missing or broken: NVML's library cannot be loaded.
        sys.stdout.write("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
                         "NVIDIA Display Driver is properly installed and present in your system.\nPlease also try adding "
                         "directory that contains libnvidia-ml.so to your system PATH.\n")
        return 12
    return nvidia_smi(argv, driver)


if __name__ == "__main__":
    sys.exit(main())
