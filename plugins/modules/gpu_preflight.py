#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_preflight
short_description: Find what makes tensor parallelism hang or crawl and what leaves a GPU unusable, before a deployment
version_added: 0.2.0
author:
  - llmops.serving contributors (!UNKNOWN)
description:
  - Read-only checks of a Proxmox VE node (O(scope=node)) or of an LXC container on it (O(scope=container)). Each
    problem is a finding with a check id, a severity, the subject (a GPU as C(GPU<index> <bus id>), a bridge, a
    kernel, a file), what was found, the verbatim evidence lines, the consequence for this deployment and the fix.
  - "Errors are what makes the deployment fail or serve wrong results; warnings what makes it slow or at risk; info
    what is worth knowing. The module fails when it finds an error (unless O(fail_on_error=false)) and returns
    every finding either way."
  - "Checks on every GPU nvidia-smi lists (those of O(gpu_groups) when given): C(persistence_mode) (off),
    C(ecc_disabled), C(row_remap_pending), C(row_remap_failure), C(retired_pages_pending) (nvidia-smi
    --query-gpu), C(pcie_link_width) (the link trained narrower than both ends can do: an error below half of it,
    for example x4 of x16, which no slot is designed to give and which points at a riser, slot or seating fault;
    a warning otherwise, for example x8 of x16) and C(pcie_link_speed) (info only: GPUs lower the link
    generation when idle). On the node the link is read from sysfs (C(current_link_width), C(max_link_width),
    C(current_link_speed), C(max_link_speed) of the GPU and of its upstream port); for a GPU whose sysfs has no such
    attributes (no device entry under O(sysfs_root), or the attributes missing or unreadable) from the C(LnkCap:) and
    C(LnkSta:) lines of C(lspci -vvv -s <GPU bus id>), with the same check ids and severities and those lines as
    evidence (without C(LnkCap:), lspci's own C(downgraded) mark makes a warning); where neither gives the width,
    from nvidia-smi, and RV(skipped_checks) says when nothing does."
  - "Checks of the uvm device: C(uvm_node) (the nvidia-uvm module not loaded, C(/dev/nvidia-uvm) missing, not a
    character device or with another major than C(/proc/devices)) and C(uvm_major_mismatch) (a container config
    of O(container_configs) that neither passes the node by path with PVE's C(devN:) nor allows its current major)."
  - "C(gpu_memory_without_unit): a process holding GPU memory whose cgroup is in no C(.service) unit (a nohup'd
    server in an SSH session's C(session-N.scope)); an error on a GPU of O(gpu_groups), a warning on another.
    C(gpu_process_unattributed) (info) for a PID that is not visible here."
  - "C(xid_event): NVIDIA Xid events in the kernel log since boot, one finding per GPU and Xid with the count, the
    meaning and the fix from NVIDIA's Xid catalogue; severity per Xid (for example 48, 74, 79, 95 errors; 13, 31,
    43, 45 warnings, application faults), info on a GPU outside O(gpu_groups). C(kernel_log_unreadable) (info) when
    neither O(kernel_log_command) nor C(dmesg) answers."
  - "Only with O(scope=node), for each group of O(gpu_groups) with two or more GPUs: C(p2p_path) (the worst link
    between its GPUs from C(nvidia-smi topo -m) with its bandwidth class; info for NVLink, PIX and PXB, a warning for
    PHB, NODE and SYS), C(acs_redirect) (ACS request or completion redirect on a bridge of the PCIe path between its
    GPUs, read with C(lspci -vvv -s <bridge>); a warning, an error when the IOMMU translates too),
    C(iommu_translated) (the GPUs' IOMMU groups are of type C(DMA)/C(DMA-FQ) while they talk over PCIe; a warning,
    an error together with ACS redirect). And C(nvidia_module_not_built) (error) for the running kernel and for the
    kernel the node boots next (the newest installed one, or the one pinned with C(proxmox-boot-tool kernel pin))."
  - "Other check ids: C(nvidia_smi_failed) (error), C(gpu_unknown) (error: a group names a GPU nvidia-smi does not
    list), C(topology_unreadable), C(program_missing), C(acs_unknown), C(container_config_unreadable),
    C(preflight_check_failed) (a check that raised; the others still run)."
  - With O(scope=container) the checks only the node can see (topology, ACS, IOMMU, the kernel module build) are not
    run and RV(skipped_checks) says so; the PCIe link width and speed come from nvidia-smi.
  - Every program runs without a shell, with a timeout of 60 seconds and at most 8 MiB of output kept per stream
    (its head and tail); a missing program is a finding, never a failure of the module.
