# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PCIe path of a GPU and between two GPUs, the links on it, and the ACS state of its bridges.

``<sysfs>/bus/pci/devices/<bdf>`` is a link to ``../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0``: the
components after the root complex (``pci<domain>:<bus>``) are the bridges from the root port down to the device.
Two GPUs' paths meet at their deepest common component; peer-to-peer traffic between them turns there, passing
every bridge below it on both sides. Each bridge's ACS control (``lspci -vvv``: ``ACSCtl: SrcValid+ TransBlk-
ReqRedir+ CmpltRedir+ ...``) decides whether it forwards that traffic directly or redirects it up to the root
complex (and through the IOMMU), which is what makes NCCL hang (NCCL troubleshooting, "PCI Access Control Services").
"""

from __future__ import annotations

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding, gpu_subject

BDF = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.(?P<function>[0-7])$")
ROOT_COMPLEX = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")
LINK_ATTRIBUTES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
ATTRIBUTE_LIMIT = 256
MAX_DEPTH = 32
# lspci -vvv: a device's block starts at column 0 with its address.
_DEVICE_HEADER = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<description>.*)$")
_SPEED = re.compile(r"Speed\s+(?P<speed>[0-9.]+)\s*GT/s(?P<down>\s*\(downgraded\))?", re.IGNORECASE)
_WIDTH = re.compile(r"Width\s+x(?P<width>\d+)(?P<down>\s*\(downgraded\))?", re.IGNORECASE)
_FLAG = re.compile(r"([A-Za-z]+)([+-])")
# GT/s of a PCIe generation: the unit both sysfs ("16.0 GT/s PCIe") and lspci ("16GT/s") print.
GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def normalise_bdf(text):
    """``0000:3b:00.0`` from ``00000000:3B:00.0`` (nvidia-smi), ``0000:3b:00.0`` or ``3b:00.0`` (lspci, domain 0)."""
    match = BDF.match((text or "").strip())
    if not match:
        return None
    domain = int(match.group("domain") or "0", 16)
    return "%04x:%s:%s.%s" % (domain, match.group("bus").lower(), match.group("device").lower(), match.group("function"))


def _read_attribute(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(ATTRIBUTE_LIMIT).decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return None


def speed_gts(text):
    """``16.0`` from ``16.0 GT/s PCIe`` or ``16GT/s``; None for ``Unknown`` or garbage."""
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def generation(gts):
    return GEN_BY_SPEED.get(gts) if gts is not None else None


def _int(text):
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def resolve_device(sysfs_root, bdf):
    """The device's directory under ``<sysfs_root>/devices``, following its ``bus/pci/devices`` link once (the
    kernel's link is relative); None when the device or the link is not there. One readlink, so a link loop in a
    broken tree cannot make this spin."""
    entry = os.path.join(sysfs_root, "bus", "pci", "devices", bdf)
    try:
        if os.path.islink(entry):
            target = os.readlink(entry)
            if os.path.isabs(target) and "/devices/" in target and not target.startswith(sysfs_root.rstrip(os.sep) + os.sep):
                # An absolute link into the real /sys (a copied tree): read the copy under sysfs_root instead.
                target = os.path.join(sysfs_root, target[target.index("/devices/") + 1:])
            resolved = os.path.normpath(os.path.join(os.path.dirname(entry), target))
        elif os.path.isdir(entry):
            resolved = entry
        else:
            return None
    except OSError:
        return None
    return resolved if os.path.isdir(resolved) else None


def device_chain(sysfs_root, bdf):
    """``{"root": "pci0000:00" or None, "chain": [bdf of each bridge..., bdf], "dirs": [their directories]}``.

    The chain holds the PCI components of the resolved path, root port first, the device last; an empty chain when
    the device cannot be resolved or its path names no PCI device (a broken or hostile tree)."""
    resolved = resolve_device(sysfs_root, bdf)
    result = {"root": None, "chain": [], "dirs": []}
    if resolved is None:
        return result
    parts = resolved.split(os.sep)
    path = os.sep if resolved.startswith(os.sep) else ""
    for part in parts:
        path = os.path.join(path, part) if path else part
        if ROOT_COMPLEX.match(part):
            result["root"] = part.lower()
            result["chain"], result["dirs"] = [], []
        elif result["root"] is not None and normalise_bdf(part) and BDF.match(part).group("domain"):
            result["chain"].append(normalise_bdf(part))
            result["dirs"].append(path)
    if len(result["chain"]) > MAX_DEPTH or not result["chain"] or result["chain"][-1] != normalise_bdf(bdf):
        return {"root": result["root"], "chain": [], "dirs": []}
    return result


def read_link(device_dir):
    """The link attributes of one device directory: speeds in GT/s, widths as ints; None where unreadable."""
    raw = {name: _read_attribute(os.path.join(device_dir, name)) for name in LINK_ATTRIBUTES}
    return {
        "current_speed": speed_gts(raw["current_link_speed"]),
        "max_speed": speed_gts(raw["max_link_speed"]),
        "current_width": _int(raw["current_link_width"]),
        "max_width": _int(raw["max_link_width"]),
        "raw": raw,
    }


def read_iommu_group(sysfs_root, bdf):
    """``(group, type)`` of the device's IOMMU group: type is ``DMA``, ``DMA-FQ``, ``identity``...; (None, None)
    without one (no IOMMU), type None when unreadable."""
    entry = os.path.join(sysfs_root, "bus", "pci", "devices", bdf, "iommu_group")
    try:
        group = os.path.basename(os.readlink(entry))
    except OSError:
        return None, None
    if not group.isdigit():
        return None, None
    return group, _read_attribute(os.path.join(sysfs_root, "kernel", "iommu_groups", group, "type"))


def path_between(chain_a, chain_b):
    """The bridges P2P traffic between two devices crosses: ``{"common": deepest shared bridge or None,
    "bridges": [...], "same_root": bool}``. Bridges are those below the turn point on both sides plus the turn point
    itself (the switch port or root port where requests are forwarded or redirected)."""
    a, b = chain_a["chain"], chain_b["chain"]
    shared = 0
    same_root = chain_a["root"] is not None and chain_a["root"] == chain_b["root"]
    if same_root:
        while shared < min(len(a), len(b)) - 1 and a[shared] == b[shared]:
            shared += 1
    common = a[shared - 1] if shared else None
    bridges = []
    for bridge in ([common] if common else []) + a[shared:-1] + b[shared:-1]:
        if bridge not in bridges:
            bridges.append(bridge)
    return {"common": common, "bridges": bridges, "same_root": same_root}


def parse_lspci(text):
    """``lspci -vvv`` output as ``{bdf: {"description", "lnkcap", "lnksta", "acscap", "acsctl", "lines",
    "access_denied"}}``; links as ``{"speed", "width", "speed_downgraded", "width_downgraded"}``, ACS as
    ``{flag: bool}``. Blocks without a header (a grep of the full output) are collected under the key None."""
    devices = {}
    current = None
    for raw_line in text.splitlines():
        header = _DEVICE_HEADER.match(raw_line)
        if header:
            current = devices.setdefault(normalise_bdf(header.group("bdf")), _blank(header.group("description")))
            continue
        line = raw_line.strip()
        if not line:
            continue
        if current is None:
            current = devices.setdefault(None, _blank(None))
        label, _sep, rest = line.partition(":")
        label = label.strip()
        if label == "LnkCap":
            current["lnkcap"] = _link(rest)
            current["lines"]["LnkCap"] = raw_line
        elif label == "LnkSta":
            current["lnksta"] = _link(rest)
            current["lines"]["LnkSta"] = raw_line
        elif label in ("ACSCap", "ACSCtl"):
            current[label.lower()] = parse_flags(rest)
            current["lines"][label] = raw_line
        elif "<access denied>" in line:
            current["access_denied"] = True
    return devices


def parse_flags(text):
    """``{"SrcValid": True, "TransBlk": False, ...}`` from ``SrcValid+ TransBlk- ...`` (an ``ACSCap:``/``ACSCtl:``
    value)."""
    return dict((name, sign == "+") for name, sign in _FLAG.findall(text or ""))


def lspci_evidence(device, label=None):
    """The device's ``LnkCap:`` and ``LnkSta:`` lines, each after ``label`` (for example ``lspci -vvv -s
    0000:3b:00.0``) when given."""
    lines = [line for key, line in sorted((device or {}).get("lines", {}).items()) if key in ("LnkCap", "LnkSta")]
    return ["%s: %s" % (label, line.strip()) for line in lines] if label else lines


def lspci_width_finding(subject, device, label=None, upstream_width=None):
    """``pcie_link_width`` from lspci's ``LnkCap:``/``LnkSta:`` (for a device whose sysfs has no link attributes),
    judged like the sysfs attributes: narrower than both ends can do (``upstream_width``: the upstream port's
    capable width where known); with no ``LnkCap:`` line, lspci's own ``(downgraded)`` mark makes it a warning."""
    status, capability = (device or {}).get("lnksta"), (device or {}).get("lnkcap")
    if not status or not status["width"]:
        return None
    evidence = lspci_evidence(device, label)
    if capability and capability["width"]:
        capable = min(width for width in (capability["width"], upstream_width) if width)
        return width_finding(subject, status["width"], capable, evidence, "lspci")
    if status["width_downgraded"]:
        return Finding("pcie_link_width", "warning", subject,
                       "lspci marks the PCIe link width x%d as downgraded" % status["width"], evidence,
                       "transfers over this link get a fraction of its bandwidth",
                       "reseat the device and check its riser and slot; compare LnkCap and LnkSta in lspci -vvv")
    return None


