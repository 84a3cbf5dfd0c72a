# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``nvidia-smi topo -m``: the link between every two GPUs, and what it means for tensor parallelism.

The real output is tab separated with ANSI underline escapes around the header line (``\\x1b[4m`` ... ``\\x1b[0m``),
columns ``GPU<n>``, ``NIC<n>``, ``CPU Affinity``, ``NUMA Affinity`` and on newer drivers ``GPU NUMA ID``, rows padded
with empty fields, then a blank line and the legend. Copies pasted into issues have spaces instead of tabs, so the
header is split at tabs or runs of two spaces (column names hold single spaces) and rows at any white space (no value
holds one). Pure functions of text.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding, gpu_subject

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DEVICE_COLUMN = re.compile(r"^(GPU|NIC)\d+$")
_NVLINK = re.compile(r"^NV(\d+)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
MAX_LINES = 2000
MAX_COLUMNS = 512

# Worst last. NCCL's own path types in the same order: NVL, PIX, PXB, PHB, NODE (NCCL: PHB within a NUMA node), SYS.
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")
LINK_MEANING = {
    "NV": "a bonded set of NVLinks",
    "PIX": "PCIe through at most one PCIe bridge (the same PCIe switch)",
    "PXB": "PCIe through several PCIe bridges, without the CPU's host bridge (a switch hierarchy)",
    "PHB": "PCIe through the CPU's PCIe host bridge",
    "NODE": "PCIe and the interconnect between PCIe host bridges within one NUMA node",
    "SYS": "PCIe and the interconnect between the CPU sockets (QPI/UPI/Infinity Fabric)",
}
# Usable bandwidth of one PCIe lane per direction in GB/s after line encoding (8b/10b up to gen 2, 128b/130b after).
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


class TopologyError(ValueError):
    """The text has no ``nvidia-smi topo -m`` matrix."""


def strip_ansi(text):
    return _ANSI.sub("", text)


def link_rank(code):
    """0 for NVLink, 1 (PIX) up to 5 (SYS); 6 for a code this module does not know (treated as the worst)."""
    if code is None:
        return 6
    if _NVLINK.match(code):
        return 0
    if code in PCIE_LINKS:
        return PCIE_LINKS.index(code) + 1
    return 6


def parse_topo_matrix(text):
    """The matrix as ``{"columns", "gpus", "nics", "legend", "nic_names"}``.

    ``gpus`` maps ``GPU<n>`` to ``{"links": {column: code}, "cpu_affinity", "numa_affinity", "gpu_numa_id"}``
    (absent values None); ``nics`` the same for NIC rows. TopologyError when there is no header with a GPU column.
    """
    lines = strip_ansi(text).splitlines()[:MAX_LINES]
    header_at = None
    for number, line in enumerate(lines):
        fields = _split_header(line)
        if fields and fields[0] == "GPU0":
            header_at, columns = number, fields[:MAX_COLUMNS]
            break
    if header_at is None:
        raise TopologyError("no nvidia-smi topo -m header (a line that starts with the column GPU0)")
    result = {"columns": columns, "gpus": {}, "nics": {}, "legend": {}, "nic_names": {}}
    in_legend = False
    for line in lines[header_at + 1:]:
        stripped = line.strip()
        if not stripped:
            in_legend = True
            continue
        if in_legend or stripped.endswith(":") and " " not in stripped[:-1]:
            in_legend = True
            _legend_line(stripped, result)
            continue
        values = stripped.split()
        label = values[0]
        if not _DEVICE_COLUMN.match(label):
            continue
        row = {"links": {}, "cpu_affinity": None, "numa_affinity": None, "gpu_numa_id": None}
        for column, value in zip(columns, values[1:]):
            if _DEVICE_COLUMN.match(column):
                row["links"][column] = value
            elif column == "CPU Affinity":
                row["cpu_affinity"] = value
            elif column == "NUMA Affinity":
                row["numa_affinity"] = value
            elif column == "GPU NUMA ID":
                row["gpu_numa_id"] = value
        result["gpus" if label.startswith("GPU") else "nics"][label] = row
    return result


def _split_header(line):
    line = line.strip()
    if not line:
        return []
    return [field.strip() for field in re.split(r"\t+| {2,}", line) if field.strip()]


def _legend_line(line, result):
    nic = _NIC_LEGEND.match(line)
    if nic:
        result["nic_names"][nic.group(1)] = nic.group(2)
        return
    if "=" in line:
        code, meaning = line.split("=", 1)
        if code.strip() and len(code.strip()) <= 6:
            result["legend"][code.strip()] = meaning.strip()


def link(matrix, a, b):
    """The code between ``GPU<a>`` and ``GPU<b>`` (indexes), from either row; None when the matrix lacks it."""
    for row, column in (("GPU%s" % a, "GPU%s" % b), ("GPU%s" % b, "GPU%s" % a)):
        code = matrix["gpus"].get(row, {}).get("links", {}).get(column)
        if code is not None:
            return code
    return None


def worst_link(matrix, indexes):
    """``(code, a, b)`` for the worst link between any two of ``indexes``; code None when the matrix lacks a pair
    (then a, b name it); None for fewer than two GPUs."""
    worst = None
    indexes = list(indexes)
    for i, a in enumerate(indexes):
        for b in indexes[i + 1:]:
            code = link(matrix, a, b)
            candidate = (link_rank(code), code, a, b)
            if worst is None or candidate[0] > worst[0]:
                worst = candidate
    return None if worst is None else worst[1:]


def pcie_bandwidth(gen, width):
    """Theoretical bandwidth per direction in GB/s of a PCIe link; None when either is unknown."""
    if not gen or not width or gen not in LANE_GBPS:
        return None
    return LANE_GBPS[gen] * width


def describe_link(code):
    nvlink = _NVLINK.match(code or "")
    if nvlink:
        return "%s NVLinks" % nvlink.group(1)
    return LINK_MEANING.get(code, "a link nvidia-smi calls %r" % code)


def group_findings(name, gpus, matrix, slowest_link=None):
    """Findings for one server's GPU group (``gpus``: dicts with index and bus_id) from the matrix.

    ``slowest_link``: ``(gen, width)`` of the slowest capable PCIe link among the group's GPUs (from the GPU query),
    used to put a number on the bandwidth. One ``p2p_path`` finding per group of two or more GPUs: info for NVLink,
    PIX and PXB, warning for PHB, NODE and SYS; ``p2p_path`` warning too when the matrix lacks a GPU of the group.
    """
    if len(gpus) < 2:
        return []
    by_index = {gpu["index"]: gpu for gpu in gpus}
    worst = worst_link(matrix, [gpu["index"] for gpu in gpus])
    code, a, b = worst
    first, second = by_index[a], by_index[b]
    pair = "%s and %s" % (gpu_subject(a, first.get("bus_id")), gpu_subject(b, second.get("bus_id")))
    tp = "TP %d of server %s" % (len(gpus), name)
    evidence = _evidence_rows(matrix, [gpu["index"] for gpu in gpus])
    if code is None:
        return [Finding("p2p_path", "warning", "server %s" % name,
                        "nvidia-smi topo -m does not show the link between %s" % pair, evidence,
                        "%s: the path between its GPUs is unknown, so neither its bandwidth nor the ACS and IOMMU "
                        "checks on it can be judged" % tp,
                        "check that nvidia-smi on the node sees every GPU of the group (nvidia-smi -L)")]
    bandwidth = None
    if slowest_link:
        bandwidth = pcie_bandwidth(*slowest_link)
    rank = link_rank(code)
    if rank == 0:
        severity = "info"
        consequence = "%s runs its all-reduce over NVLink (%s) between %s: no PCIe peer-to-peer involved" % (
            tp, describe_link(code), pair)
        fix = ""
    else:
        severity = "info" if code in ("PIX", "PXB") else "warning"
        limit = ""
        if bandwidth:
            limit = " at most about %.0f GB/s per direction (PCIe gen %s x%s, the group's slowest link)" % (
                bandwidth, slowest_link[0], slowest_link[1])
        if code in ("PIX", "PXB"):
            consequence = ("%s all-reduces over PCIe peer-to-peer through a PCIe switch between %s:%s, instead of "
                           "hundreds of GB/s over NVLink; it hangs if ACS redirects that traffic (see acs_redirect)" % (
                               tp, pair, limit or " PCIe bandwidth"))
            fix = "nothing to change for PCIe; keep ACS off on the switch ports between these GPUs"
        else:
            consequence = ("%s all-reduces between %s over %s:%s, and lower in practice because the traffic crosses "
                           "the CPU%s; peer-to-peer over this path hangs or corrupts data with ACS redirect or a "
                           "translating IOMMU" % (
                               tp, pair, LINK_MEANING.get(code, code), limit or " PCIe bandwidth",
                               "'s socket interconnect (NCCL usually falls back to copies through host memory)"
                               if code == "SYS" else ""))
            fix = ("give the server GPUs that share a PCIe switch or NVLink (nvidia-smi topo -m shows PIX, PXB or NV#), "
                   "or accept the bandwidth; with hangs at NCCL init set NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL=PXB")
    what = "the worst link between the GPUs of server %s is %s: %s" % (name, code, describe_link(code))
    return [Finding("p2p_path", severity, "server %s" % name, what, evidence, consequence, fix)]


def _evidence_rows(matrix, indexes):
    """The header and the group's rows, restricted to the group's GPU columns: short enough to read."""
    columns = ["GPU%s" % index for index in indexes]
    lines = ["\t" + "\t".join(columns)]
    for index in indexes:
        row = matrix["gpus"].get("GPU%s" % index)
        if row is None:
            lines.append("GPU%s\t(no row)" % index)
            continue
        lines.append("GPU%s\t" % index + "\t".join(row["links"].get(column, "?") for column in columns))
    return lines
