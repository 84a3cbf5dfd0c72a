# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the GPU kit's node shows around its GPUs, for the GPU preflight: the PCIe tree, the kernel and its log.

From a hardware description (``topology``, ``iommu``, ``kernel``) and fault switches (``FAULTS``), under the kit's root:

- a sysfs: ``sys/devices/pci0000:00/<root port>/[<switch ports>/]<gpu>`` with ``vendor``, ``device``, ``class``,
  ``current_link_speed``/``_width``, ``max_link_speed``/``_width`` (the kernel's formats, e.g. ``32.0 GT/s PCIe``),
  ``numa_node``, ``local_cpulist`` and an ``iommu_group`` link; ``sys/bus/pci/devices/<bdf>`` links into that tree and
  ``sys/kernel/iommu_groups/<n>/{type,devices/<bdf>}`` (no iommu_groups at all with ``iommu: off``);
- ``usr/bin/lspci``: ``lspci [-v|-vv|-vvv] [-D] [-s SLOT]`` in pciutils 3.13's format (Debian trixie, PVE 9), the
  slot filter parsed as pciutils' lib/filter.c does; an unknown slot prints nothing and exits 0, a malformed one
  ``lspci: -s: Invalid ...`` with exit 1, as the real one;
- ``usr/bin/dmesg``: the kernel ring buffer ``var/log/dmesg`` (``[    5.123456] ...`` lines); no ``journalctl`` (a node
  without one: the preflight falls back to dmesg);
- ``usr/bin/dkms``: ``dkms status [-m M] [-k KVER]``, ``nvidia/<version>, <kver>, x86_64: installed`` for each kernel
  whose ``lib/modules/<kver>/updates/dkms/nvidia.ko`` exists (delete one and dkms no longer lists it);
- ``boot/vmlinuz-<kver>`` for every installed kernel, ``proc/cmdline``, ``proc/sys/kernel/osrelease`` (the running
  kernel) and ``proc/devices`` (the nvidia-uvm major, none while the module is not loaded).

nvidia-smi's view of the same hardware (``topo -m``, link, ECC and persistence fields) is the driver stand-in's, from
the per-GPU ``health`` and the ``topology`` this module computes (``gpu_health``, ``smi_topology``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

TOPOLOGIES = ("switch", "root-ports", "host-bridges", "sockets", "nvlink")
IOMMU_MODES = ("passthrough", "translated", "off")
DEFAULT_TOPOLOGY = "switch"
DEFAULT_IOMMU = "passthrough"
DEFAULT_KERNEL = "6.14.8-2-pve"
NEXT_KERNEL = "6.14.11-4-pve"
NVLINKS = 4  # a two-slot NVLink bridge between two RTX A6000s: 4 links (NV4)
CPUS_PER_SOCKET = 16

# Fault switches: name -> (what its value is, default value, help).
FAULTS = {
    "acs-redirect": (None, None, "ACS Request/Completion Redirect on every root and downstream port (ACSCtl ReqRedir+ "
                                 "CmpltRedir+): peer-to-peer goes up through the root complex"),
    "narrow-link": ("GPU[:WIDTH]", "1:4", "the GPU's link trained narrower than it can (x4 of x16)"),
    "slow-link": ("GPU[:GEN]", "1:1", "the GPU's link trained at a lower generation than it can (Gen1)"),
    "xid": ("CODE[:GPU]", "79:1", "an Xid line for the GPU in the kernel log (79: fallen off the bus)"),
    "persistence-off": ("GPU", "all", "persistence mode Disabled"),
    "ecc-off": ("GPU", "all", "ECC mode Disabled"),
    "remap-pending": ("GPU", "1", "a row remapping pending (remapped_rows.pending Yes)"),
    "remap-failure": ("GPU", "1", "a row remapping failed (remapped_rows.failure Yes)"),
    "module-missing-next-kernel": ("KVER", NEXT_KERNEL, "a newer kernel installed (vmlinuz, modules tree) with no "
                                                        "NVIDIA module built for it; it boots next"),
    "rebooted": (None, None, "after a reboot, before anything loaded nvidia-uvm: no uvm nodes, no nvidia-uvm in "
                             "/proc/devices (nvidia-modprobe -u -c0 clears it)"),
    "uvm-nodes-missing": (None, None, "nvidia-uvm loaded (in /proc/devices) but its nodes were never created "
                                      "(nvidia-modprobe -u -c0 clears it)"),
    "uvm-major": ("MAJOR", None, "nvidia-uvm registered another major than --uvm-major (after a reboot or a driver "
                                 "update): /proc/devices and the nodes the kit makes use it, container configs do not"),
}
# What nvidia-modprobe -u -c0 repairs.
CLEARED_BY_MODPROBE = ("rebooted", "uvm-nodes-missing")

# Speeds as the kernel writes current_link_speed (drivers/pci/pci-sysfs.c, pci_speed_string) and as lspci prints them.
SYSFS_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}
LSPCI_SPEED = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s"}

# GPU models: PCI device ID, class, lspci's name (pci.ids), the PCIe generation of the board.
GPU_MODELS = {
    "NVIDIA RTX A6000": ("0x2230", "0x030000", "VGA compatible controller", "GA102GL [RTX A6000]", 4),
    "NVIDIA H200": ("0x2335", "0x030200", "3D controller", "GH100 [H200 SXM 141GB]", 5),
    "NVIDIA H100 80GB HBM3": ("0x2330", "0x030200", "3D controller", "GH100 [H100 SXM5 80GB]", 5),
}
# Bridges: vendor, device, lspci's name (an ID pci.ids may not name prints as "Device NNNN"), PCIe generation.
ROOT_PORT = ("0x8086", "0x352a", "Intel Corporation Device 352a (rev 04)", 5)
SWITCH_PORT = ("0x1000", "0xc030", "Broadcom / LSI Device c030 (rev b0)", 5)


class GpuFaultError(ValueError):
    """A fault switch that cannot be used."""


def parse_fault(text, gpus):
    """``NAME`` or ``NAME=VALUE`` -> {"name", "value"} with the default value filled in; GpuFaultError."""
    name, _sep, value = str(text).partition("=")
    if name not in FAULTS:
        raise GpuFaultError("unknown GPU fault %r (one of: %s)" % (name, ", ".join(sorted(FAULTS))))
    kind, default, _help = FAULTS[name]
    if kind is None:
        if value:
            raise GpuFaultError("GPU fault %s takes no value" % name)
        return {"name": name, "value": None}
    value = value or default
    if value is None:
        raise GpuFaultError("GPU fault %s needs a value: %s=%s" % (name, name, kind))
    fault = {"name": name, "value": value}
    _fault_arguments(fault, gpus)  # validates
    return fault


def _gpu_index(text, gpus, name):
    if not str(text).isdigit() or int(text) >= gpus:
        raise GpuFaultError("GPU fault %s: no GPU %s on a kit of %d GPUs" % (name, text, gpus))
    return int(text)


def _fault_arguments(fault, gpus):
    """The parsed value of ``fault``: a list of GPU indices, (gpu, number), (code, gpu), a kernel or a major."""
    name, value = fault["name"], fault["value"]
    if name in ("persistence-off", "ecc-off", "remap-pending", "remap-failure"):
        if value == "all":
            return list(range(gpus))
        return [_gpu_index(value, gpus, name)]
    if name in ("narrow-link", "slow-link"):
        gpu, _sep, number = value.partition(":")
        number = number or FAULTS[name][1].split(":")[1]
        allowed = (1, 2, 4, 8) if name == "narrow-link" else (1, 2, 3, 4)
        if not number.isdigit() or int(number) not in allowed:
            what = "width" if name == "narrow-link" else "generation"
            raise GpuFaultError("GPU fault %s: %s must be one of %s" % (name, what, ", ".join(str(item) for item in allowed)))
        return (_gpu_index(gpu, gpus, name), int(number))
    if name == "xid":
        code, _sep, gpu = value.partition(":")
        if not code.isdigit() or not 1 <= int(code) <= 999:
            raise GpuFaultError("GPU fault xid: the code must be 1-999, not %r" % code)
        return (int(code), _gpu_index(gpu or "1", gpus, name) if gpus > 1 or gpu else 0)
    if name == "module-missing-next-kernel":
        if "/" in value or not value.strip():
            raise GpuFaultError("GPU fault %s: not a kernel release: %r" % (name, value))
        return value
    if name == "uvm-major":
        if not value.isdigit() or not 1 <= int(value) <= 511 or int(value) == 195:
            raise GpuFaultError("GPU fault uvm-major: a dynamic major (1-511, not 195), not %r" % value)
        return int(value)
    return None


def faults_by_name(faults, gpus):
    """{name: [parsed value, ...]} of the kit's faults."""
    found = {}
    for fault in faults:
        found.setdefault(fault["name"], []).append(_fault_arguments(fault, gpus))
    return found


# ---- the PCIe tree ------------------------------------------------------------------------------------------------
def _bdf(bus, device=0, function=0, domain=0):
    return "%04x:%02x:%02x.%d" % (domain, bus, device, function)


def gpu_sockets(topology, count):
    """The socket of each GPU: the first half on socket 0 and the rest on socket 1 with ``sockets``, else all on 0."""
    if topology != "sockets":
        return [0] * count
    first = (count + 1) // 2
    return [0 if index < first else 1 for index in range(count)]


def gpu_bus_ids(topology, count):
    """The GPUs' PCI addresses: 0000:11:00.0, 0000:18:00.0, ... (socket 1's from 0000:91:00.0 with ``sockets``)."""
    sockets = gpu_sockets(topology, count)
    ids = []
    for index, socket in enumerate(sockets):
        within = sockets[:index].count(socket)
        ids.append(_bdf(0x11 + 0x80 * socket + 7 * within))
    return ids


def pcie_tree(topology, gpus):
    """The bridges and GPUs as a list of devices, parents first: {bdf, kind (root-port, upstream, downstream, gpu),
    parent (a bdf, or None under the host bridge), host_bridge (pci0000:NN), socket, secondary (bridges), gpu (index)}.

    switch: one root port, a switch (upstream port, a downstream port per GPU), the GPUs below it;
    root-ports and nvlink: a root port of host bridge pci0000:00 per GPU; host-bridges: a host bridge per GPU;
    sockets: a root port per GPU on the host bridge of its socket (pci0000:00, pci0000:80)."""
    devices = []
    sockets = gpu_sockets(topology, len(gpus))
    buses = [int(gpu["bus_id"].split(":")[1], 16) for gpu in gpus]
    if topology == "switch" and gpus:
        first = buses[0]
        root = {"bdf": _bdf(0, 1, 1), "kind": "root-port", "parent": None, "host_bridge": "pci0000:00", "socket": 0,
                "secondary": first - 2}
        upstream = {"bdf": _bdf(first - 2), "kind": "upstream", "parent": root["bdf"], "host_bridge": "pci0000:00",
                    "socket": 0, "secondary": first - 1}
        devices += [root, upstream]
        for index, bus in enumerate(buses):
            port = {"bdf": _bdf(first - 1, index), "kind": "downstream", "parent": upstream["bdf"],
                    "host_bridge": "pci0000:00", "socket": 0, "secondary": bus}
            devices.append(port)
            devices.append({"bdf": gpus[index]["bus_id"], "kind": "gpu", "parent": port["bdf"], "host_bridge": "pci0000:00",
                            "socket": 0, "gpu": index})
        return devices
    for index, bus in enumerate(buses):
        socket = sockets[index]
        if topology == "host-bridges":
            host_bus, device, function = bus - 1, 1, 1
        else:
            within = sockets[:index].count(socket)
            host_bus, device, function = 0x80 * socket, 1 + within // 8, within % 8
        root = {"bdf": _bdf(host_bus, device, function), "kind": "root-port", "parent": None,
                "host_bridge": "pci0000:%02x" % host_bus, "socket": socket, "secondary": bus}
        devices.append(root)
        devices.append({"bdf": gpus[index]["bus_id"], "kind": "gpu", "parent": root["bdf"], "host_bridge": root["host_bridge"],
                        "socket": socket, "gpu": index})
    return devices


def link_code(topology, tree, first, second):
    """nvidia-smi topo's code for two GPU indices in ``tree``."""
    if topology == "nvlink":
        return "NV%d" % NVLINKS
    by_gpu = dict((device["gpu"], device) for device in tree if device["kind"] == "gpu")
    one, two = by_gpu[first], by_gpu[second]
    if one["socket"] != two["socket"]:
        return "SYS"
    if one["host_bridge"] != two["host_bridge"]:
        return "NODE"
    if one["parent"] == two["parent"]:
        return "PIX"
    by_bdf = dict((device["bdf"], device) for device in tree)
    if by_bdf[one["parent"]]["kind"] == "downstream" and by_bdf[two["parent"]]["kind"] == "downstream":
        # Two downstream ports of one switch: nvidia-smi calls GPUs below one switch PIX.
        return "PIX"
    return "PHB"


def smi_topology(topology, tree, gpus):
    """topology.json for the driver stand-in: the link codes by UUID, CPU and NUMA affinity."""
    links, cpus, numa = {}, {}, {}
    sockets = dict((device["gpu"], device["socket"]) for device in tree if device["kind"] == "gpu")
    for index, gpu in enumerate(gpus):
        links[gpu["uuid"]] = dict((other["uuid"], link_code(topology, tree, index, number))
                                  for number, other in enumerate(gpus) if number != index)
        socket = sockets[index]
        cpus[gpu["uuid"]] = "%d-%d" % (socket * CPUS_PER_SOCKET, (socket + 1) * CPUS_PER_SOCKET - 1)
        numa[gpu["uuid"]] = str(socket)
    return {"links": links, "cpu_affinity": cpus, "numa_affinity": numa}


def _model(gpu):
    return GPU_MODELS.get(gpu["name"], GPU_MODELS["NVIDIA RTX A6000"])


def link_state(tree, gpus, faults):
    """{bdf: (cap gen, cap width, current gen, current width)} of every device's upstream link (a root port: the
    link to its child; the link below a port trains to what both ends can, or what a fault leaves)."""
    narrow = dict(faults.get("narrow-link", []))
    slow = dict(faults.get("slow-link", []))
    by_bdf = dict((device["bdf"], device) for device in tree)
    state = {}
    for device in tree:
        if device["kind"] == "gpu":
            index = device["gpu"]
            cap_gen = _model(gpus[index])[4]
            port = by_bdf[device["parent"]]
            port_gen = SWITCH_PORT[3] if port["kind"] == "downstream" else ROOT_PORT[3]
            gen = min(slow.get(index, cap_gen), cap_gen, port_gen)
            width = narrow.get(index, 16)
            state[device["bdf"]] = (cap_gen, 16, gen, width)
            state[port["bdf"]] = (port_gen, 16, gen, width)
    for device in tree:
        if device["kind"] == "upstream":
            state[device["bdf"]] = (SWITCH_PORT[3], 16, min(SWITCH_PORT[3], ROOT_PORT[3]), 16)
            state[device["parent"]] = (ROOT_PORT[3], 16, min(SWITCH_PORT[3], ROOT_PORT[3]), 16)
    return state


def gpu_health(index, gpu, links, faults):
    """The GPU's ``health`` for the driver stand-in (nvidia_standin.HEALTHY's keys); ``links``: link_state()."""
    cap_gen, cap_width, gen, width = links[gpu["bus_id"]]
    health = {"pcie_gen_current": gen, "pcie_gen_gpumax": cap_gen, "pcie_gen_hostmax": ROOT_PORT[3],
              "pcie_width_current": width, "pcie_width_max": cap_width}
    for name, key, value in (("persistence-off", "persistence_mode", "Disabled"), ("ecc-off", "ecc_mode", "Disabled"),
                             ("remap-pending", "remapped_rows_pending", "Yes"),
                             ("remap-failure", "remapped_rows_failure", "Yes")):
        if any(index in chosen for chosen in faults.get(name, [])):
            health[key] = value
    return health


# ---- sysfs --------------------------------------------------------------------------------------------------------
def _sysfs_path(tree, bdf):
    by_bdf = dict((device["bdf"], device) for device in tree)
    chain = []
    device = by_bdf[bdf]
    while device is not None:
        chain.append(device["bdf"])
        device = by_bdf.get(device["parent"]) if device["parent"] else None
    return [by_bdf[bdf]["host_bridge"]] + list(reversed(chain))


def iommu_groups(tree):
    """{bdf: group number}: a group per device, in PCI order."""
    return dict((bdf, number) for number, bdf in enumerate(sorted(device["bdf"] for device in tree)))


def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def write_sysfs(root, tree, gpus, links, iommu):
    sys_dir = os.path.join(root, "sys")
    shutil.rmtree(sys_dir, ignore_errors=True)
    groups = iommu_groups(tree)
    group_type = {"passthrough": "identity", "translated": "DMA-FQ"}.get(iommu)
    for device in tree:
        parts = _sysfs_path(tree, device["bdf"])
        directory = os.path.join(sys_dir, "devices", *parts)
        if device["kind"] == "gpu":
            gpu = gpus[device["gpu"]]
            vendor, dev_id, klass = "0x10de", _model(gpu)[0], _model(gpu)[1]
        else:
            vendor, dev_id = (SWITCH_PORT if device["kind"] in ("upstream", "downstream") else ROOT_PORT)[:2]
            klass = "0x060400"
        cap_gen, cap_width, gen, width = links[device["bdf"]]
        for name, value in (("vendor", vendor), ("device", dev_id), ("class", klass),
                            ("current_link_speed", SYSFS_SPEED[gen]), ("current_link_width", str(width)),
                            ("max_link_speed", SYSFS_SPEED[cap_gen]), ("max_link_width", str(cap_width)),
                            ("numa_node", str(device["socket"])),
                            ("local_cpulist", "%d-%d" % (device["socket"] * CPUS_PER_SOCKET,
                                                         (device["socket"] + 1) * CPUS_PER_SOCKET - 1))):
            _write(os.path.join(directory, name), value + "\n", 0o444)
        link = os.path.join(sys_dir, "bus", "pci", "devices", device["bdf"])
        os.makedirs(os.path.dirname(link), exist_ok=True)
        # As the kernel makes it: ../../../devices/pci0000:00/0000:00:01.1/...
        os.symlink(os.path.join("..", "..", "..", "devices", *parts), link)
        if group_type:
            group_dir = os.path.join(sys_dir, "kernel", "iommu_groups", str(groups[device["bdf"]]))
            _write(os.path.join(group_dir, "type"), group_type + "\n")
            os.makedirs(os.path.join(group_dir, "devices"), exist_ok=True)
            os.symlink(os.path.join("..", "..", "..", "..", "devices", *parts), os.path.join(group_dir, "devices", device["bdf"]))
            depth = [".."] * (len(parts) + 1)
            os.symlink(os.path.join(*(depth + ["kernel", "iommu_groups", str(groups[device["bdf"]])])),
                       os.path.join(directory, "iommu_group"))


# ---- lspci --------------------------------------------------------------------------------------------------------
# Line formats: pciutils 3.13.0 lspci.c (show_verbose, show_bases) and ls-caps.c (cap_express_link: LnkSta's
# " (downgraded)" only on endpoints and upstream ports, never on root or downstream ports, link_compare) and ls-ecaps.c
# (cap_acs); the layout of a GPU's block as in a public `lspci -vvv` of an A100 (open-mpi/hwloc issue 653) and of a
# downstream port (sebhildebrandt/systeminformation issue 819). Capabilities the preflight does not read are left out.
_FLAGS_ACS_CAP = "SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
_ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
# ACS as the kernel enables it for isolation (pci_std_enable_acs), e.g. in NVIDIA/nccl issue 629.
_ACS_REDIRECT = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


def _lnk(kind, links, bdf, port_number):
    cap_gen, cap_width, gen, width = links[bdf]
    compare = kind in ("gpu", "upstream")

    def annotate(current, capable):
        if current > capable:
            return " (overdriven)"
        return " (downgraded)" if current < capable and compare else ""
    return ("\t\tLnkCap:\tPort #%d, Speed %s, Width x%d, ASPM L1, Exit Latency L1 <64us\n"
            "\t\t\tClockPM- Surprise- LLActRep%s BwNot%s ASPMOptComp+\n"
            "\t\tLnkCtl:\tASPM Disabled; %sLnkDisable- CommClk+\n"
            "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
            "\t\tLnkSta:\tSpeed %s%s, Width x%d%s\n"
            "\t\t\tTrErr- Train- SlotClk+ DLActive%s BWMgmt- ABWMgmt-\n"
            % (port_number, LSPCI_SPEED[cap_gen], cap_width, "-" if compare else "+", "-" if compare else "+",
               "RCB 64 bytes, " if kind in ("gpu", "root-port") else "",
               LSPCI_SPEED[gen], annotate(gen, cap_gen), width, annotate(width, cap_width), "-" if compare else "+"))


def lspci_blocks(tree, gpus, links, iommu, acs_redirect):
    """[(bdf, text)] in PCI order: what ``lspci -vvv -s <slot>`` prints for each device, without the slot name."""
    groups = iommu_groups(tree) if iommu != "off" else {}
    blocks = []
    for number, device in enumerate(sorted(tree, key=lambda item: item["bdf"])):
        lines = []
        bdf = device["bdf"]
        if device["kind"] == "gpu":
            gpu = gpus[device["gpu"]]
            _dev, klass, class_name, name, _gen = _model(gpu)
            prog_if = " (prog-if 00 [VGA controller])" if klass == "0x030000" else ""
            lines.append(" %s: NVIDIA Corporation %s (rev a1)%s" % (class_name, name, prog_if))
            lines.append("\tSubsystem: NVIDIA Corporation Device 1459")
            lines.append("\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+")
        else:
            name = (SWITCH_PORT if device["kind"] in ("upstream", "downstream") else ROOT_PORT)[2]
            lines.append(" PCI bridge: %s (prog-if 00 [Normal decode])" % name)
            lines.append("\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B- DisINTx+")
        lines.append("\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-")
        lines.append("\tLatency: 0, Cache Line Size: 64 bytes")
        lines.append("\tInterrupt: pin A routed to IRQ %d" % (40 + number))
        lines.append("\tNUMA node: %d" % device["socket"])
        if bdf in groups:
            lines.append("\tIOMMU group: %d" % groups[bdf])
        if device["kind"] == "gpu":
            lines.append("\tRegion 0: Memory at %x (32-bit, non-prefetchable) [size=16M]" % (0xc5000000 + 0x1000000 * device["gpu"]))
            lines.append("\tCapabilities: [60] Power Management version 3")
            lines.append("\t\tFlags: PMEClk- DSI- D1- D2- AuxCurrent=0mA PME(D0+,D1-,D2-,D3hot+,D3cold-)")
            lines.append("\t\tStatus: D0 NoSoftRst+ PME-Enable- DSel=0 DScale=0 PME-")
            lines.append("\tCapabilities: [78] Express (v2) Endpoint, IntMsgNum 0")
            lines.append("\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us")
            lines.append("\t\t\tExtTag+ AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 75W TEE-IO-")
            text = "\n".join(lines) + "\n" + _lnk("gpu", links, bdf, 0)
            text += "\tKernel driver in use: nvidia\n\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia\n"
        else:
            secondary = device["secondary"]
            primary = int(bdf.split(":")[1], 16)
            subordinate = max([secondary] + [other["secondary"] for other in tree if other.get("secondary") is not None
                                             and _is_below(tree, other["bdf"], bdf)])
            lines.append("\tBus: primary=%02x, secondary=%02x, subordinate=%02x, sec-latency=0" % (primary, secondary, subordinate))
            kind = {"root-port": "Root Port (Slot+)", "upstream": "Upstream Port", "downstream": "Downstream Port (Slot+)"}
            lines.append("\tCapabilities: [40] Express (v2) %s, IntMsgNum 0" % kind[device["kind"]])
            lines.append("\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0")
            lines.append("\t\t\tExtTag+ RBE+ TEE-IO-")
            text = "\n".join(lines) + "\n" + _lnk(device["kind"], links, bdf, number)
            if device["kind"] in ("root-port", "downstream"):
                text += ("\tCapabilities: [220 v1] Access Control Services\n\t\tACSCap:\t%s\n\t\tACSCtl:\t%s\n"
                         % (_FLAGS_ACS_CAP, _ACS_REDIRECT if acs_redirect else _ACS_OFF))
            text += "\tKernel driver in use: pcieport\n"
        blocks.append((bdf, text))
    return blocks


def _is_below(tree, bdf, ancestor):
    by_bdf = dict((device["bdf"], device) for device in tree)
    device = by_bdf.get(bdf)
    while device is not None and device["parent"]:
        if device["parent"] == ancestor:
            return True
        device = by_bdf.get(device["parent"])
    return False


LSPCI = '''#!%(python)s
# pve-sim GPU kit: lspci for the kit's PCIe tree (simulators/pve_sim/pve_sim/gpu_host.py); its devices are in %(data)s.
import json, sys

def parse_hex(text, maximum):
    """pciutils lib/filter.c parse_hex_field: None when the field is empty or "*" (any), ValueError when bad."""
    if not text or text == "*":
        return None
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    value = 0
    for char in text:
        if char not in "0123456789abcdefABCDEF":
            raise ValueError
        value = value * 16 + int(char, 16)
        if value > maximum:
            raise ValueError
    return value

def parse_slot(text):
    """[[[domain]:][bus]:][slot][.[func]] as pci_filter_parse_slot: (domain, bus, slot, func) or the error text."""
    fields = text.split(":")
    if len(fields) > 3:
        return "Too many fields"
    domain = bus = None
    try:
        if len(fields) == 3:
            domain = parse_hex(fields.pop(0), 0x7fffffff)
    except ValueError:
        return "Invalid domain number"
    try:
        if len(fields) == 2:
            bus = parse_hex(fields.pop(0), 0xff)
    except ValueError:
        return "Invalid bus number"
    slot = func = None
    if fields[0] and fields[0] != "*":
        parts = fields[0].split(".")
        if len(parts) > 2:
            return "Invalid slot/function number"
        try:
            slot = parse_hex(parts[0], 0x1f)
        except ValueError:
            return "Invalid slot number"
        try:
            func = parse_hex(parts[1] if len(parts) > 1 else "", 7)
        except ValueError:
            return "Invalid function number"
    return (domain, bus, slot, func)

def main(argv):
    verbose, domains, wanted = 0, False, (None, None, None, None)
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-s" or (arg.startswith("-s") and len(arg) > 2):
            value = arg[2:] if len(arg) > 2 else (args.pop(0) if args else None)
            if value is None:
                sys.stderr.write("lspci: option requires an argument -- 's'\\n")
                return 2
            wanted = parse_slot(value)
            if isinstance(wanted, str):
                sys.stderr.write("lspci: -s: %%s\\n" %% wanted)
                return 1
        elif arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= set("vD"):
            verbose += arg.count("v")
            domains = domains or "D" in arg
        else:
            sys.stderr.write("pve-sim lspci stand-in: only -v, -vv, -vvv, -D and -s SLOT are answered, not %%r\\n" %% arg)
            return 2
    with open(%(data)r, encoding="utf-8") as handle:
        devices = json.load(handle)
    for device in devices:
        domain, rest = device["bdf"].split(":", 1)
        bus, rest = rest.split(":")
        slot, func = rest.split(".")
        values = (int(domain, 16), int(bus, 16), int(slot, 16), int(func))
        if any(want is not None and want != value for want, value in zip(wanted, values)):
            continue
        name = device["bdf"] if domains else device["bdf"][5:]
        lines = device["text"].splitlines()
        if verbose == 0:
            sys.stdout.write(name + lines[0].split(" (prog-if")[0] + "\\n")
            continue
        sys.stdout.write(name + "\\n".join(lines) + "\\n\\n")
    return 0

sys.exit(main(sys.argv[1:]))
'''


# ---- kernel log, kernels, dkms ---------------------------------------------------------------------------------------
DMESG = '''#!%(python)s
# pve-sim GPU kit: dmesg prints the kernel ring buffer of the kit's node (%(log)s).
import sys
if len(sys.argv) > 1:
    arg = sys.argv[1]
    sys.stderr.write("dmesg: unrecognized option '%%s'\\nTry 'dmesg --help' for more information.\\n" %% arg if arg.startswith("--")
                     else "dmesg: invalid option -- '%%s'\\nTry 'dmesg --help' for more information.\\n" %% arg.lstrip("-")[:1])
    sys.exit(1)
with open(%(log)r, encoding="utf-8") as handle:
    sys.stdout.write(handle.read())
'''

DKMS = '''#!%(python)s
# pve-sim GPU kit: dkms status from the kit's modules tree (%(modules)s/<kver>/updates/dkms/nvidia.ko).
import os, sys
args = sys.argv[1:]
if args[:1] != ["status"]:
    sys.stderr.write("pve-sim dkms stand-in: only 'dkms status [-m MODULE] [-k KERNEL]' is answered\\n")
    sys.exit(2)
module = kernel = None
rest = args[1:]
while rest:
    option = rest.pop(0)
    value = rest.pop(0) if rest else ""
    if option == "-m":
        module = value.split("/")[0]
    elif option == "-k":
        kernel = value.split("/")[0]
    else:
        sys.stderr.write("pve-sim dkms stand-in: only -m MODULE and -k KERNEL are answered, not %%r\\n" %% option)
        sys.exit(2)
if module not in (None, "nvidia"):
    sys.exit(0)
for kver in sorted(os.listdir(%(modules)r)):
    if kernel not in (None, kver):
        continue
    if os.path.exists(os.path.join(%(modules)r, kver, "updates", "dkms", "nvidia.ko")):
        sys.stdout.write("nvidia/%(version)s, %%s, x86_64: installed\\n" %% kver)
'''


def kernel_log(tree, gpus, iommu, kernel, driver_version, uvm_major, uvm_loaded, xids, cmdline):
    """The ring buffer since boot: [(seconds, text)] formatted as the kernel's printk stamps."""
    entries = [(0.0, "Linux version %s (build@proxmox) (gcc (Debian 14.2.0-19) 14.2.0, GNU ld (GNU Binutils for Debian) "
                     "2.44) #1 SMP PREEMPT_DYNAMIC PMX %s" % (kernel, kernel)),
               (0.0, "Command line: %s" % cmdline)]
    if iommu != "off":
        entries.append((0.058205, "DMAR: IOMMU enabled"))
        if iommu == "passthrough":
            # As public boot logs print it with iommu=pt (e.g. a Proxmox node's dmesg in GitHub discussions).
            entries.append((0.376461, "iommu: Default domain type: Passthrough (set via kernel command line)"))
        else:
            # As the H200 capture prints it (h200-vm-580.159.04/dmesg-nvidia-iommu.txt).
            entries.append((0.137256, "iommu: Default domain type: Translated"))
            entries.append((0.137259, "iommu: DMA domain TLB invalidation policy: lazy mode"))
        for number, (bdf, group) in enumerate(sorted(iommu_groups(tree).items(), key=lambda item: item[1])):
            entries.append((0.41 + number * 0.000021, "pci %s: Adding to iommu group %d" % (bdf, group)))
    entries.append((5.463659, "nvidia: loading out-of-tree module taints kernel."))
    entries.append((5.537652, "nvidia-nvlink: Nvlink Core is being initialized, major device number %d" % (240 if uvm_major != 240 else 241)))
    entries.append((5.537663, "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (pve-sim@gpu-kit)  "
                              "Thu Sep 25 10:00:00 UTC 2025" % driver_version))
    if uvm_loaded:
        entries.append((5.703184, "nvidia-uvm: Loaded the UVM driver, major device number %d." % uvm_major))
    for number, (code, index) in enumerate(xids):
        bus = gpus[index]["bus_id"]
        if code == 79:
            # The driver's lines for Xid 79 (public kernel logs, e.g. leptonai/gpud's parser tests).
            text = ["NVRM: Xid (PCI:%s): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." % bus[:-2],
                    "NVRM: GPU %s: GPU has fallen off the bus." % bus]
        else:
            text = ["NVRM: Xid (PCI:%s): %d, pid='<unknown>', name=<unknown>, pve-sim: Xid %d injected" % (bus[:-2], code, code)]
        for line in text:
            entries.append((1843.308145 + number * 60, line))
    return "".join("[%5d.%06d] %s\n" % (int(seconds), round((seconds - int(seconds)) * 1e6), text) for seconds, text in entries)


PROC_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  4 ttyS\n  5 /dev/tty\n  5 /dev/console\n  5 /dev/ptmx\n"
                "  7 vcs\n 10 misc\n 13 input\n128 ptm\n136 pts\n195 nvidia\n195 nvidiactl\n%(uvm)s%(nvlink)3d nvidia-nvlink\n"
                "241 nvidia-caps\n242 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n  8 sd\n253 device-mapper\n")