def lspci_link_findings(subject, device, label=None, upstream_width=None, upstream_speed=None):
    """What the sysfs link attributes give for a GPU (``pcie_link_width``, ``pcie_link_speed``), from lspci's
    ``LnkCap:``/``LnkSta:`` instead; the evidence is those lines after ``label``."""
    found = [lspci_width_finding(subject, device, label, upstream_width)]
    status, capability = (device or {}).get("lnksta"), (device or {}).get("lnkcap")
    if status and capability and capability["speed"]:
        capable = min(speed for speed in (capability["speed"], upstream_speed) if speed)
        found.append(speed_finding(subject, status["speed"], capable, lspci_evidence(device, label), "lspci"))
    return [finding for finding in found if finding]


def lspci_judges_width(device):
    """True when lspci's lines decide the link width: a ``LnkSta:`` width and either a ``LnkCap:`` width or lspci's
    own ``(downgraded)`` mark."""
    status, capability = (device or {}).get("lnksta"), (device or {}).get("lnkcap")
    return bool(status and status["width"] and ((capability and capability["width"]) or status["width_downgraded"]))


def _blank(description):
    return {"description": description, "lnkcap": None, "lnksta": None, "acscap": None, "acsctl": None, "lines": {},
            "access_denied": False}


def _link(text):
    speed, width = _SPEED.search(text), _WIDTH.search(text)
    return {
        "speed": float(speed.group("speed")) if speed else None,
        "width": int(width.group("width")) if width else None,
        "speed_downgraded": bool(speed and speed.group("down")),
        "width_downgraded": bool(width and width.group("down")),
    }


