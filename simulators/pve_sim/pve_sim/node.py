# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated node: the API methods, with PVE's permission checks, messages and task behaviour.

State dir layout (paths as on a real node, below STATE):
  etc/pve/lxc/<vmid>.conf                      container configs (PVE's format; edit them like on a node)
  var/lib/vz/template/cache/<name>.tar.zst     templates of storage 'local' (volid local:vztmpl/<name>)
  var/lib/vz/images/<vmid>/subvol-<vmid>-disk-0.subvol   root filesystems (dir storage 'local')
  var/log/pve/tasks/                           task logs
  lxc/                                         LXC containers (lxcpath) when realised
  users.json, authkey.key, root-password, token-root@pam!ansible   users, tokens, secrets
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time

from pve_sim import guest, idmap, mounts, releases, schema
from pve_sim.auth import PermissionDenied
from pve_sim.configfile import ConfigMissing, api_view, load, write_atomic
from pve_sim.pct_config import parse_device, render_new
from pve_sim.runtime import TaskFailed, device_rdev
from pve_sim.tasks import TaskManager

STORAGES = {
    # Both are directory storages here; on a real node local-lvm is LVM-thin.
    "local": {"type": "dir", "content": ["vztmpl", "iso", "backup", "rootdir"]},
    "local-lvm": {"type": "lvmthin", "content": ["rootdir", "images"]},
}
_NEW_DISK_RE = re.compile(r"^(?:([^/:\s]+):)?(\d+(?:\.\d+)?)$")
# pve-storage Plugin.pm parse_volume_id, and a template's file name (PVE::Storage $VZTMPL_EXT_RE_1).
_VOLUME_ID_RE = re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.I)
_VZTMPL_NAME_RE = re.compile(r"^[^/]+\.(?:tar(?!\.)|tar\.(gz|xz|zst|bz2))$", re.I)


