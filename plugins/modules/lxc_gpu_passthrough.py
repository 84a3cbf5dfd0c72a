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
  - A stale allow line (the nvidia-uvm major is dynamic and changes with kernel or driver updates) is corrected in
    place. A line counts as a stale NVIDIA line only when it has the exact shape C(c <major>:* rwm), its major is in
    the kernel's dynamic range (234-254, 384-511), belongs to no discovered node and to no other device the container
    still passes (the module stats the sources of the container's other mount entries and dev entries), and the
    container mounts an NVIDIA node with a dynamic major (nvidia-uvm, nvidia-uvm-tools, nvidia-caps). Every other line
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
        password, because Proxmox refuses dev passthrough to API tokens and to every other user.
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
    description: Proxmox API host (backend C(api)).
    type: str
  api_port:
    description: Proxmox API port.
    type: int
    default: 8006
  api_user:
    description: API user; dev passthrough requires C(root@pam).
    type: str
  api_password:
    description: Password of O(api_user) (a ticket is requested with it).
    type: str
  api_token_id:
    description:
      - API token ID. Given only to fail early with an explanation - Proxmox never lets a token set dev passthrough.
    type: str
  api_token_secret:
    description: API token secret; see O(api_token_id).
    type: str
  validate_certs:
    description: Verify the API's TLS certificate.
    type: bool
    default: true
  timeout:
    description: HTTP timeout of each API call in seconds (proxmoxer's own default of 5 s is too short for Proxmox).
    type: int
    default: 30
extends_documentation_fragment:
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
      reason: "stale dynamic major c 510:* rwm replaced by the discovered major 508"
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
"""

import fcntl
import os
import re
import stat
import tempfile
import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import (
    normalize_devices,
    plan_passthrough,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

PROXMOXER_IMPORT_ERROR = None
try:
    from proxmoxer import ProxmoxAPI
    from proxmoxer.core import AuthenticationError, ResourceException
except ImportError:
    PROXMOXER_IMPORT_ERROR = traceback.format_exc()
    ProxmoxAPI = None

    class ResourceException(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""

    class AuthenticationError(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""


CGROUP2_PROBE = "/sys/fs/cgroup/cgroup.controllers"
LOCK_WAIT_SECONDS = 10
MAX_DIRECTORY_ENTRIES = 1024

ROOT_ONLY_MSG = (
    "dev[n] passthrough can only be set by root@pam: Proxmox refuses it for API tokens and other users ({reason}). "
    "Use api_user=root@pam with api_password (a ticket), or backend=cli/file over SSH on the node."
)
RAW_API_MSG = (
    "style=raw writes lxc.cgroup2.devices.allow and lxc.mount.entry lines, and raw lxc.* keys cannot be set through the "
    "Proxmox API (nor with pct set): they exist only in /etc/pve/lxc/<vmid>.conf. Use backend=file on the node, "
    "or style=dev."
)
RAW_CLI_MSG = (
    "style=raw writes raw lxc.* lines, which pct set cannot set: use backend=file on the node, or style=dev."
)


class PassthroughError(Exception):
    """A failure to report with fail_json."""


# -- host facts -----------------------------------------------------------------------------------


def resolve_cgroup_version(requested):
    if requested != "auto":
        return requested
    return "v2" if os.path.exists(CGROUP2_PROBE) else "v1"


def _device_major(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return os.major(info.st_rdev)
    return None


def host_protected_majors(document, nodes):
    """Majors of the devices the container passes besides the discovered ones (stat on the host).

    An allow line for one of them is never treated as a stale NVIDIA line, nor removed by style dev.
    """
    discovered = set(node.path for node in nodes)
    sources = []
    for entry in document.lxc_entries("lxc.mount.entry"):
        fields = entry.value.split()
        if fields and fields[0] not in discovered:
            sources.append(fields[0])
    for device in _devices_or_empty(document):
        if device.path not in discovered:
            sources.append(device.path)
    majors = set()
    for source in sources:
        if os.path.isdir(source):
            try:
                names = sorted(os.listdir(source))[:MAX_DIRECTORY_ENTRIES]
            except OSError:
                continue
            candidates = [os.path.join(source, name) for name in names]
        else:
            candidates = [source]
        for candidate in candidates:
            major = _device_major(candidate)
            if major is not None:
                majors.add(major)
    return majors


def _devices_or_empty(document):
    try:
        return document.devices()
    except ValueError:
        return []


def _dev_entries(document):
    return dict((device.key, device.value) for device in _devices_or_empty(document))


# -- file backend ---------------------------------------------------------------------------------


class ConfigLock:
    """Proxmox's per-container config lock (flock on /run/lock/lxc/pve-config-<vmid>.lock)."""

    def __init__(self, lock_dir, vmid):
        self.path = os.path.join(lock_dir, "pve-config-%d.lock" % vmid) if lock_dir and os.path.isdir(lock_dir) else None
        self.handle = None

    def __enter__(self):
        if self.path is None:
            return self
        self.handle = open(self.path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self.handle.close()
                    raise PassthroughError("the container config is locked (%s) by another Proxmox task; try again later" % self.path)
                time.sleep(0.2)

    def __exit__(self, *exc_info):
        if self.handle is not None:
            self.handle.close()  # closing releases the flock
        return False


def write_backup(path, data, original):
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for attempt in range(100):
        candidate = "%s.%s%s.bak" % (path, stamp, "" if attempt == 0 else ".%d" % attempt)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(original.st_mode))
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return candidate
    raise PassthroughError("could not find a free backup name for %s" % path)


def atomic_write(path, data, original, warnings):
    """Write ``data`` to a temporary file beside ``path``, give it the old mode and owner, then rename it over."""
    directory = os.path.dirname(path) or "."
    fd, temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        written = os.stat(temp_path)
        # /etc/pve (pmxcfs) fixes mode and owner itself and refuses chmod/chown: only try when they differ.
        if stat.S_IMODE(written.st_mode) != stat.S_IMODE(original.st_mode):
            try:
                os.chmod(temp_path, stat.S_IMODE(original.st_mode))
            except OSError as exc:
                warnings.append("could not keep the mode of %s: %s" % (path, exc))
        if (written.st_uid, written.st_gid) != (original.st_uid, original.st_gid):
            try:
                os.chown(temp_path, original.st_uid, original.st_gid)
            except OSError as exc:
                warnings.append("could not keep the owner of %s: %s" % (path, exc))
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise


def run_file_backend(module, nodes, cgroup_version, dev_defaults, warnings):
    params = module.params
    path = os.path.join(params["config_dir"], "%d.conf" % params["vmid"])
    result = {"config_path": path, "backup_file": None}
    if not os.path.isfile(path):
        raise PassthroughError("CT %d has no config at %s: does the container exist on this node?" % (params["vmid"], path))
    with ConfigLock(params["lock_dir"], params["vmid"]):
        original = os.stat(path)
        with open(path, "rb") as handle:
            before_bytes = handle.read()
        before = before_bytes.decode("utf-8", "surrogateescape")
        document = parse(before)
        protected = host_protected_majors(document, nodes)
        plan = plan_passthrough(document, nodes, params["style"], cgroup_version, dev_defaults, protected)
        after = plan.document.render()
        changed = after != before
        if changed and not module.check_mode:
            data = after.encode("utf-8", "surrogateescape")
            if params["backup"]:
                result["backup_file"] = write_backup(path, before_bytes, original)
            atomic_write(path, data, original, warnings)
    result.update(changed=changed, changes=plan.changes, devices=_dev_entries(plan.document))
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    return result


# -- pct (file and cli backends) ------------------------------------------------------------------


def pct_running(module, pct, vmid):
    rc, out, err = module.run_command([pct, "status", str(vmid)])
    if rc != 0:
        raise PassthroughError("pct status %d failed (rc=%d): %s" % (vmid, rc, (err or out).strip()))
    return bool(re.search(r"^status:\s*running\s*$", out, re.MULTILINE))


def pct_restart(module, pct, vmid, changed):
    """Returns (restart_needed, restarted)."""
    if not changed:
        return False, False
    running = pct_running(module, pct, vmid) if pct else None
    if running is False:
        return False, False
    if not module.params["restart"] or module.check_mode:
        return True, False
    if running is None:
        raise PassthroughError("restart=true needs pct on the node to reboot CT %d, and pct was not found" % vmid)
    rc, out, err = module.run_command([pct, "reboot", str(vmid), "--timeout", str(module.params["restart_timeout"])])
    if rc != 0:
        raise PassthroughError("pct reboot %d failed (rc=%d): %s" % (vmid, rc, (err or out).strip()))
    return False, True


def _warn_raw_leftovers(lxc_pairs, nodes, warnings, how):
    paths = set(node.path for node in nodes)
    for key, value in lxc_pairs:
        fields = value.split()
        if key == "lxc.mount.entry" and fields and fields[0] in paths:
            warnings.append("the config also passes %s with a raw line (%s: %s) that %s cannot remove; "
                            "use backend=file to clean it up" % (fields[0], key, value, how))


def _apply_plan_to_pct_args(changes):
    args = []
    deletes = []
    for change in changes:
        if change["action"] == "remove":
            deletes.append(change["key"])
        else:
            args.extend(["-%s" % change["key"], change["value"]])
    if deletes:
        args.extend(["-delete", ",".join(deletes)])
    return args


def run_cli_backend(module, nodes, cgroup_version, dev_defaults, warnings):
    vmid = module.params["vmid"]
    pct = module.get_bin_path("pct", required=True)
    rc, out, err = module.run_command([pct, "config", str(vmid)])
    if rc != 0:
        raise PassthroughError("pct config %d failed (rc=%d): %s" % (vmid, rc, (err or out).strip()))
    document = parse(out)
    plan = plan_passthrough(document, nodes, "dev", cgroup_version, dev_defaults, remove_other_style=False)
    _warn_raw_leftovers([(entry.key, entry.value) for entry in document.lxc_entries()], nodes, warnings, "pct")
    changed = plan.changed
    if changed and not module.check_mode:
        command = [pct, "set", str(vmid)] + _apply_plan_to_pct_args(plan.changes)
        rc, out, err = module.run_command(command)
        if rc != 0:
            raise PassthroughError("pct set %d failed (rc=%d): %s" % (vmid, rc, (err or out).strip()))
    result = {"changed": changed, "changes": plan.changes, "config_path": None, "backup_file": None,
              "devices": _dev_entries(plan.document)}
    if module._diff:
        result["diff"] = {"before": _dev_entries(document), "after": result["devices"]}
    restart_needed, restarted = pct_restart(module, pct, vmid, changed)
    result.update(restart_needed=restart_needed, restarted=restarted)
    return result


# -- api backend ----------------------------------------------------------------------------------


def check_api_identity(params):
    """Fail before any request when Proxmox would refuse dev passthrough to these credentials."""
    if params["api_token_id"] or params["api_token_secret"]:
        user = params["api_user"] or "root@pam"
        reason = ("an API token is never root@pam, even one owned by root@pam: it authenticates as %s!%s, and Proxmox "
                  "answers 'configuring device passthrough is only allowed for root@pam'" % (user, params["api_token_id"] or "<tokenid>"))
        raise PassthroughError(ROOT_ONLY_MSG.format(reason=reason))
    if params["api_user"] != "root@pam":
        reason = "api_user is %s" % (params["api_user"] or "not set")
        raise PassthroughError(ROOT_ONLY_MSG.format(reason=reason))
    if not params["api_password"]:
        raise PassthroughError(ROOT_ONLY_MSG.format(reason="api_user=root@pam was given without api_password"))


def wait_for_task(api, node, upid, timeout):
    """Poll a task by UPID until it stops; raise with its exit status and last log lines if it failed."""
    task = api.nodes(node).tasks(upid)
    deadline = time.monotonic() + timeout
    while True:
        status = task.status.get()
        if status.get("status") == "stopped":
            exit_status = str(status.get("exitstatus", ""))
            if exit_status == "OK" or exit_status.startswith("WARNINGS"):
                return status
            log = task.log.get(start=0, limit=500) or []
            tail = [str(entry.get("t", "")) for entry in log][-10:]
            raise PassthroughError("task %s failed: %s; last log lines: %s" % (upid, exit_status, " | ".join(tail)))
        if time.monotonic() >= deadline:
            raise PassthroughError("task %s did not finish within %d s" % (upid, timeout))
        time.sleep(1)


def run_api_backend(module, nodes, cgroup_version, dev_defaults, warnings):
    params = module.params
    vmid = params["vmid"]
    api = ProxmoxAPI(params["api_host"], port=params["api_port"], user=params["api_user"], password=params["api_password"],
                     verify_ssl=params["validate_certs"], timeout=params["timeout"])
    container = api.nodes(params["node"]).lxc(vmid)
    config = container.config.get() or {}
    text = "".join("%s: %s\n" % (key, config[key]) for key in sorted(config) if re.match(r"^dev\d+$", key))
    document = parse(text)
    plan = plan_passthrough(document, nodes, "dev", cgroup_version, dev_defaults, remove_other_style=False)
    _warn_raw_leftovers([tuple(pair) for pair in config.get("lxc") or [] if len(pair) == 2], nodes, warnings, "the API")
    changed = plan.changed
    if changed and not module.check_mode:
        update = {}
        deletes = []
        for change in plan.changes:
            if change["action"] == "remove":
                deletes.append(change["key"])
            else:
                update[change["key"]] = change["value"]
        if deletes:
            update["delete"] = ",".join(deletes)
        if config.get("digest"):
            update["digest"] = config["digest"]
        container.config.put(**update)
    result = {"changed": changed, "changes": plan.changes, "config_path": None, "backup_file": None,
              "devices": _dev_entries(plan.document), "restart_needed": False, "restarted": False}
    if module._diff:
        result["diff"] = {"before": _dev_entries(document), "after": result["devices"]}
    if changed:
        running = (container.status.current.get() or {}).get("status") == "running"
        if running and params["restart"] and not module.check_mode:
            upid = container.status.reboot.post(timeout=params["restart_timeout"])
            wait_for_task(api, params["node"], upid, params["restart_timeout"] + 30)
            result["restarted"] = True
        else:
            result["restart_needed"] = running
    return result


# -- main -----------------------------------------------------------------------------------------


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
            api_host=dict(type="str"),
            api_port=dict(type="int", default=8006),
            api_user=dict(type="str"),
            api_password=dict(type="str", no_log=True),
            api_token_id=dict(type="str", no_log=False),
            api_token_secret=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    backend = params["backend"]
    warnings = []
    base = {"changed": False, "changes": [], "config_path": None, "backup_file": None, "cgroup_version": None,
            "restart_needed": False, "restarted": False, "devices": {}}
    try:
        if params["style"] == "raw" and backend == "api":
            raise PassthroughError(RAW_API_MSG)
        if params["style"] == "raw" and backend == "cli":
            raise PassthroughError(RAW_CLI_MSG)
        if backend == "api":
            check_api_identity(params)
            missing = [name for name in ("api_host", "node") if not params[name]]
            if missing:
                raise PassthroughError("backend=api needs %s" % " and ".join(missing))
            if ProxmoxAPI is None:
                module.fail_json(msg=missing_required_lib("proxmoxer"), exception=PROXMOXER_IMPORT_ERROR, **base)
        nodes = normalize_devices(params["devices"])
        dev_defaults = {"gid": params["dev_gid"], "uid": params["dev_uid"], "mode": params["dev_mode"]}
        if params["dev_mode"] is not None and not re.match(r"^0[0-7]{3}$", params["dev_mode"]):
            raise PassthroughError("dev_mode must be an octal mode like 0666, got %r" % params["dev_mode"])
        cgroup_version = resolve_cgroup_version(params["cgroup_version"]) if backend != "api" else None
        if backend == "file":
            result = run_file_backend(module, nodes, cgroup_version or "v2", dev_defaults, warnings)
            restart_needed, restarted = pct_restart(module, module.get_bin_path("pct"), params["vmid"], result["changed"])
            result.update(restart_needed=restart_needed, restarted=restarted)
        elif backend == "cli":
            result = run_cli_backend(module, nodes, cgroup_version or "v2", dev_defaults, warnings)
        else:
            result = run_api_backend(module, nodes, "v2", dev_defaults, warnings)
        result["cgroup_version"] = cgroup_version
    except PassthroughError as exc:
        module.fail_json(msg=str(exc), **base)
    except ValueError as exc:
        module.fail_json(msg="invalid passthrough input: %s" % exc, **base)
    except (ResourceException, AuthenticationError) as exc:
        module.fail_json(msg="Proxmox API error: %s" % exc, **base)
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (type(exc).__name__, exc), **base)
    for warning in warnings:
        module.warn(warning)
    final = dict(base)
    final.update(result)
    module.exit_json(**final)


if __name__ == "__main__":
    main()