def acs_redirects(device):
    """True when the parsed lspci device redirects peer requests or completions upstream; None when unknown."""
    control = device.get("acsctl") if device else None
    if control is None:
        return None
    return bool(control.get("ReqRedir") or control.get("CmpltRedir"))


def acs_finding(server, gpus, bridges_with_redirect, iommu_translating):
    """``acs_redirect`` for a server whose GPUs' P2P path crosses bridges with ACS redirect on: a warning, an error
    when the IOMMU translates those GPUs' DMA as well (then redirected P2P is translated and fails)."""
    subject = "server %s" % server
    names = ", ".join(bridge for bridge, _line in bridges_with_redirect)
    pair = " and ".join(gpu_subject(gpu["index"], gpu.get("bus_id")) for gpu in gpus[:4])
    consequence = ("peer-to-peer between %s is redirected up to the root complex instead of across the switch%s: NCCL "
                   "can hang at init or in the first all-reduce, or corrupt data (NCCL troubleshooting: 'PCI Access "
                   "Control Services (ACS)')" % (
                       pair, "; the IOMMU translates those requests too, which fails them" if iommu_translating else ""))
    fix = ("disable ACS redirect on %s: in the BIOS (ACS / PCIe ACS control), with the kernel parameter pci=noacs "
           "(kernels that have it), or at runtime with 'setpci -s <bridge> ECAP_ACS+0x6.w=0000' per bridge "
           "(lost at reboot); until then start the server with NCCL_P2P_DISABLE=1 (slower: copies through host "
           "memory)" % names)
    return Finding("acs_redirect", "error" if iommu_translating else "warning", subject,
                   "ACS redirect is on at %d bridge%s on the path between the server's GPUs: %s" % (
                       len(bridges_with_redirect), "" if len(bridges_with_redirect) == 1 else "s", names),
                   ["%s %s" % (bridge, line.strip()) for bridge, line in bridges_with_redirect], consequence, fix)


def width_finding(subject, current, capable, evidence, source):
    """``pcie_link_width`` when a link trained narrower than both ends can do: an error below half of the capable
    width (x4 or less on an x16 link: never a slot design, a fault in the riser, slot or seating that also tends to
    drop the link later), else a warning (x8 of x16 halves bandwidth; often an x8 slot or bifurcation). None when
    the link is as wide as it can be or a value is unknown."""
    if not current or not capable or current >= capable:
        return None
    severity = "error" if current * 2 < capable else "warning"
    return Finding(
        "pcie_link_width", severity, subject,
        "the PCIe link runs at x%d, but both ends can do x%d (%s)" % (current, capable, source), evidence,
        "every transfer over it (model loading, peer-to-peer, all-reduce through the host) gets %d%% of the "
        "bandwidth" % (100 * current // capable),
        "reseat the GPU, check or replace its riser cable and the slot; compare with the board manual whether the "
        "slot shares lanes; then check again while the GPU is busy (nvidia-smi --query-gpu=pcie.link.width.current)")


def speed_finding(subject, current_gts, capable_gts, evidence, source):
    """``pcie_link_speed`` (info only) when the link runs below its capable generation: GPUs lower the link
    generation when idle (nvidia-smi's help: "These may be reduced when the GPU is not in use")."""
    if not current_gts or not capable_gts or current_gts >= capable_gts:
        return None
    return Finding(
        "pcie_link_speed", "info", subject,
        "the PCIe link runs at %s GT/s (gen %s), capable of %s GT/s (gen %s) (%s)" % (
            _number(current_gts), generation(current_gts) or "?", _number(capable_gts), generation(capable_gts) or "?", source),
        evidence,
        "none while the GPU idles (it lowers the link generation to save power); a link that stays low under load "
        "gives a fraction of the bandwidth",
        "check again while the GPU is busy; if it stays low, check the BIOS PCIe speed setting and the riser")


def _number(value):
    return ("%g" % value) if value is not None else "?"