options:
  scope:
    description:
      - C(node) on the Proxmox VE node, C(container) inside a GPU container.
    type: str
    required: true
    choices: [node, container]
  gpu_groups:
    description:
      - The GPUs of each server of this deployment. Checks that concern a deployment (peer-to-peer path, ACS, IOMMU)
        run per group; per-GPU errors count only for GPUs of a group (the other GPUs' become info or warnings).
      - Empty, every GPU nvidia-smi lists counts as this deployment's and no group checks run.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The server's name, used in the findings.
        type: str
        required: true
      gpus:
        description: The server's GPUs as UUIDs (C(GPU-...)) or nvidia-smi indexes (as strings).
        type: list
        elements: str
        required: true
  nvidia_smi:
    description:
      - The C(nvidia-smi) program. It is run as C(<nvidia_smi> --query-gpu=index,uuid,pci.bus_id,name,persistence_mode,
        pcie.link.gen.gpucurrent,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.mode.current,
        retired_pages.pending,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits) (again with
        C(pcie.link.gen.current) when the driver answers C(Field "pcie.link.gen.gpucurrent" is not a valid field to
        query.)), C(<nvidia_smi> --query-compute-apps=pid,gpu_uuid,used_memory,process_name
        --format=csv,noheader,nounits) and, on the node, C(<nvidia_smi> topo -m).
    type: str
    default: nvidia-smi
  lspci:
    description:
      - The C(lspci) program, run as C(<lspci> -vvv -s <bridge>) for each bridge between the GPUs of a group (its
        C(ACSCtl:)), and on the node as C(<lspci> -vvv -s <GPU bus id>) for a GPU whose sysfs link attributes cannot be
        read (its C(LnkCap:) and C(LnkSta:) then judge the GPU's link).
    type: str
    default: lspci
  dkms:
    description: The C(dkms) program, run as C(<dkms> status).
    type: str
    default: dkms
  kernel_log_command:
    description:
      - The command that prints the kernel log since boot; when it fails, C(dmesg) is tried.
    type: list
    elements: str
    default: [journalctl, -k, -b, --no-pager, -o, short-monotonic]
  sysfs_root:
    description: Where sysfs is mounted (C(bus/pci/devices), C(kernel/iommu_groups)).
    type: path
    default: /sys
  proc_root:
    description: Where procfs is mounted (C(devices), C(cmdline), C(<pid>/cgroup)).
    type: path
    default: /proc
  proc_devices:
    description:
      - The driver's character device list, where the current C(nvidia-uvm) major is read. Default C(<proc_root>/devices);
        set it apart from O(proc_root) only where the driver is a stand-in (a test) while the processes are real.
    type: path
  dev_dir:
    description: The directory of the device nodes (C(nvidia-uvm)).
    type: path
    default: /dev
  modules_root:
    description: The kernels' module trees (C(<version>/updates/dkms/nvidia.ko)).
    type: path
    default: /lib/modules
  boot_dir:
    description: Where the installed kernels' C(vmlinuz-<version>) are.
    type: path
    default: /boot
  boot_pin_file:
    description:
      - The file C(proxmox-boot-tool kernel pin) writes; C(next-boot-pin) beside it (C(--next-boot)) wins over it.
    type: path
    default: /etc/kernel/proxmox-boot-pin
  running_kernel:
    description: The running kernel's release; default the release this module runs under (C(uname -r)).
    type: str
  boot_id_file:
    description:
      - The kernel's ID of this boot (a new random one at every boot; a container reads its node's, the kernel does not
        namespace it). Returned in RV(boot) and compared with O(boot_check_report)'s.
    type: path
    default: /proc/sys/kernel/random/boot_id
  boot_check_report:
    description:
      - With O(scope=node), the report of the node's boot check (C(llmops-gpu-boot-check.service), which the role
        llmops.serving.pve_gpu_host installs before C(pve-guests.service)). C(boot_check) warns when it is missing, not
        a regular file, from another boot (the unit did not run in this boot) or records a problem the boot check could
        not repair. Not given, not checked.
    type: path
  container_configs:
    description:
      - Paths of LXC or PVE container configs (for example C(/etc/pve/lxc/105.conf)) whose device rules must cover
        the current nvidia-uvm major.
    type: list
    elements: path
    default: []
  fail_on_error:
    description: Fail the task when a finding is an error. All results are returned either way.
    type: bool
    default: true
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - Needs root on the node for C(lspci)'s ACS capabilities (as another user lspci prints C(<access denied>) and the
    finding C(acs_unknown) says so), for the C(LnkCap:)/C(LnkSta:) lines of a GPU without sysfs link attributes (else
    nvidia-smi judges its link) and for other users' C(/proc/<pid>/cgroup).
  - A missing C(lspci) is one C(program_missing) warning naming what was not checked (ACS redirect, the link of a GPU
    without sysfs link attributes); a missing C(dkms) is info (the module build is judged from the module files).
  - The result key is RV(skipped_checks), not C(skipped), because Ansible shows a task whose result has a non-empty
    C(skipped) as skipped.
