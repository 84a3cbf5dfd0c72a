#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: lxc_gpu_passthrough
short_description: Pass NVIDIA GPU device nodes into a Proxmox VE container
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
description:
  - Configures a Proxmox VE container (LXC) so that it sees the host's GPU device nodes, from the nodes discovered
    on the host by stat (for example by the C(llmops.serving.pve_gpu_host) role). Majors are never assumed.
  - "In style C(raw): one C(lxc.cgroup2.devices.allow: c <major>:* rwm) per distinct major (C(lxc.cgroup.devices.allow)
    on a cgroup v1 host) and one C(lxc.mount.entry: <path> <path> none bind,optional,create=file) per node, written into
    C(/etc/pve/lxc/<vmid>.conf) on the node. Only O(backend=file) can do this: raw C(lxc.*) keys are not part of the
    Proxmox API nor of C(pct set)."
  - "In style C(dev): one C(devN: <path>[,gid=N][,mode=0NNN][,uid=N]) entry per node; Proxmox allows the node's current
    major itself at every start. An entry that already names the path is reused; new ones take the lowest free index."
  - A mount entry is recognised by its target (C(dev/nvidia0) and C(/dev/nvidia0) are one), whatever its source, so a
    second mount onto a node's place is never added. An entry that binds a per-container copy of the node (for example
    a node made with mknod under another directory) is kept when the host path is the same device (same type, major
    and minor, by stat), otherwise it is pointed at the host node; further entries onto the same target are removed. A
    node inside a bind-mounted directory (C(/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir)) is covered
    by it.
  - Per-minor allow lines (C(c 195:0 rwm)) of a discovered major go when the plan writes C(c 195:* rwm), which covers
    them.
  - A stale allow line (the nvidia-uvm and nvidia-caps majors are dynamic and change with kernel or driver updates) is
    rewritten in place into the current major of the node it belonged to, never into whichever major happens to be
    missing. What ties an old major to nvidia-uvm or nvidia-caps is the config itself - a per-container copy of the
    node with that major, a comment naming the node on or right above the line, the line's paragraph passing only
    that node, its minors, or that node being the only one passed whose line is missing. A stale line nothing ties is
    removed and the new line added. A line counts as a stale NVIDIA line only when it has the shape
    C(c <major>:* rwm) or C(c <major>:<minor> rwm) (an inline C(# comment) after it is kept), its major is in the
    kernel's dynamic range (234-254, 384-511), belongs to no discovered node and to no other device the container
    still passes (the module stats the sources of the container's other mount entries and dev entries), and the
    container passes an NVIDIA node with a dynamic major (nvidia-uvm, nvidia-uvm-tools, nvidia-caps). Every other line
    is left alone.
  - Each style removes the other style's entries for the discovered nodes when it can (backend C(file)).
  - The file is edited line by line, never regenerated, so the description comments, snapshot sections,
    C([pve:pending]) and unrelated lines stay byte for byte. It is written atomically (temporary file in the same
    directory, then rename) under Proxmox's own config lock, after a backup of the previous file.
options:
  vmid:
    description: ID of the container.
    type: int
    required: true
  devices:
    description:
      - The device nodes to pass, as discovered on the host. Each item has C(path) (under C(/dev/)), C(major), C(minor)
        and C(type) (C(c) character device, C(b) block device, C(d) directory such as C(/dev/nvidia-caps), raw style only).
      - Optional per node, for style C(dev) - C(gid), C(uid), C(mode) (octal string like C(0666)), C(deny_write).
    type: list
    elements: dict
    required: true
  style:
    description: How the nodes are passed.
    type: str
    choices: [raw, dev]
    default: raw
  backend:
    description:
      - C(file) edits C(<config_dir>/<vmid>.conf) on the Proxmox node the module runs on (as root, over SSH).
      - C(cli) runs C(pct set <vmid> -devN ...) on the node; style C(dev) only.
      - C(api) sets C(devN) through the Proxmox API with proxmoxer; style C(dev) only, and only as C(root@pam) with a
        password, because Proxmox refuses dev passthrough to API tokens and to every other user. The C(api_*) options
        (and O(node)) are used by this back end only; API tokens are accepted only to fail at once with the reason.
    type: str
    choices: [file, cli, api]
    default: file
  config_dir:
    description: Directory of the container configs on the node (backend C(file)).
    type: path
    default: /etc/pve/lxc
  lock_dir:
    description:
      - Directory of Proxmox's container config locks (C(pve-config-<vmid>.lock)); the module holds the lock while it
        reads and writes the file, as C(pct) does. Skipped when the directory does not exist.
    type: path
    default: /run/lock/lxc
  backup:
    description: Keep a copy of the previous config as C(<vmid>.conf.<timestamp>.bak) beside it before writing (backend C(file)).
    type: bool
    default: true
  cgroup_version:
    description:
      - Cgroup version of the host, which selects C(lxc.cgroup2.devices.allow) (v2) or C(lxc.cgroup.devices.allow) (v1).
      - C(auto) detects it on the node the module runs on (v2 when C(/sys/fs/cgroup/cgroup.controllers) exists).
    type: str
    choices: [auto, v1, v2]
    default: auto
  dev_gid:
    description: Group ID of the nodes inside the container (style C(dev)), unless a device sets its own C(gid).
    type: int
  dev_uid:
    description: User ID of the nodes inside the container (style C(dev)), unless a device sets its own C(uid).
    type: int
  dev_mode:
    description: Octal access mode of the nodes inside the container (style C(dev)), for example C(0666).
    type: str
  restart:
    description:
      - Reboot the container (C(pct reboot), or the API's C(status/reboot)) when the passthrough really changed and the
        container is running. Otherwise the result says whether a restart is needed.
    type: bool
    default: false
  restart_timeout:
    description: Seconds to wait for the reboot (shutdown timeout and task wait).
    type: int
    default: 120
  node:
    description: Proxmox node name that hosts the container (backend C(api)).
    type: str
  api_host:
    required: false
  api_user:
    required: false
  api_timeout:
    aliases: [timeout]
extends_documentation_fragment:
  - llmops.serving.pve_api
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Computes the changes and the diff without writing, setting or restarting anything.
  diff_mode:
    support: full
    details: Backend C(file) shows the config text before and after; C(api) and C(cli) show the dev entries before and after.
requirements:
  - proxmoxer (backend C(api) only)
notes:
  - Run backends C(file) and C(cli) on the Proxmox node as root. The host device nodes must exist (nvidia-uvm is created
    on demand; the C(llmops.serving.pve_gpu_host) role makes it exist at boot).
  - Changes apply at the next start of the container; O(restart) reboots it when needed.
  - With backend C(api), a reboot task still running after O(restart_timeout) (plus 30 s for the start), or one whose
    status cannot be read, fails the module and is never reported as done; the message names the task's type, node
    and UPID, its last log lines and the C(pvenode task status) command that says how it ended.
seealso:
  - name: pct.conf(5)
    description: The container configuration file format.
    link: https://pve.proxmox.com/pve-docs/pct.conf.5.html
"""

EXAMPLES = r"""
- name: Pass the discovered GPU nodes with raw lxc lines
  llmops.serving.lxc_gpu_passthrough:
    vmid: 120
    devices: "{{ pve_gpu_host_devices }}"
    style: raw
    restart: true

- name: Pass them as dev[n] entries with pct on the node
  llmops.serving.lxc_gpu_passthrough:
    vmid: 120
    devices: "{{ pve_gpu_host_devices }}"
    style: dev
    backend: cli
    dev_gid: 44

- name: Pass them as dev[n] entries through the API (root@pam with a password only)
  llmops.serving.lxc_gpu_passthrough:
    vmid: 120
    devices: "{{ pve_gpu_host_devices }}"
    style: dev
    backend: api
    node: pve1
    api_host: pve1.example.org
    api_user: root@pam
    api_password: "{{ vault_pve_root_password }}"
  delegate_to: localhost
"""

RETURN = r"""
changes:
  description: The changes made (or, in check mode, to be made), in order.
  returned: always
  type: list
  elements: dict
  sample:
    - action: update
      key: lxc.cgroup2.devices.allow
      value: "c 508:* rwm"
      old_value: "c 510:* rwm"
      reason: "stale dynamic major 510 was nvidia-uvm's (its comment names nvidia-uvm); nvidia-uvm is on 508 now"
config_path:
  description: The config file edited (backend C(file)).
  returned: always
  type: str
  sample: /etc/pve/lxc/120.conf
backup_file:
  description: Copy of the previous config (backend C(file), when it changed and O(backup) is true).
  returned: always
  type: str
  sample: /etc/pve/lxc/120.conf.20261129T193000.bak
cgroup_version:
  description: The cgroup version used for the allow keys; null with backend C(api), which does not need it.
  returned: always
  type: str
  sample: v2
restart_needed:
  description: The passthrough changed and the container is running (or its state is unknown), so it needs a restart.
  returned: always
  type: bool
restarted:
  description: The module rebooted the container.
  returned: always
  type: bool
devices:
  description: The dev entries after the change (styles and backends that use them).
  returned: always
  type: dict
  sample: {"dev0": "/dev/nvidia0,gid=44"}
task_exitstatus:
  description: Exit status of the reboot task that failed (backend C(api), only when it failed).
  returned: failure
  type: str
  sample: "command 'lxc-start -n 120 -F' failed: exit code 1"
task_log_tail:
  description: Last log lines of the reboot task that failed (backend C(api), only when it failed).
  returned: failure
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import (
    lxc_passthrough_api,
    lxc_passthrough_cli,
    lxc_passthrough_file,
)
from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import PassthroughConflict, normalize_devices
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough import (
    RAW_API_MSG,
    RAW_CLI_MSG,
    PassthroughError,
    resolve_cgroup_version,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_api import (
    PVE_API_MUTUALLY_EXCLUSIVE,
    PVE_API_REQUIRED_TOGETHER,
    PveFailure,
    pve_api_argument_spec,
)

BACKENDS = {"file": lxc_passthrough_file, "cli": lxc_passthrough_cli, "api": lxc_passthrough_api}


def main():
    argument_spec = pve_api_argument_spec(required=False)
    # The option's name before the connection options were shared.
    argument_spec["api_timeout"]["aliases"] = ["timeout"]
    argument_spec.update(
        vmid=dict(type="int", required=True),
        devices=dict(type="list", elements="dict", required=True),
        style=dict(type="str", choices=["raw", "dev"], default="raw"),
        backend=dict(type="str", choices=["file", "cli", "api"], default="file"),
        config_dir=dict(type="path", default="/etc/pve/lxc"),
        lock_dir=dict(type="path", default="/run/lock/lxc"),
        backup=dict(type="bool", default=True),
        cgroup_version=dict(type="str", choices=["auto", "v1", "v2"], default="auto"),
        dev_gid=dict(type="int"),
        dev_uid=dict(type="int"),
        dev_mode=dict(type="str"),
        restart=dict(type="bool", default=False),
        restart_timeout=dict(type="int", default=120),
        node=dict(type="str"),
    )
    module = AnsibleModule(
        argument_spec=argument_spec,
        mutually_exclusive=PVE_API_MUTUALLY_EXCLUSIVE,
        required_together=PVE_API_REQUIRED_TOGETHER,
        supports_check_mode=True,
    )
    params = module.params
    backend = params["backend"]
    warnings = []
    result = {"changed": False, "changes": [], "config_path": None, "backup_file": None, "cgroup_version": None,
              "restart_needed": False, "restarted": False, "devices": {}}
    try:
        if params["style"] == "raw" and backend != "file":
            raise PassthroughError(RAW_API_MSG if backend == "api" else RAW_CLI_MSG)
        nodes = normalize_devices(params["devices"])
        dev_defaults = {"gid": params["dev_gid"], "uid": params["dev_uid"], "mode": params["dev_mode"]}
        if params["dev_mode"] is not None and not re.match(r"^0[0-7]{3}\Z", params["dev_mode"]):
            raise PassthroughError("dev_mode must be an octal mode like 0666, got %r" % params["dev_mode"])
        # The API back end needs no cgroup version: Proxmox allows each dev[n] node's major itself.
        cgroup_version = resolve_cgroup_version(params["cgroup_version"]) if backend != "api" else None
        result.update(BACKENDS[backend].run(module, nodes, cgroup_version or "v2", dev_defaults, warnings))
        result["cgroup_version"] = cgroup_version
    except (PassthroughError, PveFailure, PassthroughConflict) as exc:
        result.update(getattr(exc, "extra", {}))
        module.fail_json(msg=str(exc), **result)
    except ValueError as exc:
        module.fail_json(msg="invalid passthrough input: %s" % exc, **result)
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (type(exc).__name__, exc), **result)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
