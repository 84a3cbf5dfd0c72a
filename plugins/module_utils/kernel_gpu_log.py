# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the kernel log and the kernel's settings say about the GPUs: NVIDIA Xid events and the IOMMU mode.

Xid lines come in several forms, all ``NVRM: Xid (PCI:<domain>:<bus>:<device>[.<function>]): <xid>, ...``: newer
drivers add ``pid=<pid>, name=<name>,`` (``pid='<unknown>', name=<unknown>`` when no process is to blame), older ones
go straight to the message. The driver also prints a GPU that fell off the bus without an Xid, over three lines
(``NVRM: The NVIDIA GPU 0000:b3:00.0`` ... ``NVRM: fallen off the bus``); that counts as Xid 79.

The IOMMU mode comes from the GPU's IOMMU group type in sysfs (``DMA``/``DMA-FQ``: translated; ``identity``:
passthrough), else the kernel log (``iommu: Default domain type: Translated``), and the kernel command line says how
it was chosen (``iommu=pt``, ``intel_iommu=on``, ``amd_iommu=...``). Pure functions of text.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding, gpu_subject

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): (?P<xid>\d{1,4}),"
                  r"\s*(?:pid=(?P<pid>'[^']*'|[^,\s]*),\s*name=(?P<name>[^,]*),\s*)?(?P<message>.*)$")
_FALLEN_HEAD = re.compile(r"NVRM: The NVIDIA GPU (?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$")
_DEFAULT_DOMAIN = re.compile(r"iommu: Default domain type: (?P<type>Translated|Passthrough|Passthrough \(set via kernel command line\)|"
                             r"Translated \(set via kernel command line\)|\w+)", re.IGNORECASE)
MAX_LINES = 200000

XID_DOCS = "https://docs.nvidia.com/deploy/xid-errors/index.html"
_RESET = "stop the GPU's processes and reset it (nvidia-smi -r -i <index>) or reboot the node"
_APP = "an application fault, not the GPU's: find the process named in the line and its own log"
# xid: (severity, meaning, fix), from NVIDIA's Xid catalogue (XID_DOCS). Application faults are warnings: the GPU
# itself is fine; hardware, driver and bus faults are errors: the GPU needs a reset or service before it serves.
XID_CATALOGUE = {
    13: ("warning", "Graphics Engine Exception: a kernel ran an illegal instruction or accessed memory out of range",
         _APP + "; if several applications hit it on one GPU, run the GPU's diagnostics (dcgmi diag -r 3)"),
    31: ("warning", "GPU memory page fault: an application accessed an invalid address (MMU fault)",
         _APP + "; repeated on one GPU only, run the GPU's diagnostics (dcgmi diag -r 3)"),
    43: ("warning", "GPU stopped processing: a channel was reset after an application fault", _APP),
    45: ("warning", "Preemptive cleanup: the driver ended a process's GPU work (process killed or a previous error)",
         "usually follows a killed process or another Xid; look at the Xid it names"),
    48: ("error", "Double Bit ECC Error: an uncorrectable memory error",
         _RESET + "; if it returns, the GPU needs service (check retired pages / remapped rows)"),
    61: ("error", "Internal micro-controller breakpoint/warning", _RESET + "; update the driver if it repeats"),
    62: ("error", "Internal micro-controller halt", _RESET + "; update the driver if it repeats"),
    63: ("warning", "ECC page retirement or row remapping recorded: a memory page or row was taken out of use",
         "reset the GPU when it is idle so that the retirement or remapping takes effect"),
    64: ("error", "ECC page retirement or row remapping failed to record",
         _RESET + "; if it repeats, the GPU needs service"),
    68: ("warning", "Video processor (NVDEC) exception", "an application fault on the video decoder; " + _APP),
    69: ("warning", "Graphics Engine class error", _APP),
    74: ("error", "NVLink error: a link between GPUs failed",
         _RESET + "; check nvidia-smi nvlink -s; if it repeats, the GPU or baseboard needs service"),
    79: ("error", "GPU has fallen off the bus: the GPU stopped answering on PCIe",
         "reboot the node; check power cables, seating, risers and temperatures; update the system BIOS"),
    92: ("warning", "High single-bit ECC error rate", "watch the ECC counters (nvidia-smi -q -d ECC); plan service"),
    94: ("warning", "Contained ECC error: an uncorrectable error hit one application, the GPU keeps running",
         "restart the affected application; reset the GPU when idle to remap the row"),
    95: ("error", "Uncontained ECC error: an uncorrectable error that can affect every application on the GPU",
         _RESET + " before serving from it"),
    109: ("warning", "Context switch timeout: a context did not yield in time (application hang or GPU fault)",
          _APP + "; repeated with other Xids, " + _RESET),
    119: ("error", "GSP RPC timeout: the GPU's system processor stopped answering the driver",
          _RESET + "; update the driver (fixed in several releases)"),
    120: ("error", "GSP error: the GPU's system processor reported an error", _RESET + "; update the driver if it repeats"),
    154: ("error", "GPU recovery action changed: the driver says the GPU needs a reset, a reboot or drain",
          "do what the line names (GPU Reset Required / Node Reboot Required) before serving from the GPU"),
}
UNKNOWN_XID = ("warning", "an Xid this module does not know", "look it up in NVIDIA's Xid catalogue (%s)" % XID_DOCS)