class ApiError(Exception):
    """An error reply: HTTP status, the message (status line = its first line) and optional errors."""

    def __init__(self, status, message, errors=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def die(message):
    """PVE's plain ``die "...\\n"`` in an API method: 500 with the message."""
    return ApiError(500, message)


class Node:
    def __init__(self, state_dir, name, runtime, release=None):
        self.state_dir = os.path.abspath(state_dir)
        self.name = name
        self.runtime = runtime
        # The Proxmox VE release this node runs (releases.py): what it prints and the defaults it applies.
        self.release = release or releases.release(releases.DEFAULT_RELEASE)
        self.config_dir = os.path.join(self.state_dir, "etc", "pve", "lxc")
        self.template_dir = os.path.join(self.state_dir, "var", "lib", "vz", "template", "cache")
        self.images_dir = os.path.join(self.state_dir, "var", "lib", "vz", "images")
        for directory in (self.config_dir, self.template_dir, self.images_dir):
            os.makedirs(directory, exist_ok=True)
        self.tasks = TaskManager(name, os.path.join(self.state_dir, "var", "log", "pve", "tasks"), self.state_dir)
        self.started_at = time.time()
        self._locks = {}
        self._locks_guard = threading.Lock()
        self.fingerprint = None

    # -- helpers -----------------------------------------------------------------------------------

    def config_lock(self, vmid):
        with self._locks_guard:
            return self._locks.setdefault(int(vmid), threading.RLock())

    def vmids(self):
        found = []
        for entry in os.listdir(self.config_dir):
            match = re.match(r"^(\d+)\.conf$", entry)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def check_node(self, node):
        if node != self.name:
            raise die("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known" % (node, node))

    def load_config(self, vmid):
        try:
            return load(self.config_dir, vmid)
        except ConfigMissing:
            raise die("Configuration file 'nodes/%s/lxc/%d.conf' does not exist" % (self.name, int(vmid))) from None

    def rootfs_path(self, config, vmid):
        """Where the container's root filesystem lives; ``config`` is a PctConfig or a dict of options."""
        volume = (config.get("rootfs") or "").split(",")[0]
        match = re.match(r"^([^:]+):(.+)$", volume)
        if not match:
            return os.path.join(self.images_dir, str(vmid), "subvol-%d-disk-0.subvol" % int(vmid))
        name = match.group(2)
        if "/" in name:
            return os.path.join(self.images_dir, name)
        return os.path.join(self.images_dir, str(vmid), name)

    def status_of(self, vmid):
        return "running" if self.runtime.is_running(vmid) else "stopped"

    @staticmethod
    def _check_vm(identity, vmid, privileges, any_of=False):
        identity.check("/vms/%d" % int(vmid), privileges, any_of)

    # -- permission checks of pve-container ---------------------------------------------------------

    @staticmethod
    def check_modify_perm(identity, vmid, old, new_params, deleted, unprivileged):
        """PVE::LXC::check_ct_modify_config_perm: dev[n], hookscript and most features are root@pam only."""
        if identity.is_root:
            return
        for key in list(new_params) + list(deleted):
            path_check = None
            if key in ("cores", "cpuunits", "cpulimit"):
                path_check = ["VM.Config.CPU"]
            elif key == "rootfs" or re.match(r"^mp\d+$", key):
                path_check = ["VM.Config.Disk"]
                if key in new_params:
                    volume = new_params[key].split(",")[0].replace("volume=", "")
                    if volume.startswith("/"):
                        kind = "device" if volume.startswith("/dev/") else "bind"
                        raise PermissionDenied("mount point type %s is only allowed for root@pam" % kind)
            elif key in ("memory", "swap"):
                path_check = ["VM.Config.Memory"]
            elif re.match(r"^net\d+$", key):
                path_check = ["VM.Config.Network"]
            elif re.match(r"^dev\d+$", key):
                raise PermissionDenied("configuring device passthrough is only allowed for root@pam")
            elif key in ("nameserver", "searchdomain", "hostname"):
                path_check = ["VM.Config.Network"]
            elif key == "features":
                if not unprivileged:
                    raise PermissionDenied("changing feature flags for privileged container is only allowed for root@pam")
                new = _features(new_params.get(key, "")) if key in new_params else {}
                before = _features(old.get("features") or "") if old is not None else {}
                changed = set(flag for flag in set(new) | set(before) if new.get(flag) != before.get(flag))
                if key in deleted:
                    changed = set(before)
                if changed - {"nesting"}:
                    raise PermissionDenied("changing feature flags (except nesting) is only allowed for root@pam")
                if changed:
                    path_check = ["VM.Allocate"]
            elif key == "hookscript":
                raise PermissionDenied("changing the hookscript is only allowed for root@pam")
            else:
                path_check = ["VM.Config.Options"]
            if path_check:
                identity.check("/vms/%d" % int(vmid), path_check)

    # -- read-only endpoints -----------------------------------------------------------------------

    def version(self, identity, params):
        schema.verify(params, {})
        return {"version": self.release.version, "release": self.release.version.rsplit(".", 1)[0], "repoid": self.release.repoid,
                "console": "xtermjs"}

    def nextid(self, identity, params):
        schema.verify(params, {"vmid": schema.VMID})
        used = set(self.vmids())
        if "vmid" in params:
            vmid = int(params["vmid"])
            if vmid in used:
                raise ApiError(400, "Parameter verification failed.", {"vmid": "VM %d already exists" % vmid})
            return str(vmid)
        vmid = 100
        while vmid in used:
            vmid += 1
        return str(vmid)

    def _ct_summary(self, vmid):
        config, _raw, _digest = load(self.config_dir, vmid)
        status = self.status_of(vmid)
        memory = int(config.get("memory") or 512)
        return {
            "vmid": vmid, "name": config.get("hostname") or "CT%d" % vmid, "status": status, "type": "lxc",
            "maxmem": memory * 1024 * 1024, "maxswap": int(config.get("swap") or 0) * 1024 * 1024, "maxdisk": 8 * 1024 ** 3,
            "cpus": int(config.get("cores") or (os.cpu_count() or 1)), "cpu": 0, "mem": 0, "disk": 0,
            "uptime": self.runtime.uptime(vmid) if status == "running" else 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            "lock": config.get("lock"), "template": int(config.get("template") or 0), "tags": config.get("tags"),
        }

    def _visible(self, identity, vmid):
        try:
            self._check_vm(identity, vmid, ["VM.Audit"])
            return True
        except PermissionDenied:
            return False

    def _visible_summaries(self, identity):
        """(vmid, summary) of every container ``identity`` may audit (one removed meanwhile is left out)."""
        for vmid in self.vmids():
            if not self._visible(identity, vmid):
                continue
            try:
                yield vmid, self._ct_summary(vmid)
            except ConfigMissing:
                continue

    def lxc_list(self, identity, params, node):
        schema.verify(params, {})
        self.check_node(node)
        return [dict((key, value) for key, value in summary.items() if value is not None)
                for _vmid, summary in self._visible_summaries(identity)]

    def cluster_resources(self, identity, params):
        schema.verify(params, {"type": schema._str(enum=["vm", "storage", "node", "sdn"])})  # pylint: disable=protected-access
        wanted = params.get("type")
        result = []
        if wanted in (None, "vm"):
            for vmid, summary in self._visible_summaries(identity):
                item = {"id": "lxc/%d" % vmid, "type": "lxc", "node": self.name, "maxcpu": summary["cpus"]}
                for key in ("vmid", "name", "status", "maxmem", "maxdisk", "mem", "disk", "cpu", "uptime", "template", "netin", "netout",
                            "diskread", "diskwrite", "lock", "tags"):
                    if summary.get(key) is not None:
                        item[key] = summary[key]
                result.append(item)
        if wanted in (None, "node"):
            result.append(dict(self._node_item(), id="node/%s" % self.name, type="node"))
        if wanted in (None, "storage"):
            for storage, info in sorted(STORAGES.items()):
                result.append({"id": "storage/%s/%s" % (self.name, storage), "type": "storage", "storage": storage, "node": self.name,
                               "status": "available", "content": ",".join(info["content"]), "plugintype": info["type"], "shared": 0})
        return result

    def _node_item(self):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"node": self.name, "status": "online", "cpu": 0.01, "maxcpu": os.cpu_count() or 1, "mem": 0, "maxmem": total,
                "uptime": int(time.time() - self.started_at), "level": "", "ssl_fingerprint": self.fingerprint or ""}

    def nodes(self, identity, params):
        schema.verify(params, {})
        return [self._node_item()]

    def node_status(self, identity, params, node):
        schema.verify(params, {})
        self.check_node(node)
        identity.check("/nodes/%s" % node, ["Sys.Audit"])
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        uname = os.uname()
        # The release's kernel, not this machine's: a client reads the node's kernel from here.
        kernel_version = "#1 SMP PREEMPT_DYNAMIC PMX %s (pve-sim)" % self.release.kernel.rsplit("-pve", 1)[0]
        return {"pveversion": "pve-manager/%s/%s" % (self.release.version, self.release.repoid),
                "kversion": "%s %s %s" % (uname.sysname, self.release.kernel, kernel_version),
                "uptime": int(time.time() - self.started_at), "cpu": 0.01, "loadavg": [str(value) for value in os.getloadavg()],
                "cpuinfo": {"cpus": os.cpu_count() or 1, "cores": os.cpu_count() or 1, "sockets": 1, "model": "pve-sim"},
                "memory": {"total": total, "used": 0, "free": total, "available": total},
                "current-kernel": {"sysname": uname.sysname, "release": self.release.kernel, "version": kernel_version, "machine": uname.machine}}

    def storage_content(self, identity, params, node, storage):
        schema.verify(params, {"content": schema._str(), "vmid": schema.VMID})  # pylint: disable=protected-access
        self.check_node(node)
        identity.check("/storage/%s" % storage, ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True)
        if storage not in STORAGES:
            raise die("storage '%s' does not exist" % storage)
        result = []
        # Plugin.pm list_volumes: only the content types the storage holds; the templates are the files of
        # template/cache whose names parse as a vztmpl volume, sorted by volid.
        if "vztmpl" in STORAGES[storage]["content"] and params.get("content") in (None, "vztmpl"):
            for entry in sorted(os.listdir(self.template_dir), key=str.lower):
                match = _VZTMPL_NAME_RE.match(entry)
                path = os.path.join(self.template_dir, entry)
                if not match or not os.path.isfile(path):
                    continue
                result.append({"volid": "%s:vztmpl/%s" % (storage, entry), "content": "vztmpl",
                               "format": "tar" if match.group(1) is None else "t" + match.group(1).lower(),
                               "size": os.path.getsize(path), "ctime": int(os.stat(path).st_ctime)})
        return result

    # -- containers --------------------------------------------------------------------------------

    def template_volume(self, volid):
        """PVE::Storage::check_volume_access at the create call: the volid must parse on an existing storage.

        Whether the file exists is only found out in the create task (see template_file). Returns the storage, or None
        for an absolute path (root's, checked in the task too)."""
        match = _VOLUME_ID_RE.match(volid)
        if not match:
            if volid.startswith("/"):
                return None
            raise die("unable to parse volume ID '%s'" % volid)
        storage, volname = match.groups()
        if storage not in STORAGES:
            raise die("storage '%s' does not exist" % storage)
        if STORAGES[storage]["type"] == "lvmthin":
            # LvmThinPlugin::parse_volname -> parse_lvm_name: the '/' of vztmpl/... is not a character of an LV name.
            if not re.match(r"^[a-z0-9][a-z0-9\-_.]*[a-z0-9]$", volname, re.I):
                raise die("lvm name '%s' contains illegal characters" % volname)
            raise die("pve-sim does not implement volumes of storage '%s' as ostemplate ('%s')" % (storage, volid))
        if volname.startswith("vztmpl/"):
            # Plugin.pm parse_volname: no other volume type starts with vztmpl/.
            if not _VZTMPL_NAME_RE.match(volname[len("vztmpl/"):]):
                raise die("unable to parse directory volume name '%s'" % volname)
            return storage
        raise die("pve-sim does not implement volumes other than vztmpl/ as ostemplate ('%s')" % volid)

    def template_file(self, volid):
        """The template's file, found as the create task finds it (PVE::LXC::Create::restore_archive ->
        PVE::Storage::abs_filesystem_path); TaskFailed with PVE's message when it is not there."""
        if volid.startswith("/"):
            if not os.path.isfile(volid):
                raise TaskFailed("can't find file '%s'" % volid)
            return volid
        path = os.path.join(self.template_dir, volid.split(":vztmpl/", 1)[1])
        if not os.path.exists(path):
            # Plugin.pm activate_volume, called by abs_filesystem_path before it looks at the path.
            raise TaskFailed("volume '%s' does not exist" % volid)
        if not os.path.isfile(path):
            raise TaskFailed("can't find file '%s'" % volid)
        return path

    def create(self, identity, params, node):
        schema.verify(params, schema.CREATE_EXTRA, schema.CREATE_REQUIRED, container_options=True)
        self.check_node(node)
        params = dict(params)
        vmid = int(params.pop("vmid"))
        for key in ("restore", "force", "unique", "pool", "bwlimit", "ignore-unpack-errors", "ha-managed"):
            if schema.parse_boolean(params.get(key, "0")) and key in ("restore", "pool", "ha-managed"):
                raise die("pve-sim does not implement '%s'" % key)
            params.pop(key, None)
        unprivileged = schema.parse_boolean(params.get("unprivileged", "1" if self.release.default_unprivileged else "0"))
        if not unprivileged:
            identity.check("/", ["Sys.Modify"])
        if vmid in self.vmids():
            raise die("CT %d already exists on node '%s'" % (vmid, self.name))
        self._check_vm(identity, vmid, ["VM.Allocate"])
        ostemplate = params.pop("ostemplate")
        storage = params.pop("storage", "local")
        password = params.pop("password", None)
        ssh_keys = params.pop("ssh-public-keys", None)
        if ssh_keys is not None:
            invalid = guest.validate_ssh_public_keys(ssh_keys)
            if invalid:
                raise die(invalid)
        start = schema.parse_boolean(params.pop("start", "0"))
        self.check_modify_perm(identity, vmid, None, params, [], unprivileged)
        self.template_volume(ostemplate)
        for key, value in params.items():
            if re.match(r"^dev\d+$", key):
                try:
                    device_rdev(parse_device(value)["path"])
                except TaskFailed as error:
                    raise die(str(error)) from None
        rootfs_spec = params.pop("rootfs", "%s:4" % storage)
        volume, options = self._allocate_rootfs(vmid, rootfs_spec)
        description = params.pop("description", None)
        options_out = dict((key, schema.normalise(key, value)) for key, value in params.items())
        options_out.setdefault("hostname", "CT%d" % vmid)
        options_out.setdefault("memory", "512")
        options_out.setdefault("swap", "512")
        options_out.setdefault("arch", "amd64")
        options_out.setdefault("ostype", "debian")
        options_out["unprivileged"] = "1" if unprivileged else "0"
        options_out["rootfs"] = ",".join([volume] + options)
        # create_and_lock_config: the config exists (locked) while the task runs.
        write_atomic(self.config_dir, vmid, render_new({"lock": "create"}))

        # The API takes no raw lxc.* keys, so a new container has the default map or none.
        id_map, root_uid, root_gid = idmap.parse_id_maps(unprivileged)

        def work(task):
            rootfs = self.rootfs_path(options_out, vmid)
            try:
                # Where PVE allocates the mount points' volumes.
                for key in mounts.mount_point_keys(options_out):
                    mounts.check_supported(key, options_out[key])
                # As on a node: the rootfs is allocated before the template is looked for (and removed again).
                os.makedirs(rootfs, exist_ok=True)
                self.runtime.extract(vmid, self.template_file(ostemplate), rootfs, task, id_map)
                if password:
                    task.log("setting root password (not applied by pve-sim)")
                # PVE::LXC::Setup::post_create_hook, as the container's root
                if ssh_keys:
                    guest.write_authorized_keys(rootfs, ssh_keys, (root_uid, root_gid))
                guest.rewrite_ssh_host_keys(rootfs, options_out["hostname"], task.log, (root_uid, root_gid))
                with self.config_lock(vmid):
                    write_atomic(self.config_dir, vmid, render_new(options_out, description))
            except Exception as error:  # pylint: disable=broad-except
                shutil.rmtree(os.path.dirname(rootfs) if os.path.basename(os.path.dirname(rootfs)) == str(vmid) else rootfs,
                              ignore_errors=True)
                try:
                    os.unlink(os.path.join(self.config_dir, "%d.conf" % vmid))
                except FileNotFoundError:
                    pass
                raise TaskFailed("unable to create CT %d - %s" % (vmid, str(error).strip())) from None
            if start:
                self._start_work(vmid, task)

        return self.tasks.start("vzcreate", vmid, identity.userid, work)

    def _allocate_rootfs(self, vmid, spec):
        parts = spec.split(",")
        volume = parts[0].replace("volume=", "")
        options = [part for part in parts[1:] if not part.startswith("size=")]
        match = _NEW_DISK_RE.match(volume)
        if not match:
            return volume, parts[1:]
        storage = match.group(1) or "local"
        if storage not in STORAGES:
            raise die("storage '%s' does not exist" % storage)
        if "rootdir" not in STORAGES[storage]["content"]:
            raise die("storage '%s' does not support container directories" % storage)
        size = match.group(2)
        if STORAGES[storage]["type"] == "dir":
            name = "%s:%d/subvol-%d-disk-0.subvol" % (storage, vmid, vmid)
        else:
            name = "%s:vm-%d-disk-0" % (storage, vmid)
        return name, ["size=%sG" % size] + options

    def get_config(self, identity, params, node, vmid):
        schema.verify(params, {"current": schema._bool(), "snapshot": schema._str()})  # pylint: disable=protected-access
        self.check_node(node)
        self._check_vm(identity, vmid, ["VM.Audit"])
        config, _raw, digest = self.load_config(vmid)
        if params.get("snapshot"):
            section = config.snapshots.get(params["snapshot"])
            if section is None:
                raise die("snapshot '%s' does not exist" % params["snapshot"])
            return dict(section.options, digest=digest)
        return api_view(config, digest)

    def update_config(self, identity, params, node, vmid):
        schema.verify(params, schema.UPDATE_EXTRA, container_options=True)
        self.check_node(node)
        identity.check("/vms/%d" % vmid, ["VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options"],
                       any_of=True)
        params = dict(params)
        digest = params.pop("digest", None)
        if not params:
            raise die("no options specified")
        deleted = [item for item in re.split(r"[,;\s\0]+", params.pop("delete", "")) if item]
        reverted = [item for item in re.split(r"[,;\s\0]+", params.pop("revert", "")) if item]
        with self.config_lock(vmid):
            config, _raw, current_digest = self.load_config(vmid)
            if config.get("lock"):
                raise die("CT is locked (%s)" % config.get("lock"))
            if digest and digest != current_digest:
                raise die("detected modified configuration - file changed by other user? Try again.")
            unprivileged = schema.parse_boolean(config.get("unprivileged") or "0")
            old = dict((key, config.get(key)) for key in config.keys())
            self.check_modify_perm(identity, vmid, old, {}, deleted, unprivileged)
            for key in reverted:
                if schema.option_spec(key) is None:
                    raise ApiError(400, "Parameter verification failed.", {"revert": "unknown option '%s'" % key})
            for key in deleted:
                if schema.option_spec(key) is None and key != "description":
                    raise ApiError(400, "Parameter verification failed.", {"delete": "unknown option '%s'" % key})
                if key in params:
                    raise ApiError(400, "Parameter verification failed.", {"delete": "you can't use '-%s' and -delete %s' at the same time" % (key, key)})
            self.check_modify_perm(identity, vmid, old, params, [], unprivileged)
            for key in deleted:
                if key in ("memory", "rootfs", "ostype"):
                    raise die("unable to delete required option '%s'" % key)
                if key == "unprivileged":
                    raise die("unable to delete read-only option: 'unprivileged'")
            for key, value in params.items():
                if key == "unprivileged":
                    raise die("unable to modify read-only option: 'unprivileged'")
                if re.match(r"^dev\d+$", key):
                    try:
                        device_rdev(parse_device(value)["path"])
                    except TaskFailed as error:
                        raise die(str(error)) from None
                if re.match(r"^mp\d+$", key):
                    try:
                        mounts.check_supported(key, value)
                    except mounts.NotImplementedMount as error:
                        raise die(str(error)) from None
            for key in deleted:
                if key == "description":
                    config.description = ""
                else:
                    config.remove(key)
            for key in sorted(params):
                if key == "description":
                    config.description = params[key]
                else:
                    config.set(key, schema.normalise(key, params[key]))
            write_atomic(self.config_dir, vmid, config.render())
        return None

    def status_current(self, identity, params, node, vmid):
        schema.verify(params, {})
        self.check_node(node)
        self._check_vm(identity, vmid, ["VM.Audit"])
        self.load_config(vmid)
        summary = self._ct_summary(vmid)
        summary["ha"] = {"managed": 0}
        return dict((key, value) for key, value in summary.items() if value is not None)

    def _start_work(self, vmid, task):
        with self.config_lock(vmid):
            config, _raw, _digest = load(self.config_dir, vmid)
        if config.get("template") == "1":
            raise TaskFailed("you can't start a CT if it's a template")
        self.runtime.start(vmid, config, self.rootfs_path(config, vmid), task)

    def power(self, identity, params, node, vmid, action):
        extra = {
            "start": {"skiplock": schema._bool(), "debug": schema._bool()},  # pylint: disable=protected-access
            "stop": {"skiplock": schema._bool(), "overrule-shutdown": schema._bool()},  # pylint: disable=protected-access
            "shutdown": {"timeout": schema._int(0), "forceStop": schema._bool()},  # pylint: disable=protected-access
            "reboot": {"timeout": schema._int(0)},  # pylint: disable=protected-access
        }[action]
        schema.verify(params, extra)
        self.check_node(node)
        self._check_vm(identity, vmid, ["VM.PowerMgmt"])
        if params.get("skiplock") and not identity.is_root:
            raise ApiError(400, "Parameter verification failed.", {"skiplock": "Only root may use this option."})
        config, _raw, _digest = self.load_config(vmid)
        running = self.runtime.is_running(vmid)
        if action == "start" and running:
            raise die("CT %d already running" % vmid)
        if action in ("stop", "shutdown") and not running:
            raise die("CT %d not running" % vmid)
        if action == "reboot" and not running:
            raise die("VM %d not running" % vmid)
        if config.get("lock") and not params.get("skiplock"):
            raise die("CT is locked (%s)" % config.get("lock"))
        timeout = int(params.get("timeout", 60))
        force = schema.parse_boolean(params.get("forceStop", "0"))

        def work(task):
            if action == "start":
                self._start_work(vmid, task)
            elif action == "stop":
                self.runtime.stop(vmid, task)
            elif action == "shutdown":
                try:
                    self.runtime.stop(vmid, task, timeout=timeout)
                except TaskFailed:
                    if not force:
                        raise TaskFailed("container did not stop") from None
                    self.runtime.stop(vmid, task)
            else:
                self.runtime.stop(vmid, task, timeout=timeout)
                self._start_work(vmid, task)

        worker = {"start": "vzstart", "stop": "vzstop", "shutdown": "vzshutdown", "reboot": "vzreboot"}[action]
        return self.tasks.start(worker, vmid, identity.userid, work)

    def destroy(self, identity, params, node, vmid):
        schema.verify(params, {"force": schema._bool(), "purge": schema._bool(),  # pylint: disable=protected-access
                               "destroy-unreferenced-disks": schema._bool()})  # pylint: disable=protected-access
        self.check_node(node)
        self._check_vm(identity, vmid, ["VM.Allocate"])
        config, _raw, _digest = self.load_config(vmid)
        if config.get("protection") == "1":
            raise die("can't remove CT %d - protection mode enabled" % vmid)
        if config.get("lock"):
            raise die("CT is locked (%s)" % config.get("lock"))
        force = schema.parse_boolean(params.get("force", "0"))
        if not force and self.runtime.is_running(vmid):
            raise die("unable to destroy CT %d - container is running" % vmid)

        def work(task):
            with self.config_lock(vmid):
                current, _text, _digest = load(self.config_dir, vmid)
                if self.runtime.is_running(vmid):
                    if not force:
                        raise TaskFailed("unable to destroy CT %d - container is running" % vmid)
                    task.log("forced to stop CT %d before destroying!" % vmid)
                    self.runtime.stop(vmid, task)
                rootfs = self.rootfs_path(current, vmid)
                self.runtime.destroy(vmid, rootfs, task)
                if os.path.basename(os.path.dirname(rootfs)) == str(vmid):
                    shutil.rmtree(os.path.dirname(rootfs), ignore_errors=True)
                task.log("  Logical volume \"vm-%d-disk-0\" successfully removed." % vmid if "local-lvm" in (current.get("rootfs") or "")
                         else "purging CT %d files" % vmid)
                os.unlink(os.path.join(self.config_dir, "%d.conf" % vmid))

        return self.tasks.start("vzdestroy", vmid, identity.userid, work)

    # -- tasks -------------------------------------------------------------------------------------

    def _task(self, identity, node, upid):
        self.check_node(node)
        task = self.tasks.get(upid)
        if task is None:
            raise die("no such task")
        owner = task.fields["user"]
        if owner != identity.userid and owner.split("!")[0] != identity.userid:
            identity.check("/nodes/%s" % node, ["Sys.Audit"])
        return task

    def task_status(self, identity, params, node, upid):
        schema.verify(params, {})
        return self._task(identity, node, upid).status()

    def task_log(self, identity, params, node, upid):
        schema.verify(params, {"start": schema._int(0), "limit": schema._int(0), "download": schema._bool()})  # pylint: disable=protected-access
        task = self._task(identity, node, upid)
        return task.log_page(int(params.get("start", 0)), int(params.get("limit", 50)))


def _features(value):
    result = {}
    for part in value.split(","):
        if "=" in part:
            key, item = part.split("=", 1)
            result[key] = item
    return result
