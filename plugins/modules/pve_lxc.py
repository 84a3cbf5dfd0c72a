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
    An existing one is updated with C(PUT /nodes/{node}/lxc/{vmid}/config), sending only the options that differ and
    C(delete) for options set to null, with the C(digest) of the config that was read, so that a concurrent change
    is refused by Proxmox instead of overwritten (the module rereads and retries once).
  - Every Proxmox task (create, start, stop, shutdown, reboot, destroy) is waited on by its UPID. A task that stops
    with an error fails the module AT ONCE with the task's exit status and its last log lines; O(task_timeout) only
    bounds a task that is still running.
  - Each HTTP request has its own timeout (O(api_timeout), 30 s; proxmoxer's default of 5 s is too short for a busy node).
options:
  api_host:
    description: Host name or address of the Proxmox VE API.
    type: str
    required: true
  api_port:
    description: Port of the API.
    type: int
    default: 8006
  api_user:
    description:
      - User to authenticate as, with realm (C(root@pam)). With O(api_token_id), the user that owns the token.
    type: str
    required: true
  api_password:
    description: Password of O(api_user); a ticket is requested with it.
    type: str
  api_token_id:
    description: Name of an API token of O(api_user) (the part after C(!)); used with O(api_token_secret) instead of a password.
    type: str
  api_token_secret:
    description: Secret of the API token O(api_token_id).
    type: str
  validate_certs:
    description: Verify the TLS certificate of the API.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA (or the self-signed certificate, C(/etc/pve/local/pve-ssl.pem) of the node) to verify the
        API's certificate with, instead of the system's CAs. Ignored when O(validate_certs=false).
    type: path
  api_timeout:
    description: Timeout of each HTTP request in seconds.
    type: int
    default: 30
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

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_update import (
    PlanError,
    apply_changes,
    create_params,
    device_keys,
    options_of,
    plan_update,
    render_options,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_task import TaskError, wait_for_task

PROXMOXER_IMPORT_ERROR = None
try:
    import requests
    from proxmoxer import ProxmoxAPI
    from proxmoxer.core import AuthenticationError, ResourceException
except ImportError:
    PROXMOXER_IMPORT_ERROR = traceback.format_exc()
    ProxmoxAPI = None
    requests = None

    class ResourceException(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""

    class AuthenticationError(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""


DIGEST_CONFLICT = "detected modified configuration"
ROOT_ONLY_MSG = (
    "dev[n] options (%s) can only be set by root@pam: %s, and Proxmox answers 'configuring device passthrough is only allowed "
    "for root@pam'. Use api_user=root@pam with api_password (a ticket), or pass the GPU nodes with "
    "llmops.serving.lxc_gpu_passthrough (backend cli or file on the node)."
)


class ModuleFailure(Exception):
    """A failure to report with fail_json, with extra result keys."""

    def __init__(self, message, **extra):
        super().__init__(message)
        self.extra = extra


def is_missing(exc):
    """PVE's answer for a container that does not exist on the node."""
    text = "%s %s" % (getattr(exc, "status_message", ""), getattr(exc, "content", ""))
    return "does not exist" in text and "Configuration file" in text


def connect(params):
    verify = params["validate_certs"]
    if verify and params["ca_path"]:
        verify = params["ca_path"]
    auth = {"user": params["api_user"]}
    if params["api_token_id"]:
        auth.update(token_name=params["api_token_id"], token_value=params["api_token_secret"])
    else:
        auth["password"] = params["api_password"]
    return ProxmoxAPI(params["api_host"], port=params["api_port"], verify_ssl=verify, timeout=params["api_timeout"], **auth)


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
        task = self.node.tasks(upid)

        def get_log(start, limit):
            return task.log.get(start=start, limit=limit)

        try:
            wait_for_task(task.status.get, get_log, upid, timeout or self.params["task_timeout"], description)
        except TaskError as exc:
            self.tasks.append({"upid": upid, "exitstatus": exc.exitstatus})
            raise ModuleFailure(str(exc), task_exitstatus=exc.exitstatus, task_log_tail=exc.log_tail) from None
        self.tasks.append({"upid": upid, "exitstatus": "OK"})

    def create(self, wanted):
        params = self.params
        if not params["ostemplate"]:
            raise ModuleFailure("CT %d does not exist on node %s and ostemplate is not set: give the template to create it from"
                                % (params["vmid"], params["node"]))
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


def check_identity(params, wanted):
    """Fail before any request when Proxmox would refuse the dev[n] options to these credentials."""
    devices = device_keys(dict((key, value) for key, value in wanted.items() if value is not None))
    if not devices:
        return
    if params["api_token_id"]:
        reason = "an API token is never root@pam, even one owned by root@pam (it authenticates as %s!%s)" % (
            params["api_user"], params["api_token_id"])
    elif params["api_user"] != "root@pam":
        reason = "api_user is %s" % params["api_user"]
    else:
        return
    raise ModuleFailure(ROOT_ONLY_MSG % (", ".join(devices), reason))


def run(module, api):
    params = module.params
    wanted = dict((str(key), value) for key, value in (params["config"] or {}).items())
    check_identity(params, wanted)
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
            raise ModuleFailure("CT %d: %s" % (params["vmid"], exc)) from None
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
    module = AnsibleModule(
        argument_spec=dict(
            api_host=dict(type="str", required=True),
            api_port=dict(type="int", default=8006),
            api_user=dict(type="str", required=True),
            api_password=dict(type="str", no_log=True),
            api_token_id=dict(type="str", no_log=False),
            api_token_secret=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            api_timeout=dict(type="int", default=30),
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
        ),
        required_one_of=[("api_password", "api_token_id")],
        mutually_exclusive=[("api_password", "api_token_id")],
        required_together=[("api_token_id", "api_token_secret")],
        supports_check_mode=True,
    )
    params = module.params
    base = {"changed": False, "vmid": params["vmid"], "status": None, "created": False, "changes": [], "power": None, "tasks": [],
            "config": {}}
    if ProxmoxAPI is None:
        module.fail_json(msg=missing_required_lib("proxmoxer"), exception=PROXMOXER_IMPORT_ERROR, **base)
    for name in ("api_timeout", "task_timeout", "shutdown_timeout"):
        if params[name] < 1:
            module.fail_json(msg="%s must be at least 1 second, got %d" % (name, params[name]), **base)
    where = "https://%s:%d" % (params["api_host"], params["api_port"])
    try:
        api = connect(params)
        result = run(module, api)
    except ModuleFailure as exc:
        base.update(exc.extra)
        module.fail_json(msg=str(exc), **base)
    except AuthenticationError as exc:
        module.fail_json(msg="authentication to the Proxmox API at %s as %s failed: %s" % (where, params["api_user"], exc), **base)
    except ResourceException as exc:
        module.fail_json(msg="Proxmox API error for CT %d on node %s: %s" % (params["vmid"], params["node"], exc), **base)
    except requests.exceptions.Timeout as exc:
        module.fail_json(msg="the Proxmox API at %s did not answer within api_timeout=%d s: %s" % (where, params["api_timeout"], exc), **base)
    except requests.exceptions.RequestException as exc:
        module.fail_json(msg="cannot reach the Proxmox API at %s: %s" % (where, exc), **base)
    final = dict(base)
    final.update(result)
    module.exit_json(**final)


if __name__ == "__main__":
    main()