def write_host(root, gpus, description, faults, uvm_major, driver_version):
    """Everything the preflight reads besides nvidia-smi, under ``root``; returns {name: path}."""
    found = faults_by_name(faults, len(gpus))
    topology, iommu, kernel = description["topology"], description["iommu"], description["kernel"]
    tree = pcie_tree(topology, gpus)
    links = link_state(tree, gpus, found)
    write_sysfs(root, tree, gpus, links, iommu)
    python = sys.executable
    bin_dir = os.path.join(root, "usr", "bin")
    share = os.path.join(root, "usr", "share", "pve-sim")
    os.makedirs(share, exist_ok=True)
    data = os.path.join(share, "lspci.json")
    with open(data, "w", encoding="utf-8") as handle:
        json.dump([{"bdf": bdf, "text": text} for bdf, text in
                   lspci_blocks(tree, gpus, links, iommu, "acs-redirect" in found)], handle, indent=1)
    _write(os.path.join(bin_dir, "lspci"), LSPCI % {"python": python, "data": data}, 0o755)
    # Kernels: the running one with the module; a newer one without it when the fault says so.
    kernels = [kernel] + list(found.get("module-missing-next-kernel", []))
    for directory in ("boot", os.path.join("lib", "modules")):
        shutil.rmtree(os.path.join(root, directory), ignore_errors=True)
    for release in kernels:
        _write(os.path.join(root, "boot", "vmlinuz-%s" % release), "pve-sim kernel image placeholder\n")
        modules = os.path.join(root, "lib", "modules", release)
        os.makedirs(os.path.join(modules, "kernel"), exist_ok=True)
        if release == kernel:
            for name in ("nvidia.ko", "nvidia-uvm.ko", "nvidia-modeset.ko", "nvidia-drm.ko", "nvidia-peermem.ko"):
                _write(os.path.join(modules, "updates", "dkms", name), "pve-sim module placeholder %s\n" % driver_version)
    modules_root = os.path.join(root, "lib", "modules")
    _write(os.path.join(bin_dir, "dkms"), DKMS % {"python": python, "modules": modules_root, "version": driver_version}, 0o755)
    iommu_args = {"passthrough": " intel_iommu=on iommu=pt", "translated": " intel_iommu=on", "off": ""}[iommu]
    cmdline = "BOOT_IMAGE=/boot/vmlinuz-%s root=/dev/mapper/pve-root ro quiet%s" % (kernel, iommu_args)
    _write(os.path.join(root, "proc", "cmdline"), cmdline + "\n")
    _write(os.path.join(root, "proc", "sys", "kernel", "osrelease"), kernel + "\n")
    major = (found.get("uvm-major") or [uvm_major])[-1]
    uvm_loaded = "rebooted" not in found
    _write(os.path.join(root, "proc", "devices"), PROC_DEVICES % {
        "uvm": "%3d nvidia-uvm\n" % major if uvm_loaded else "", "nvlink": 240 if major != 240 else 241})
    log = os.path.join(root, "var", "log", "dmesg")
    _write(log, kernel_log(tree, gpus, iommu, kernel, driver_version, major, uvm_loaded, found.get("xid", []), cmdline))
    _write(os.path.join(bin_dir, "dmesg"), DMESG % {"python": python, "log": log}, 0o755)
    return {"tree": tree, "links": links, "found": found, "uvm_major": major, "uvm_nodes": uvm_loaded and "uvm-nodes-missing" not in found,
            "paths": {"sysfs_root": os.path.join(root, "sys"), "lspci": os.path.join(bin_dir, "lspci"),
                      "dmesg": os.path.join(bin_dir, "dmesg"), "dkms": os.path.join(bin_dir, "dkms"),
                      "modules_root": modules_root, "boot_dir": os.path.join(root, "boot"),
                      "proc_root": os.path.join(root, "proc"), "kernel_log": log, "running_kernel": kernel,
                      "kernels": kernels}}
