#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: service_provenance
short_description: Prove that a systemd unit's current invocation is what serves the port and holds the GPUs
description:
  - Reads the unit's state with C(systemctl show) (ActiveState, SubState, MainPID, InvocationID, ExecMainStartTimestamp,
    ControlGroup) and the kernel's view from C(/proc) directly; C(ss), C(lsof) and C(nvidia-smi) are not needed.
  - Fails, naming the culprit process (PID, command line, start time, cgroup), when the unit is not active, when its
    running invocation belongs to another deployment, when the TCP listener on O(port) (IPv4 or IPv6) is a process
    outside the unit's cgroup (for example a server started by hand with nohup), when a process outside the unit holds
    a GPU device node, or when the invocation ID equals O(previous_invocation_id) (a restart that did not happen).
  - All collected facts are returned on failure too, next to RV(ignore:msg).
  - Reads only one variable, C(LLMOPS_DEPLOYMENT_ID), from the main process's environment; nothing else from it is
    returned or logged (the environment holds secrets).
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  name:
    description:
      - The systemd unit, for example C(sglang-qwen36.service). A name without a unit suffix gets C(.service).
    type: str
    required: true
  port:
    description:
      - TCP port the server must be listening on. Every LISTEN socket on this port, IPv4 and IPv6 (including
        v4-mapped), must belong to a process in the unit's cgroup.
      - When omitted, the listener is not checked.
    type: int
  deployment_id:
    description:
      - The deployment ID that was just deployed. The running invocation's C(LLMOPS_DEPLOYMENT_ID) (from the main
        process's environment) must equal it.
      - When omitted, the running invocation's ID is only returned.
    type: str
  previous_invocation_id:
    description:
      - The unit's InvocationID before a restart that should have happened. The module fails when the current
        InvocationID is the same.
    type: str
  gpu_devices:
    description:
      - Glob patterns of GPU device nodes. A process outside the unit with any of them open is a stray.
      - Nodes are compared by device number, so a second node for the same device is recognised too.
    type: list
    elements: str
    default: ['/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
  gpus:
    description:
      - The UUIDs of the GPUs the unit's processes must hold, exactly (the deployment's; C(sglang_service_gpus)). The
        GPU device nodes they hold are mapped to GPUs through the kernel module's list (O(proc_driver_dir)). A GPU of
        the list that no process of the unit holds, or a held GPU that is not in the list, fails the check, naming the
        GPU, its index and device node on the host, and whether that node is in the container.
      - Omitted or empty, the held GPUs are only reported (RV(gpus_held)).
    type: list
    elements: str
    default: []
  proc_driver_dir:
    description:
      - The NVIDIA kernel module's C(/proc) directory (C(gpus/<bus>/information) maps a device minor to a GPU's UUID and
        index); inside an LXC container the host's.
    type: path
    default: /proc/driver/nvidia
  allow_strays:
    description:
      - Report GPU device holders outside the unit in RV(strays) without failing (for example a second, deliberate
        server on the same host).
      - A listener on O(port) outside the unit always fails.
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - Run it as root (C(become)) with C(CAP_SYS_PTRACE), which root has on a host and in an LXC container but not in a Docker container
    by default; without it the file descriptors of other users' processes cannot be read and
    strays may go unseen (the module warns).
  - Sockets are read from the network namespace the module runs in.
  - C(changed) is always false.
  - Process start times are computed from C(/proc/<pid>/stat) and the boot time; they are UTC, to the second.
seealso:
  - module: llmops.serving.log_provenance
"""

EXAMPLES = r"""
- name: Prove that sglang-qwen36 is what serves port 30000 for this deployment
  llmops.serving.service_provenance:
    name: sglang-qwen36.service
    port: 30000
    deployment_id: "{{ sglang_service_deployment_id }}"
  register: provenance

- name: After the restart this play made, prove that it really happened
  llmops.serving.service_provenance:
    name: sglang-qwen36.service
    port: 30000
    previous_invocation_id: "{{ sglang_service_previous_invocation_id }}"
  when: sglang_service_restart_expected

- name: Only report GPU holders outside the unit
  llmops.serving.service_provenance:
    name: sglang-qwen36.service
    allow_strays: true
  register: gpu_report
