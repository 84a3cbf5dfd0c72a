#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: pve_lxc
short_description: Create, update, start, stop or remove a Proxmox VE container through the API
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
description:
  - Manages one LXC container of a Proxmox VE node through the API with proxmoxer.
  - A missing container is created (C(POST /nodes/{node}/lxc)) from O(ostemplate) with the options of O(config).
    Before that (in check mode too) the template's storage is asked for its templates
    (C(GET /nodes/{node}/storage/{storage}/content?content=vztmpl)); a template it does not hold fails the module before
    anything is sent, naming the storage and the C(pveam) commands that download it (Proxmox itself would accept the
    create and fail its task after allocating the root filesystem).
    An existing one is updated with C(PUT /nodes/{node}/lxc/{vmid}/config), sending only the options that differ and
    C(delete) for options set to null, with the C(digest) of the config that was read, so that a concurrent change
    is refused by Proxmox instead of overwritten (the module rereads and retries once).
  - Every Proxmox task (create, start, stop, shutdown, reboot, destroy) is waited on by its UPID. A task that stops
    with an error fails the module AT ONCE with the task's exit status and its last log lines; O(task_timeout) only
    bounds a task that is still running (a task that never finishes fails the module at that deadline, not done).
  - Each HTTP request has its own timeout (O(api_timeout), 30 s; proxmoxer's default of 5 s is too short for a busy node).
options:
  node:
    description: Name of the Proxmox VE node that hosts the container.
    type: str
    required: true
  vmid:
    description: ID of the container.
    type: int
    required: true
  state:
    description:
      - C(present) creates or updates the container and leaves it running or stopped as it is (a new one stays stopped).
      - C(started) and C(stopped) also start it or shut it down.
      - C(restarted) reboots a running container (starts a stopped one); it always reports a change.
      - C(absent) stops and destroys it, with its volumes (O(purge)).
    type: str
    choices: [present, started, stopped, restarted, absent]
    default: present
  ostemplate:
    description: Template volume to create the container from, for example C(local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst).
    type: str
  storage:
    description: Storage of the root filesystem when O(config) has no C(rootfs) (creation only; Proxmox's default is C(local)).
    type: str
  password:
    description: Root password inside a new container (creation only).
    type: str
  ssh_public_keys:
    description: Public SSH keys for root inside a new container, one per line (creation only).
    type: str
  unprivileged:
    description:
      - Create an unprivileged container. Cannot change later; a different value on an existing container is an error.
    type: bool
    default: true
  config:
    description:
      - The container's options as in the API and C(pct.conf), for example C(hostname), C(cores), C(memory), C(swap),
        C(rootfs), C(net0), C(features), C(onboot), C(tags), C(description).
      - Only the options given are managed; a null value removes the option. Items of a property string that Proxmox
        fills in itself (C(hwaddr) of C(net0)) are not compared.
      - C(rootfs) is used at creation only (a resize is not done). C(devN) entries need root@pam with a password; for
        GPU nodes use M(llmops.serving.lxc_gpu_passthrough).
    type: dict
    default: {}
  task_timeout:
    description: Seconds to wait for a Proxmox task that is still running; a failed task fails at once regardless.
    type: int
    default: 300
  shutdown_timeout:
    description: Seconds a clean shutdown (and the shutdown part of a reboot) may take.
    type: int
    default: 60
  force_stop:
    description: Stop the container hard when a clean shutdown did not finish in O(shutdown_timeout).
    type: bool
    default: true
  purge:
    description: With O(state=absent), also remove the container from backup jobs, replication and HA.
    type: bool
    default: true
extends_documentation_fragment:
  - llmops.serving.pve_api
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reads the container and reports what would change; creates, updates, starts and stops nothing.
  diff_mode:
    support: full
    details: The container's options before and after, as config lines.
requirements:
  - proxmoxer >= 2.0
  - requests
notes:
  - Why not C(community.proxmox.proxmox) - its wait only asks whether the task is OK yet, so a failed task is noticed
    only when its timeout (30 s by default) runs out, reported as a timeout with the FIRST log line; and version 1.4.0
    builds proxmoxer's client without a timeout, so a busy node fails with C(Read timed out. (read timeout=5)).
  - Options Proxmox changes on a running container at once (memory, cores, ...) are applied at once; others become
    pending until the next start, as with C(pct set).
  - A task still running after O(task_timeout), or one whose status cannot be read (after the attempts described
    below), fails the module and is never reported as done; the message names the task's type, node and UPID, its
    last log lines and the C(pvenode task status) command that says how it ended.
seealso:
  - module: llmops.serving.lxc_gpu_passthrough
  - name: Proxmox VE API viewer
    description: The parameters of C(/nodes/{node}/lxc) and its sub-paths.
    link: https://pve.proxmox.com/pve-docs/api-viewer/
"""

EXAMPLES = r"""
- name: Create or update the GPU container and start it
  llmops.serving.pve_lxc:
    api_host: pve1.example.org
    api_user: root@pam
    api_token_id: ansible
    api_token_secret: "{{ vault_pve_token_secret }}"
    node: pve1
    vmid: 120
    state: started
    ostemplate: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst
    config:
      hostname: sglang
      cores: 16
      memory: 98304
      swap: 0
      rootfs: local-lvm:200
      net0: name=eth0,bridge=vmbr0,ip=dhcp
      features: nesting=1
      onboot: true
  delegate_to: localhost

- name: Remove an option
  llmops.serving.pve_lxc:
    api_host: pve1.example.org
    api_user: root@pam
    api_password: "{{ vault_pve_root_password }}"
    node: pve1
    vmid: 120
    config:
      tags: null
  delegate_to: localhost
"""

RETURN = r"""
vmid:
  description: ID of the container.
  returned: always
  type: int
  sample: 120
status:
  description: C(running), C(stopped) or C(absent) after the module ran (in check mode, as it was).
  returned: always
  type: str
  sample: running
created:
  description: The container was (or, in check mode, would be) created.
  returned: always
  type: bool
changes:
  description: Options set or deleted on the existing container.
  returned: always
  type: list
  elements: dict
  sample: [{"key": "memory", "action": "set", "old": "4096", "new": "8192"}]
power:
  description: What happened to the power state, C(started), C(stopped), C(restarted), C(destroyed) or null.
  returned: always
  type: str
  sample: started
tasks:
  description: The Proxmox tasks the module waited on.
  returned: always
  type: list
  elements: dict
  sample: [{"upid": "UPID:pve1:0001E240:0A1B2C3D:6761A5F0:vzcreate:120:root@pam!ansible:", "exitstatus": "OK"}]
config:
  description: The container's options after the change (without digest and raw lines); empty when absent.
  returned: always
  type: dict
  sample: {"hostname": "sglang", "cores": "16", "memory": "98304"}
task_exitstatus:
  description: Exit status of the task that failed (only when one failed).
  returned: failure
  type: str
  sample: "unable to create CT 120 - command 'tar xpf ...' failed: exit code 2"
task_log_tail:
  description: Last log lines of the task that failed (only when one failed).
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils.pve_api import (
    PVE_API_MUTUALLY_EXCLUSIVE,
    PVE_API_REQUIRED_ONE_OF,
    PVE_API_REQUIRED_TOGETHER,
    PveFailure,
    ResourceException,
    api_errors,
    connect,
    pve_api_argument_spec,
    require_positive_seconds,
    require_root_for_devices,
    wait_for_upid,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_update import (
    PlanError,
    apply_changes,
    create_params,
    device_keys,
    options_of,
    plan_update,
    render_options,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_storage import missing_template, template_volume

DIGEST_CONFLICT = "detected modified configuration"


def is_missing(exc):
    """PVE's answer for a container that does not exist on the node."""
    text = "%s %s" % (getattr(exc, "status_message", ""), getattr(exc, "content", ""))
    return "does not exist" in text and "Configuration file" in text


class Container:
    """One container on one node, with the tasks waited on."""

    def __init__(self, module, api):
        self.module = module
        self.params = module.params
        self.api = api
        self.node = api.nodes(self.params["node"])
        self.ct = self.node.lxc(self.params["vmid"])
        self.tasks = []

    def read_config(self):
        try:
            return self.ct.config.get() or {}
        except ResourceException as exc:
            if is_missing(exc):
                return None
            raise

    def status(self):
        return (self.ct.status.current.get() or {}).get("status", "unknown")

    def wait(self, upid, description, timeout=None):
        wait_for_upid(self.api, self.params["node"], upid, timeout or self.params["task_timeout"], description, self.tasks)

    def check_create(self):
        """Refuse before anything is sent a create Proxmox would fail: no template, or one its storage does not hold."""
        params = self.params
        if not params["ostemplate"]:
            raise PveFailure("CT %d does not exist on node %s and ostemplate is not set: give the template to create it from"
                             % (params["vmid"], params["node"]))
        volume = template_volume(params["ostemplate"])
        if volume is None:
            return
        listing = self.node.storage(volume[0]).content.get(content="vztmpl")
        message = missing_template(params["ostemplate"], listing)
        if message:
            raise PveFailure("CT %d on node %s: %s" % (params["vmid"], params["node"], message))

    def create(self, wanted):
        params = self.params
        extra = {"ostemplate": params["ostemplate"], "storage": params["storage"], "password": params["password"],
                 "ssh-public-keys": params["ssh_public_keys"], "unprivileged": params["unprivileged"]}
        upid = self.node.lxc.post(**create_params(params["vmid"], wanted, extra))
        self.wait(upid, "creating CT %d" % params["vmid"])

    def update(self, current, wanted):
        """Returns (changes, config after). Retries once when the config changed between read and write."""
        for attempt in (1, 2):
            put, changes = plan_update(current, wanted)
            if not put or self.module.check_mode:
                return changes, current
            put["digest"] = current.get("digest")
            try:
                self.ct.config.put(**put)
                return changes, self.read_config() or {}
            except ResourceException as exc:
                if attempt == 2 or DIGEST_CONFLICT not in str(exc):
                    raise
            current = self.read_config() or {}
        return [], current  # not reached

    def start(self):
        self.wait(self.ct.status.start.post(), "starting CT %d" % self.params["vmid"])

    def stop(self):
        params = self.params
        upid = self.ct.status.shutdown.post(timeout=params["shutdown_timeout"], forceStop=1 if params["force_stop"] else 0)
        self.wait(upid, "shutting down CT %d" % params["vmid"], params["shutdown_timeout"] + params["task_timeout"])

    def reboot(self):
        params = self.params
        upid = self.ct.status.reboot.post(timeout=params["shutdown_timeout"])
        self.wait(upid, "rebooting CT %d" % params["vmid"], params["shutdown_timeout"] + params["task_timeout"])

    def destroy(self):
        params = self.params
        if self.status() == "running":
            self.wait(self.ct.status.stop.post(), "stopping CT %d" % params["vmid"])
        upid = self.ct.delete(purge=1 if params["purge"] else 0)
        self.wait(upid, "destroying CT %d" % params["vmid"])


def run(module, api):
    params = module.params
    wanted = dict((str(key), value) for key, value in (params["config"] or {}).items())
    require_root_for_devices(params, device_keys(dict((key, value) for key, value in wanted.items() if value is not None)))
    container = Container(module, api)
    current = container.read_config()
    result = {"vmid": params["vmid"], "created": False, "changes": [], "power": None, "config": {}}
    before_text = render_options(options_of(current), (current or {}).get("lxc")) if current is not None else ""

    if params["state"] == "absent":
        if current is None:
            result.update(changed=False, status="absent")
            return result
        if not module.check_mode:
            container.destroy()
        result.update(changed=True, status="absent", power="destroyed")
        if module._diff:
            result["diff"] = {"before": before_text, "after": ""}
        return result

    if current is None:
        container.check_create()
        result["created"] = True
        if module.check_mode:
            after = dict((key, value) for key, value in options_of(wanted).items() if wanted.get(key) is not None)
            result.update(changed=True, status="absent", config=after)
            if module._diff:
                result["diff"] = {"before": "", "after": render_options(after)}
            return result
        container.create(wanted)
        current = container.read_config() or {}
        changes = []
    else:
        try:
            changes, current = container.update(current, wanted)
        except PlanError as exc:
            raise PveFailure("CT %d: %s" % (params["vmid"], exc)) from None
    after_options = apply_changes(current, changes) if module.check_mode else options_of(current)
    result.update(changes=changes, config=after_options)
    if module._diff:
        result["diff"] = {"before": before_text, "after": render_options(after_options, current.get("lxc"))}

    status = "stopped" if result["created"] and module.check_mode else container.status()
    state = params["state"]
    if state == "started" and status != "running":
        if not module.check_mode:
            container.start()
        result["power"], status = "started", "running"
    elif state == "stopped" and status == "running":
        if not module.check_mode:
            container.stop()
        result["power"], status = "stopped", "stopped"
    elif state == "restarted":
        if not module.check_mode:
            if status == "running":
                container.reboot()
            else:
                container.start()
        result["power"], status = "restarted", "running"
    result["status"] = status
    result["tasks"] = container.tasks
    result["changed"] = bool(result["created"] or changes or result["power"])
    return result


def main():
    argument_spec = pve_api_argument_spec()
    argument_spec.update(
        node=dict(type="str", required=True),
        vmid=dict(type="int", required=True),
        state=dict(type="str", choices=["present", "started", "stopped", "restarted", "absent"], default="present"),
        ostemplate=dict(type="str"),
        storage=dict(type="str"),
        password=dict(type="str", no_log=True),
        ssh_public_keys=dict(type="str"),
        unprivileged=dict(type="bool", default=True),
        config=dict(type="dict", default={}),
        task_timeout=dict(type="int", default=300),
        shutdown_timeout=dict(type="int", default=60),
        force_stop=dict(type="bool", default=True),
        purge=dict(type="bool", default=True),
    )
    module = AnsibleModule(
        argument_spec=argument_spec,
        required_one_of=PVE_API_REQUIRED_ONE_OF,
        mutually_exclusive=PVE_API_MUTUALLY_EXCLUSIVE,
        required_together=PVE_API_REQUIRED_TOGETHER,
        supports_check_mode=True,
    )
    params = module.params
    result = {"changed": False, "vmid": params["vmid"], "status": None, "created": False, "changes": [], "power": None,
              "tasks": [], "config": {}}
    try:
        require_positive_seconds(params, ("api_timeout", "task_timeout", "shutdown_timeout"))
        with api_errors(params, "CT %d on node %s" % (params["vmid"], params["node"])):
            result.update(run(module, connect(params)))
    except PveFailure as exc:
        result.update(exc.extra)
        module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