seealso:
  - module: llmops.serving.nvidia_driver_facts
  - module: llmops.serving.gpu_device_nodes
  - name: NCCL troubleshooting, PCI Access Control Services
    description: Why ACS redirect and IOMMU translation make peer-to-peer hang, and how to disable them.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
  - name: NVIDIA Xid errors
    description: The catalogue of Xid codes, their causes and actions.
    link: https://docs.nvidia.com/deploy/xid-errors/index.html
"""

EXAMPLES = r"""
- name: Preflight the node for two servers
  llmops.serving.gpu_preflight:
    scope: node
    gpu_groups:
      - name: qwen-tp2
        gpus: ["0", "1"]
      - name: embed
        gpus: [GPU-b8c856ad-2dde-7a2f-700f-d3c769c21b63]
    container_configs:
      - /etc/pve/lxc/105.conf
  register: preflight

- name: Print every finding, errors first
  ansible.builtin.debug:
    var: preflight.summary

- name: Preflight inside the container, report only
  llmops.serving.gpu_preflight:
    scope: container
    fail_on_error: false
  register: container_preflight
"""

RETURN = r"""
findings:
  description: Every finding, errors first, then warnings, then info.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check's id, for example C(acs_redirect), C(xid_event), C(uvm_major_mismatch).
      type: str
    severity:
      description: C(error), C(warning) or C(info).
      type: str
    subject:
      description: What it is about, for example C(GPU1 0000:3b:00.0), C(server qwen-tp2), C(kernel 6.8.12-4-pve (next boot)).
      type: str
    what:
      description: What was found.
      type: str
    evidence:
      description: The lines it rests on, verbatim but cut to 300 characters each (at most 6 and a count), control characters as C(\xNN).
      type: list
      elements: str
    consequence:
      description: What it means for this deployment.
      type: str
    fix:
      description: What to do.
      type: str
  sample:
    - check: acs_redirect
      severity: warning
      subject: server qwen-tp2
      what: "ACS redirect is on at 1 bridge on the path between the server's GPUs: 0000:00:01.1"
      evidence: ["0000:00:01.1 ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"]
      consequence: peer-to-peer between GPU0 0000:01:00.0 and GPU1 0000:02:00.0 is redirected up to the root complex ...
      fix: "disable ACS redirect on 0000:00:01.1: in the BIOS ..."
error_count:
  description: The number of error findings.
  returned: always
  type: int
  sample: 1
warning_count:
  description: The number of warning findings.
  returned: always
  type: int
  sample: 2
summary:
  description: One line per finding, in the order of RV(findings), ready to print.
  returned: always
  type: list
  elements: str
  sample: ["ERROR uvm_node /dev/nvidia-uvm: /dev/nvidia-uvm does not exist on the node; CUDA fails ... -> fix: ..."]
gpus:
  description:
    - What was read per GPU nvidia-smi lists - C(index), C(uuid), C(bus_id), C(name), C(persistence_mode),
      C(pcie) (C(gen_current), C(gen_max), C(width_current), C(width_max) from nvidia-smi), C(ecc_mode),
      C(retired_pages_pending), C(remapped_rows_pending), C(remapped_rows_failure), C(in_deployment); on the node
      also C(pcie_path) (the bridges from the root port down to the GPU, from sysfs), C(sysfs_link) (C(current_speed),
      C(max_speed) in GT/s, C(current_width), C(max_width)), C(lspci_link) (the same keys from C(LnkSta:) and C(LnkCap:),
      only for a GPU whose sysfs link attributes could not be read), C(iommu_group), C(iommu_group_type) and
      C(iommu_mode) (C(translated), C(passthrough), C(off) or null).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-b8c856ad-2dde-7a2f-700f-d3c769c21b63
      bus_id: "0000:00:06.0"
      name: NVIDIA H200
      persistence_mode: Enabled
      pcie: {gen_current: 5, gen_max: 5, width_current: 16, width_max: 16}
      ecc_mode: Enabled
      retired_pages_pending: null
      remapped_rows_pending: false
      remapped_rows_failure: false
      in_deployment: true