"""

RETURN = r"""
unit:
  description: What systemd says about the unit; null when systemd cannot be asked (then no other fact comes back).
  returned: always
  type: dict
  contains:
    name:
      description: The unit's name (systemd's Id).
      type: str
      sample: sglang-qwen36.service
    load_state:
      description: LoadState (C(loaded), C(not-found), ...).
      type: str
      sample: loaded
    active_state:
      description: ActiveState.
      type: str
      sample: active
    sub_state:
      description: SubState.
      type: str
      sample: running
    result:
      description: Result of the last run (C(success), C(exit-code), ...).
      type: str
      sample: success
    main_pid:
      description: MainPID (0 when none).
      type: int
      sample: 4711
    invocation_id:
      description: InvocationID of the current (or last) run.
      type: str
      sample: 6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10
    exec_main_start_timestamp:
      description: When the main process was started, ISO 8601 UTC; null when never.
      type: str
      sample: "2026-11-29T19:45:01Z"
    exec_main_start_epoch:
      description: The same moment in seconds since the epoch; null when never.
      type: float
      sample: 1795981501.0
    control_group:
      description: The unit's cgroup (ControlGroup).
      type: str
      sample: /system.slice/sglang-qwen36.service
    n_restarts:
      description: How often systemd restarted the unit automatically (NRestarts), when systemd reports it.
      type: int
      sample: 0