def short_bus(bus_id):
    """``0000:3b:00`` (domain:bus:device, as Xid lines name a GPU) from a bus id in any common form."""
    match = re.match(r"^0*([0-9a-fA-F]{0,4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", (bus_id or "").strip())
    if not match:
        return None
    return "%04x:%s:%s" % (int(match.group(1) or "0", 16), match.group(2).lower(), match.group(3).lower())


def parse_xid_events(text):
    """Every Xid event as ``{"xid", "pci" (domain:bus:device), "pid", "name", "message", "line"}``, in log order."""
    events = []
    lines = text.splitlines()[:MAX_LINES]
    for number, line in enumerate(lines):
        match = _XID.search(line)
        if match:
            pid = (match.group("pid") or "").strip("'") or None
            name = (match.group("name") or "").strip() or None
            events.append({"xid": int(match.group("xid")), "pci": short_bus(match.group("pci")),
                           "pid": None if pid in (None, "<unknown>") else pid,
                           "name": None if name in (None, "<unknown>") else name,
                           "message": match.group("message").strip(), "line": line})
            continue
        fallen = _FALLEN_HEAD.search(line)
        if fallen and any("fallen off the bus" in later for later in lines[number + 1:number + 4]):
            events.append({"xid": 79, "pci": short_bus(fallen.group("bdf")), "pid": None, "name": None,
                           "message": "fallen off the bus (without an Xid line)",
                           "line": "\n".join(lines[number:number + 3])})
    return events


def xid_findings(events, gpus, deployment_indexes):
    """One ``xid_event`` finding per GPU and Xid since boot, with the count and the first and last lines.

    ``gpus``: the node's GPUs (index, bus_id); ``deployment_indexes``: the indexes this deployment uses (None: all).
    An Xid on a GPU outside the deployment is info; one on a GPU nvidia-smi does not list keeps its severity (a GPU
    that fell off the bus is missing from nvidia-smi)."""
    by_bus = {short_bus(gpu.get("bus_id")): gpu for gpu in gpus}
    grouped = {}
    for event in events:
        grouped.setdefault((event["pci"], event["xid"]), []).append(event)
    findings = []
    for (pci, xid), items in grouped.items():
        severity, meaning, fix = XID_CATALOGUE.get(xid, UNKNOWN_XID)
        gpu = by_bus.get(pci)
        subject = gpu_subject(gpu["index"], gpu.get("bus_id")) if gpu else "GPU at PCI %s" % pci
        ours = gpu is None or deployment_indexes is None or gpu["index"] in deployment_indexes
        if not ours:
            severity = "info"
        processes = sorted(set("%s (pid %s)" % (item["name"], item["pid"]) for item in items if item["name"] or item["pid"]))
        what = "Xid %d %d time%s since boot: %s" % (xid, len(items), "" if len(items) == 1 else "s", meaning)
        if processes:
            what += "; processes: %s" % ", ".join(processes[:5])
        evidence = [items[0]["line"]] + ([items[-1]["line"]] if len(items) > 1 else [])
        if gpu is None:
            consequence = "nvidia-smi does not list this GPU: it is not usable until the node is rebooted or the GPU serviced"
        elif not ours:
            consequence = "the GPU is not one of this deployment's; nothing for it to do"
        elif severity == "error":
            consequence = "the GPU may stall, return errors or wrong results; a server on it fails or hangs"
        else:
            consequence = "an application on this GPU faulted; the GPU itself is usable"
        findings.append(Finding("xid_event", severity, subject, what, evidence, consequence, fix))
    return findings