topology:
  description:
    - The parsed C(nvidia-smi topo -m) - C(columns), C(gpus) and C(nics) (per row C(links) by column, C(cpu_affinity),
      C(numa_affinity), C(gpu_numa_id)), C(legend), C(nic_names); null in a container or when it cannot be read.
  returned: always
  type: dict
  sample: {"columns": ["GPU0", "GPU1", "CPU Affinity", "NUMA Affinity"],
           "gpus": {"GPU0": {"links": {"GPU0": "X", "GPU1": "PXB"}, "cpu_affinity": "0-27", "numa_affinity": "0", "gpu_numa_id": null}}}
boot:
  description:
    - C(boot_id) (from O(boot_id_file), null when unreadable) and C(init_started), when PID 1 of this scope started (ISO
      8601 UTC; the node's boot, or the container's start). A verification compares them with the previous one's to
      tell a node reboot from a container restart.
  returned: always
  type: dict
  sample: {"boot_id": "0f5c3c8e-5a57-4c8b-9d1e-2f3a4b5c6d7e", "init_started": "2026-12-04T20:01:13Z"}
skipped_checks:
  description:
    - The checks not run, each with C(check) and C(reason) (container scope, nothing to check, or a GPU whose link
      width no source gives).
  returned: always
  type: list
  elements: dict
  sample: [{"check": "topology", "reason": "only the node sees the PCIe topology"}]
uvm:
  description: C(major) of nvidia-uvm in C(/proc/devices) (null when not loaded) and C(node) (C(exists), C(char), C(major), C(minor)).
  returned: always
  type: dict
  sample: {"major": 508, "node": {"exists": true, "char": true, "major": 508, "minor": 0}}
kernels:
  description:
    - On the node, C(running), C(next_boot), C(pin), C(pin_file), C(installed) (oldest first) and per checked kernel
      its C(module_files) and C(dkms_line); null in a container.
  returned: always
  type: dict
  sample: {"running": "6.8.12-4-pve", "next_boot": "6.8.12-9-pve", "pin": null, "installed": ["6.8.12-4-pve", "6.8.12-9-pve"]}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import gpu_preflight_checks as checks
from ansible_collections.llmops.serving.plugins.module_utils import gpu_topology, kernel_gpu_log, nvidia_module_build, pcie_path, procfs
from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import (
    SEVERITIES,
    Finding,
    count,
    failure_message,
    gpu_subject,
    sort_findings,
    visible,
)

MAX_BRIDGES = 64
ACS_UNCHECKED = "ACS redirect on the PCIe path between GPUs is not checked"
LINK_FROM_NVIDIA_SMI = "the PCIe link of a GPU without sysfs link attributes is judged from nvidia-smi alone"
NODE_ONLY = (
    ("topology", "only the node sees the PCIe topology (nvidia-smi topo -m)"),
    ("acs", "only the node can read the bridges' ACS capability (lspci)"),
    ("iommu", "only the node sees its IOMMU groups and kernel command line"),
    ("kernel_module_build", "the container shares the node's kernel; the node builds its module"),
)