deployment_id:
  description: C(LLMOPS_DEPLOYMENT_ID) of the running invocation (from MainPID's environment); null when not running or unset.
  returned: always
  type: str
  sample: 3f5a0c9d1e7b2a4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c
listener:
  description:
    - The process listening on O(port); when several do, the first one outside the unit, else the first one.
    - Null when O(port) is not given or nothing listens.
  returned: always
  type: dict
  contains:
    port:
      description: The port.
      type: int
      sample: 30000
    address:
      description: The local address of the socket (IPv4, IPv6 or v4-mapped C(::ffff:a.b.c.d)).
      type: str
      sample: 0.0.0.0
    family:
      description: C(ipv4) or C(ipv6).
      type: str
      sample: ipv4
    pid:
      description: PID holding the socket; null when no visible process does (and so are the process's other keys).
      type: int
      sample: 4711
    cmdline:
      description: Its command line, secrets masked (C(--api-key ********)), shortened to 300 characters.
      type: str
      sample: /opt/sglang/bin/python -m sglang.launch_server --model-path /models/Qwen3.6-27B --port 30000
    comm:
      description: Its process name from C(/proc/<pid>/stat).
      type: str
      sample: python
    started_at:
      description: When it started, ISO 8601 UTC.
      type: str
      sample: "2026-11-29T19:45:01Z"
    cgroup:
      description: Its systemd cgroup path.
      type: str
      sample: /system.slice/sglang-qwen36.service
    in_unit:
      description: Whether it lives in the unit's cgroup.
      type: bool
      sample: true
listeners:
  description: Every LISTEN socket on O(port) with its holder (same keys as RV(listener)); empty without O(port).
  returned: always
  type: list
  elements: dict
  sample: []
gpu_devices_found:
  description: The device nodes that O(gpu_devices) matched on the host.
  returned: always
  type: list
  elements: str
  sample: [/dev/nvidia0, /dev/nvidia1, /dev/nvidiactl, /dev/nvidia-uvm]
gpu_processes:
  description: Every process with a GPU device node open.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
    cmdline:
      description: Command line.
      type: str
    comm:
      description: Process name from C(/proc/<pid>/stat).
      type: str
    started_at:
      description: Start time, ISO 8601 UTC.
      type: str
    cgroup:
      description: Its systemd cgroup path.
      type: str
    in_unit:
      description: Whether it lives in the unit's cgroup.
      type: bool
    devices:
      description: The device nodes it holds (as matched by O(gpu_devices)).
      type: list
      elements: str
  sample:
    - pid: 4790
      cmdline: sglang::scheduler_TP0
      comm: sglang::schedul
      started_at: "2026-11-29T19:45:09Z"
      cgroup: /system.slice/sglang-qwen36.service
      in_unit: true
      devices: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm]
gpus_held:
  description:
    - The GPUs the unit's processes hold, from their device nodes and the kernel module's list, in index order -
      C(index) (the host's nvidia-smi index), C(uuid), C(minor), C(bus_id); empty when the list cannot be read.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-5e1d0000-5e1d-4c0a-9b7e-000000000000", "minor": 1, "bus_id": "0000:18:00.0"}]
strays:
  description: Processes outside the unit that listen on O(port) or hold a GPU device node.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
    cmdline:
      description: Command line.
      type: str
    started_at:
      description: Start time, ISO 8601 UTC.
      type: str
    cgroup:
      description: Its systemd cgroup path.
      type: str
    reason:
      description: Why it is a stray.
      type: str
  sample:
    - pid: 4242
      cmdline: python3 -m sglang.launch_server --port 30000
      started_at: "2026-11-29T19:40:02Z"
      cgroup: /user.slice/user-0.slice/session-3.scope
      reason: listens on port 30000 (0.0.0.0) outside sglang-qwen36.service
problems:
  description: Every reason for failure, one sentence each; the first is RV(ignore:msg)'s start.
  returned: always
  type: list
  elements: str
  sample: []
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus
from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import unit_check

DEFAULT_GPU_DEVICES = ["/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
# Where a GPU's node /dev/nvidia<minor> is looked for when the server does not hold it.
DEV_DIR = "/dev"

# Problems that name a stray (templates for UnitCheck.report_stray).
PORT_HOLDER_PROBLEM = ("port {port} is held by {process}, which is outside {unit} (cgroup {cgroup}). A server started by hand "
                       "(nohup?) is answering instead of the unit. {advice}")
GPU_HOLDER_PROBLEM = ("{process} holds {devices} but is outside {unit} (cgroup {cgroup}): it takes GPU memory the server needs "
                      "(a leftover server or worker?). {advice}")

# A socket on the port whose holder no process in /proc shows.
_INVISIBLE_HOLDER = dict.fromkeys(("pid", "cmdline", "comm", "started_at", "cgroup"), None)


def find_gpu_devices(patterns):
    """{identity: path} of the device nodes matching ``patterns`` (first path wins for one device)."""
    identities = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                identity = procfs.file_identity(os.stat(path))
            except OSError:
                continue
            identities.setdefault(identity, path)
    return identities


class ServiceProvenance(unit_check.UnitCheck):
    """Whether the unit's current invocation is this deployment's and what serves the port and holds the GPUs."""

    def down_problem(self):
        if self.unit["load_state"] != "loaded":
            return "%s is not loaded (LoadState=%s): is the name right, and was the unit installed on this host?" % (
                self.name, self.unit["load_state"])
        if self.main_process_up:
            return None
        return ("%s is not running (%s): the server is down or failed to start. Read `journalctl -u %s -n 50` and the "
                "unit's newest log file." % (self.name, unit_check.unit_state(self.unit), self.name))

    def main_phrase(self):
        return unit_check.process_phrase(self.describe(self.unit["main_pid"]))

    def check_deployment(self, expected):
        """The running invocation's LLMOPS_DEPLOYMENT_ID, which must be ``expected`` when given."""
        running_id = procfs.read_deployment_id(self.unit["main_pid"])
        if expected and running_id is None:
            self.problems.append(
                "the running invocation %s of %s (main %s) has no LLMOPS_DEPLOYMENT_ID in its environment: it was not started "
                "with this collection's deployment.env, so it cannot be the deployment %s." % (
                    self.unit["invocation_id"], self.name, self.main_phrase(), expected))
        elif expected and running_id != expected:
            self.problems.append(
                "the running invocation %s of %s (main %s) belongs to deployment %s, not to %s that was just deployed: the unit "
                "was not restarted after the change. Restart it with systemctl and check again." % (
                    self.unit["invocation_id"], self.name, self.main_phrase(), running_id, expected))
        return running_id

    def check_restart(self, previous):
        if previous and previous == self.unit["invocation_id"]:
            self.problems.append("the restart did not happen: %s still runs invocation %s, the same as before (main %s)." % (
                self.name, previous, self.main_phrase()))

    def check_listener(self, port, unit_running):
        """(the listener to show, every listener) on ``port``; each process outside the unit is a stray, named once
        however many sockets (IPv4 and IPv6) it holds."""
        listeners = []
        outside = {}
        for entry in procfs.port_listeners(port, pids=self.other_pids):
            endpoint = {"port": port, "address": entry["address"], "family": entry["family"]}
            if not entry["pids"]:
                listeners.append(dict(endpoint, in_unit=False, **_INVISIBLE_HOLDER))
                self.problems.append(
                    "port %d (%s) is held by socket inode %d whose process is not visible in /proc (another PID namespace, "
                    "or /proc not readable: run as root with CAP_SYS_PTRACE), so nothing proves %s serves it."
                    % (port, entry["address"], entry["inode"], self.name))
            for pid in entry["pids"]:
                facts = self.describe(pid)
                listeners.append(dict(endpoint, **facts))
                if not facts["in_unit"]:
                    outside.setdefault(pid, (facts, []))[1].append(entry["address"])
        for pid, (facts, addresses) in sorted(outside.items()):
            self.report_stray(facts, "listens on port %d (%s) outside %s" % (port, ", ".join(addresses), self.name),
                              PORT_HOLDER_PROBLEM, port=port)
        if not listeners and unit_running:
            self.problems.append(
                "nothing listens on TCP port %d although %s is active (MainPID %s): the server is still loading, crashed in a "
                "worker, or listens on another port. Read the unit's current log." % (port, self.name, self.unit["main_pid"]))
        primary = ([entry for entry in listeners if not entry["in_unit"]] or listeners or [None])[0]
        return primary, listeners

    def check_gpus(self, patterns, allow_strays):
        """(the device nodes found, every process holding one); holders outside the unit are strays."""
        devices = find_gpu_devices(patterns)
        held = {}
        for holder in procfs.processes_holding(devices.keys(), pids=self.other_pids):
            path = devices[holder["identity"]]
            paths = held.setdefault(holder["pid"], [])
            if path not in paths:
                paths.append(path)
        gpu_processes = []
        for pid in sorted(held):
            facts = dict(self.describe(pid), devices=held[pid])
            gpu_processes.append(facts)
            if not facts["in_unit"]:
                nodes = ", ".join(held[pid])
                self.report_stray(facts, "holds %s outside %s" % (nodes, self.name),
                                  None if allow_strays else GPU_HOLDER_PROBLEM, devices=nodes)
        return sorted(set(devices.values())), gpu_processes

    def check_gpu_assignment(self, gpu_processes, expected, proc_driver_dir):
        """The GPUs the unit holds (by the device minors its processes have open), which must be ``expected`` when
        given: a missing one is named with its node and whether the node is in the container."""
        minors = set()
        for process in gpu_processes:
            if not process["in_unit"]:
                continue
            for path in process["devices"]:
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                if os.major(info.st_rdev) == nvidia_gpus.NVIDIA_MAJOR and os.minor(info.st_rdev) < nvidia_gpus.FIRST_CONTROL_MINOR:
                    minors.add(os.minor(info.st_rdev))
        try:
            driver_gpus = nvidia_gpus.read_driver_gpus(proc_driver_dir)
        except nvidia_gpus.GpuError as exc:
            if expected:
                self.problems.append("the GPUs %s holds cannot be told: %s" % (self.name, exc))
            return []
        held = [dict((key, gpu[key]) for key in ("index", "uuid", "minor", "bus_id")) for gpu in nvidia_gpus.held(minors, driver_gpus)]
        if not expected or not self.main_process_up:
            return held
        if not driver_gpus:
            self.problems.append("the GPUs %s holds cannot be told: %s/gpus lists no GPU (the NVIDIA kernel module's list)"
                                 % (self.name, proc_driver_dir))
            return held
        held_uuids = [gpu["uuid"] for gpu in held]
        for uuid in expected:
            if uuid in held_uuids:
                continue
            gpu = next((gpu for gpu in driver_gpus if gpu["uuid"] == uuid), None)
            if gpu is None:
                self.problems.append("%s should hold GPU %s, which the host's driver does not list at all" % (self.name, uuid))
                continue
            node = os.path.join(DEV_DIR, "nvidia%d" % gpu["minor"])
            state = nvidia_gpus.device_node_state(node, gpu["minor"])
            self.problems.append(
                "%s does not hold its assigned %s: %s. The container's GPU passthrough does not give it this GPU; run "
                "deploy.yml (the container play passes the assigned GPUs) or check the container's config on the node."
                % (self.name, "%s, /dev/nvidia%d on the host" % (nvidia_gpus.describe(gpu), gpu["minor"]),
                   "%s is not in this container" % node if state == "missing" else
                   "%s is here but the server does not use it (it cannot open it, or it started on other GPUs)" % node
                   if state == "present" else "something else is at %s" % node))
        for gpu in held:
            if gpu["uuid"] not in expected:
                self.problems.append("%s holds %s (/dev/nvidia%d), which is not one of the GPUs assigned to this deployment "
                                     "(%s)" % (self.name, nvidia_gpus.describe(gpu), gpu["minor"], ", ".join(expected)))
        return held


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            port=dict(type="int"),
            deployment_id=dict(type="str"),
            previous_invocation_id=dict(type="str"),
            gpu_devices=dict(type="list", elements="str", default=list(DEFAULT_GPU_DEVICES)),
            allow_strays=dict(type="bool", default=False),
            gpus=dict(type="list", elements="str", default=[]),
            proc_driver_dir=dict(type="path", default="/proc/driver/nvidia"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["port"] is not None and not 0 < params["port"] < 65536:
        module.fail_json(msg="port must be between 1 and 65535, got %d" % params["port"])
    check = ServiceProvenance(unit_check.load_unit(module, unseen="strays", unit=None))
    result = dict(unit=check.unit, deployment_id=None, listener=None, listeners=[])
    running = check.unit_running()
    if running:
        result["deployment_id"] = check.check_deployment(params["deployment_id"])
        check.check_restart(params["previous_invocation_id"])
    if params["port"] is not None:
        result["listener"], result["listeners"] = check.check_listener(params["port"], running)
    result["gpu_devices_found"], result["gpu_processes"] = check.check_gpus(params["gpu_devices"], params["allow_strays"])
    result["gpus_held"] = check.check_gpu_assignment(result["gpu_processes"], params["gpus"], params["proc_driver_dir"])
    check.finish(module, **result)


if __name__ == "__main__":
    main()