def parse_cmdline(text):
    """The IOMMU-related parameters of ``/proc/cmdline`` as ``{name: value}`` (``iommu``, ``intel_iommu``,
    ``amd_iommu``, ``iommu.passthrough``, ``iommu.strict``, ``pci``)."""
    wanted = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict", "pci")
    found = {}
    for token in (text or "").split():
        name, _sep, value = token.partition("=")
        if name in wanted:
            found[name] = value
    return found


def parse_iommu_log(text):
    """``{"default_domain": "Translated"/"Passthrough"/None, "vendor": "intel"/"amd"/None, "lines": [...]}``."""
    result = {"default_domain": None, "vendor": None, "lines": []}
    for line in text.splitlines()[:MAX_LINES]:
        domain = _DEFAULT_DOMAIN.search(line)
        if domain:
            result["default_domain"] = domain.group("type").split()[0].capitalize()
            result["lines"].append(line)
        elif "DMAR: IOMMU enabled" in line or "DMAR: Intel(R) Virtualization Technology for Directed I/O" in line:
            result["vendor"] = "intel"
            result["lines"].append(line)
        elif "AMD-Vi:" in line and result["vendor"] is None:
            result["vendor"] = "amd"
            result["lines"].append(line)
    return result


def iommu_mode(group_type, log, cmdline):
    """``translated``, ``passthrough``, ``off`` or None (unknown), with the evidence it rests on.

    The group's type is the truth for a device; without a group the IOMMU is off or absent. The log's default domain
    and the command line decide only when the group type cannot be read."""
    if group_type:
        if group_type in ("DMA", "DMA-FQ"):
            return "translated"
        if group_type == "identity":
            return "passthrough"
        return None
    if log.get("default_domain") == "Translated" and cmdline.get("iommu") != "pt" and cmdline.get("iommu.passthrough") != "1":
        return "translated"
    if log.get("default_domain") == "Passthrough" or cmdline.get("iommu") == "pt" or cmdline.get("iommu.passthrough") == "1":
        return "passthrough"
    if cmdline.get("iommu") == "off" or cmdline.get("intel_iommu") == "off" or cmdline.get("amd_iommu") == "off":
        return "off"
    return None


def iommu_finding(server, gpus, evidence, with_acs_redirect, vendor):
    """``iommu_translated`` for a server whose GPUs talk peer-to-peer over PCIe while the IOMMU translates their DMA:
    a warning, an error together with ACS redirect on their path."""
    pair = " and ".join(gpu_subject(gpu["index"], gpu.get("bus_id")) for gpu in gpus[:4])
    parameters = "intel_iommu=on iommu=pt" if vendor == "intel" else "iommu=pt"
    return Finding(
        "iommu_translated", "error" if with_acs_redirect else "warning", "server %s" % server,
        "the IOMMU translates the DMA of %s (DMA domain, not passthrough)" % pair, evidence,
        "peer-to-peer between these GPUs over PCIe goes through IOMMU translation%s: NCCL can hang, or copies arrive "
        "zeroed or corrupted (IO_PAGE_FAULT / DMAR faults in the kernel log)" % (
            " and ACS redirect sends it to the root complex, where it is translated and fails" if with_acs_redirect else ""),
        "boot with '%s' (Proxmox: add it to /etc/kernel/cmdline and run proxmox-boot-tool refresh, or to "
        "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub and run update-grub; then reboot); passthrough to VMs keeps "
        "working; or start the server with NCCL_P2P_DISABLE=1" % parameters)