class Preflight:
    """One run: the parameters, the findings so far and what was read."""

    def __init__(self, params, runner=checks.run_bounded):
        self.params = params
        self.run = runner
        self.findings = []
        self.skipped = []
        self.missing = {}
        self.gpus = []
        self.groups = []
        self.deployment = None
        self.topology = None
        self.kernels = None
        self.boot = {"boot_id": None, "init_started": None}
        self.uvm = {"major": None, "node": None}
        self.chains = {}
        self.redirects = {}

    def guarded(self, name, function, *args):
        """Run one check; an exception becomes a ``preflight_check_failed`` finding and the others still run."""
        try:
            return function(*args)
        except Exception as exc:  # pylint: disable=broad-except
            self.findings.append(Finding("preflight_check_failed", "warning", name, "the check raised %s: %s" % (
                type(exc).__name__, exc), [], "this check's result is unknown", "report it with the evidence of the command it read"))
            return None

    def program_missing(self, program, severity, consequence):
        """One ``program_missing`` finding per program; a later check that misses it too adds its consequence (and
        raises the severity where its own is higher)."""
        known = self.missing.get(program)
        if known is None:
            self.missing[program] = Finding("program_missing", severity, program, "%s is not installed or not executable" % program,
                                            [], consequence, "install it (Debian: apt install %s)" % {
                                                "lspci": "pciutils", "dkms": "dkms"}.get(os.path.basename(program), os.path.basename(program)))
            self.findings.append(self.missing[program])
            return
        if consequence not in known.consequence:
            known.consequence = visible("%s; %s" % (known.consequence, consequence))
        if SEVERITIES.index(severity) < SEVERITIES.index(known.severity):
            known.severity = severity

    def execute(self):
        params = self.params
        node = params["scope"] == "node"
        gpus, found, _fields = checks.query_gpus(params["nvidia_smi"], self.run)
        self.gpus, self.findings = gpus, self.findings + found
        self.groups, found = checks.resolve_groups(params["gpu_groups"], gpus)
        self.findings += found
        if params["gpu_groups"]:
            self.deployment = {gpu["index"] for _name, members in self.groups for gpu in members}
        if node:
            for gpu in gpus:
                if gpu["bus_id"]:
                    self.chains[gpu["index"]] = self.guarded("pcie_path", pcie_path.device_chain, params["sysfs_root"], gpu["bus_id"])
        for gpu in gpus:
            self.guarded("gpu %s" % gpu["index"], self.check_gpu, gpu)
        self.guarded("uvm", self.check_uvm)
        if gpus:
            self.guarded("processes", self.check_processes)
        if node:
            self.guarded("topology", self.check_topology)
            self.guarded("acs", self.check_acs)
        else:
            self.skipped += [{"check": check, "reason": reason} for check, reason in NODE_ONLY]
        log_text = self.guarded("kernel_log", self.read_kernel_log)
        if log_text is not None:
            events = kernel_gpu_log.parse_xid_events(log_text)
            self.findings += kernel_gpu_log.xid_findings(events, gpus, self.deployment)
        if node:
            self.guarded("iommu", self.check_iommu, log_text or "")
            self.guarded("kernel_module_build", self.check_module_build)
        self.guarded("boot", self.check_boot)
        if not any(len(members) > 1 for _name, members in self.groups) and node:
            self.skipped.append({"check": "p2p_path", "reason": "no server of gpu_groups has two or more GPUs"})
        return self.result()

    def ours(self, gpu):
        return self.deployment is None or gpu["index"] in self.deployment

    def check_gpu(self, gpu):
        """The GPU's link from sysfs; where sysfs has no link attributes for it (no device entry, or the attributes
        missing or unreadable), from lspci's LnkCap/LnkSta on the node; where neither judges it, from nvidia-smi."""
        chain = self.chains.get(gpu["index"]) or {"chain": [], "dirs": []}
        judged = False
        links = []
        if chain["dirs"]:
            links = [pcie_path.read_link(directory) for directory in chain["dirs"]]
            gpu["pcie_path"] = chain["chain"][:-1]
            gpu["sysfs_link"] = {key: value for key, value in links[-1].items() if key != "raw"}
            judged = links[-1]["current_width"] is not None
            if self.ours(gpu):
                self.findings += self.sysfs_link_findings(gpu, chain, links)
        if not judged and self.params["scope"] == "node" and gpu["bus_id"]:
            judged = self.lspci_link(gpu, links[-2] if len(links) > 1 else None)
        if self.ours(gpu):
            self.findings += checks.gpu_findings(gpu, from_sysfs_link=judged)
        if not judged and None in (gpu["pcie"]["width_current"], gpu["pcie"]["width_max"]) and self.params["scope"] == "node":
            self.skipped.append({"check": "pcie_link_width", "reason": "%s: neither sysfs, lspci nor nvidia-smi gives its link width" % (
                gpu_subject(gpu["index"], gpu["bus_id"]))})

    def lspci_link(self, gpu, upstream):
        """The GPU's link from ``lspci -vvv -s <bus id>`` (its ``LnkCap:``/``LnkSta:``), with the upstream port's
        capable width and speed from sysfs where it has them, judged as the sysfs attributes are: True when lspci
        decided the width (then nvidia-smi's is not used)."""
        device = self.lspci(gpu["bus_id"], LINK_FROM_NVIDIA_SMI)
        if not device or not device.get("lnksta"):
            return False
        status, capability = device["lnksta"], device.get("lnkcap") or {}
        gpu["lspci_link"] = {"current_speed": status["speed"], "max_speed": capability.get("speed"),
                             "current_width": status["width"], "max_width": capability.get("width")}
        if self.ours(gpu):
            self.findings += pcie_path.lspci_link_findings(
                gpu_subject(gpu["index"], gpu["bus_id"]), device, label="lspci -vvv -s %s" % gpu["bus_id"],
                upstream_width=upstream["max_width"] if upstream else None, upstream_speed=upstream["max_speed"] if upstream else None)
        return pcie_path.lspci_judges_width(device)

    def sysfs_link_findings(self, gpu, chain, links):
        """Each link of the chain (device i and its upstream port i-1): narrower than both ends can do; the GPU's own
        link also for speed (info)."""
        found = []
        for position in range(1, len(links)):
            device, upstream = links[position], links[position - 1]
            capable = min([width for width in (device["max_width"], upstream["max_width"]) if width] or [0]) or None
            is_gpu = position == len(links) - 1
            subject = gpu_subject(gpu["index"], gpu["bus_id"]) if is_gpu else "bridge %s (above GPU%s)" % (chain["chain"][position], gpu["index"])
            evidence = ["%s/%s: %s" % (chain["dirs"][position], name, device["raw"][name]) for name in pcie_path.LINK_ATTRIBUTES]
            evidence.append("%s/max_link_width: %s" % (chain["dirs"][position - 1], upstream["raw"]["max_link_width"]))
            width = pcie_path.width_finding(subject, device["current_width"], capable, evidence, "sysfs")
            if width:
                found.append(width)
            if is_gpu:
                capable_speed = min([speed for speed in (device["max_speed"], upstream["max_speed"]) if speed] or [0]) or None
                speed = pcie_path.speed_finding(subject, device["current_speed"], capable_speed, evidence, "sysfs")
                if speed:
                    found.append(speed)
        return found

    def check_boot(self):
        params = self.params
        boot_id = (checks.read_text(params["boot_id_file"], limit=64) or "").strip() or None
        started = procfs.process_start_epoch(1, params["proc_root"])
        self.boot = {"boot_id": boot_id, "init_started": procfs.iso_utc(started) if started is not None else None}
        report = params["boot_check_report"]
        if params["scope"] != "node" or not report:
            return
        # Only a regular file is read (a FIFO there would hang the run).
        self.findings += checks.boot_check_findings(report, checks.read_regular_text(report), boot_id)

    def check_uvm(self):
        params = self.params
        dev_path = os.path.join(params["dev_dir"], "nvidia-uvm")
        node = checks.stat_node(dev_path)
        proc_devices = checks.read_text(params["proc_devices"] or os.path.join(params["proc_root"], "devices"))
        major, found = checks.uvm_node_findings(proc_devices, node, dev_path, params["scope"])
        if not found and params["scope"] == "container":
            # The right node with the right major can still be closed to this container (its devices cgroup).
            found = checks.uvm_open_findings(node, dev_path)
        self.uvm = {"major": major, "node": node}
        self.findings += found
        for path in params["container_configs"]:
            if not os.path.lexists(path):
                # A container this run has not created yet: its config is written with the current major.
                self.skipped.append({"check": "uvm_major_mismatch", "reason": "%s does not exist (yet)" % path})
                continue
            self.findings += checks.config_findings(path, checks.read_text(path), major, uvm_path=dev_path)

    def check_processes(self):
        result = self.run([self.params["nvidia_smi"], checks.APPS_QUERY, "--format=csv,noheader,nounits"])
        if result["rc"] != 0:
            self.findings.append(Finding("nvidia_smi_failed", "warning", "nvidia-smi", "the compute process query failed: %s" % checks.first_line(result),
                                         [checks.first_line(result)], "processes holding GPU memory were not checked",
                                         "run nvidia-smi --query-compute-apps=pid,used_memory --format=csv by hand"))
            return
        apps = checks.parse_compute_apps(result["stdout"])
        self.findings += checks.process_findings(apps, self.gpus, self.deployment, self.params["proc_root"])

    def multi_gpu_groups(self):
        return [(name, members) for name, members in self.groups if len(members) > 1]

    def check_topology(self):
        result = self.run([self.params["nvidia_smi"], "topo", "-m"])
        if result["rc"] != 0:
            if self.multi_gpu_groups():
                self.findings.append(Finding("topology_unreadable", "warning", "nvidia-smi topo -m",
                                             "nvidia-smi topo -m failed: %s" % checks.first_line(result),
                                             [checks.first_line(result)], "the peer-to-peer path between the servers' GPUs is not judged",
                                             "run nvidia-smi topo -m by hand"))
            return
        try:
            self.topology = gpu_topology.parse_topo_matrix(result["stdout"])
        except gpu_topology.TopologyError as exc:
            self.findings.append(Finding("topology_unreadable", "warning", "nvidia-smi topo -m", str(exc), result["stdout"].splitlines()[:3],
                                         "the peer-to-peer path between the servers' GPUs is not judged", "run nvidia-smi topo -m by hand"))
            return
        for name, members in self.multi_gpu_groups():
            capable = [(gpu["pcie"]["gen_max"], gpu["pcie"]["width_max"]) for gpu in members]
            slowest = min(capable, key=lambda pair: gpu_topology.pcie_bandwidth(*pair) or 0) if all(all(pair) for pair in capable) else None
            self.findings += gpu_topology.group_findings(name, members, self.topology, slowest)

    def nvlink_only(self, members):
        """True when the matrix shows NVLink between every two GPUs of the group: PCIe P2P is not involved."""
        if self.topology is None:
            return False
        worst = gpu_topology.worst_link(self.topology, [gpu["index"] for gpu in members])
        return worst is not None and worst[0] is not None and gpu_topology.link_rank(worst[0]) == 0

    def check_acs(self):
        cache = {}
        for name, members in self.multi_gpu_groups():
            if self.nvlink_only(members):
                continue
            chains = [self.chains.get(gpu["index"]) for gpu in members]
            if not all(chain and chain["chain"] for chain in chains):
                continue
            bridges = []
            for i, first in enumerate(chains):
                for second in chains[i + 1:]:
                    bridges += [bridge for bridge in pcie_path.path_between(first, second)["bridges"] if bridge not in bridges]
            redirecting, unknown = [], []
            for bridge in bridges[:MAX_BRIDGES]:
                if bridge not in cache:
                    cache[bridge] = self.lspci(bridge)
                device = cache[bridge]
                if device is False:
                    return
                redirect = pcie_path.acs_redirects(device)
                if redirect:
                    redirecting.append((bridge, device["lines"]["ACSCtl"]))
                elif redirect is None and device and device.get("access_denied"):
                    unknown.append(bridge)
            if unknown:
                self.findings.append(Finding("acs_unknown", "info", "server %s" % name,
                                             "lspci cannot read the ACS capability of %s (<access denied>)" % ", ".join(unknown), [],
                                             "ACS redirect on the path between the server's GPUs is not judged", "run the preflight as root"))
            self.redirects[name] = redirecting

    def lspci(self, bdf, consequence=ACS_UNCHECKED):
        """The parsed ``lspci -vvv -s <bdf>`` device (a bridge, or a GPU without sysfs link attributes), None when
        lspci printed nothing for it, False when lspci is missing (a ``program_missing`` warning with
        ``consequence``)."""
        result = self.run([self.params["lspci"], "-vvv", "-s", bdf])
        if result["missing"]:
            self.program_missing(self.params["lspci"], "warning", consequence)
            return False
        if result["rc"] != 0:
            return None
        devices = pcie_path.parse_lspci(result["stdout"])
        return devices.get(bdf) or devices.get(None) or (next(iter(devices.values())) if len(devices) == 1 else None)

    def read_kernel_log(self):
        tried = []
        for command in (self.params["kernel_log_command"], ["dmesg"]):
            if not command:
                continue
            result = self.run(command)
            if result["rc"] == 0 and result["stdout"].strip():
                return result["stdout"]
            tried.append("%s: %s" % (" ".join(command), checks.first_line(result)))
        self.findings.append(Finding("kernel_log_unreadable", "info", "kernel log", "the kernel log cannot be read", tried,
                                     "Xid events (GPU faults since boot) are not checked%s" % (
                                         "" if self.params["scope"] == "node" else "; a container usually may not read it"),
                                     "run the preflight as root on the node (journalctl -k -b or dmesg)"))
        return None

    def check_iommu(self, log_text):
        params = self.params
        log = kernel_gpu_log.parse_iommu_log(log_text)
        cmdline_text = checks.read_text(os.path.join(params["proc_root"], "cmdline"), 4096) or ""
        cmdline = kernel_gpu_log.parse_cmdline(cmdline_text)
        for gpu in self.gpus:
            if not gpu["bus_id"]:
                continue
            group, group_type = pcie_path.read_iommu_group(params["sysfs_root"], gpu["bus_id"])
            gpu["iommu_group"], gpu["iommu_group_type"] = group, group_type
            # Without a group no IOMMU translates the device, whatever default domain the kernel printed (the H200 VM
            # logs "Default domain type: Translated" and has no IOMMU).
            gpu["iommu_mode"] = kernel_gpu_log.iommu_mode(group_type, log, cmdline) if group else "off"
        for name, members in self.multi_gpu_groups():
            redirecting = self.redirects.get(name, [])
            translated = [gpu for gpu in members if gpu.get("iommu_mode") == "translated"]
            if translated and not self.nvlink_only(members):
                evidence = ["%s: IOMMU group %s, type %s" % (gpu_subject(gpu["index"], gpu["bus_id"]), gpu.get("iommu_group"), gpu.get("iommu_group_type"))
                            for gpu in translated]
                evidence += log["lines"][:2] + ["/proc/cmdline: %s" % cmdline_text.strip()]
                self.findings.append(kernel_gpu_log.iommu_finding(name, members, evidence, bool(redirecting), log["vendor"]))
            if redirecting:
                self.findings.append(pcie_path.acs_finding(name, members, redirecting, bool(translated)))

    def check_module_build(self):
        params = self.params
        result = self.run([params["dkms"], "status"])
        status = None
        if result["missing"]:
            self.program_missing(params["dkms"], "info", "the module build is judged from the module files alone")
        elif result["rc"] is not None:
            # dkms prints its "Error! ..." lines on stderr, and may list the other modules on stdout even then.
            status = nvidia_module_build.parse_dkms_status(result["stdout"])
            status["other"] += [line for line in result["stderr"].splitlines()[:nvidia_module_build.MAX_LINES] if line.strip()]
        running = params["running_kernel"] or os.uname().release
        # A loaded module proves a build for the running kernel (the H200 VM's module lies outside /lib/modules).
        loaded = None
        if os.path.isdir(os.path.join(params["sysfs_root"], "module", "nvidia")):
            loaded = os.path.join(params["sysfs_root"], "module", "nvidia")
        self.kernels = nvidia_module_build.build_state(params["modules_root"], params["boot_dir"], params["boot_pin_file"], running, status, loaded)
        self.findings += nvidia_module_build.build_findings(self.kernels, status)

    def result(self):
        findings = sort_findings(self.findings)
        gpus = []
        for gpu in self.gpus:
            record = {key: value for key, value in gpu.items() if key != "line"}
            record["in_deployment"] = self.ours(gpu)
            gpus.append(record)
        return {
            "changed": False,
            "findings": [finding.as_dict() for finding in findings],
            "error_count": count(findings, "error"),
            "warning_count": count(findings, "warning"),
            "summary": [finding.summary() for finding in findings],
            "gpus": gpus,
            "topology": self.topology,
            "skipped_checks": self.skipped,
            "uvm": self.uvm,
            "kernels": self.kernels,
            "boot": self.boot,
        }, failure_message(findings)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            scope=dict(type="str", required=True, choices=["node", "container"]),
            gpu_groups=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                gpus=dict(type="list", elements="str", required=True),
            )),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            lspci=dict(type="str", default="lspci"),
            dkms=dict(type="str", default="dkms"),
            kernel_log_command=dict(type="list", elements="str", default=["journalctl", "-k", "-b", "--no-pager", "-o", "short-monotonic"]),
            sysfs_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
            proc_devices=dict(type="path"),
            dev_dir=dict(type="path", default="/dev"),
            modules_root=dict(type="path", default="/lib/modules"),
            boot_dir=dict(type="path", default="/boot"),
            boot_pin_file=dict(type="path", default="/etc/kernel/proxmox-boot-pin"),
            running_kernel=dict(type="str"),
            container_configs=dict(type="list", elements="path", default=[]),
            boot_id_file=dict(type="path", default="/proc/sys/kernel/random/boot_id"),
            boot_check_report=dict(type="path"),
            fail_on_error=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    result, message = Preflight(module.params).execute()
    if message and module.params["fail_on_error"]:
        module.fail_json(msg=message, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
