# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Back end ``file`` of lxc_gpu_passthrough: edit <config_dir>/<vmid>.conf on the node, as root.

The file is read and written under Proxmox's own config lock (as pct does), edited line by line (module_utils
pve_lxc_config and gpu_passthrough), backed up, and replaced atomically with its mode and owner kept
(module_utils.atomic_file). Only this back end can write raw lxc.* lines.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import atomic_replace, read_bytes, write_backup
from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import normalize_target, plan_passthrough
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough import (
    PassthroughError,
    dev_entries,
    devices_or_empty,
    pct_restart,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

LOCK_WAIT_SECONDS = 10
LOCK_POLL_SECONDS = 0.2
MAX_DIRECTORY_ENTRIES = 1024


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
                time.sleep(LOCK_POLL_SECONDS)

    def __exit__(self, *exc_info):
        if self.handle is not None:
            self.handle.close()  # closing releases the flock
        return False


def _stat_node(path):
    """``(type, major, minor)`` of a device node, ``("d", None, None)`` for a directory, None otherwise (or missing)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return ("c" if stat.S_ISCHR(info.st_mode) else "b", os.major(info.st_rdev), os.minor(info.st_rdev))
    if stat.S_ISDIR(info.st_mode):
        return ("d", None, None)
    return None


def _directory_names(path):
    try:
        return sorted(os.listdir(path))[:MAX_DIRECTORY_ENTRIES]
    except OSError:
        return []


def stat_mount_sources(document):
    """What the host has at every mount source of the config, and in a directory source: ``{path: _stat_node(path)}``.

    The planner tells a per-container copy of a node (same numbers) from a stale one with it.
    """
    found = {}
    for entry in document.lxc_entries("lxc.mount.entry"):
        fields = entry.value.split()
        if len(fields) < 2 or fields[0] in found:
            continue
        found[fields[0]] = _stat_node(fields[0])
        if found[fields[0]] == ("d", None, None):
            for name in _directory_names(fields[0]):
                path = os.path.join(fields[0], name)
                found.setdefault(path, _stat_node(path))
    return found


def host_protected_majors(document, nodes, sources=None):
    """Majors of the devices the container passes besides the discovered ones (stat on the host).

    An allow line for one of them is never treated as a stale NVIDIA line, nor removed by style dev. A mount onto a
    discovered node's own place is not "another device": the plan binds the node there.
    """
    sources = stat_mount_sources(document) if sources is None else sources

    def look(path):
        return sources[path] if path in sources else _stat_node(path)

    discovered = set(node.path for node in nodes)
    targets = set(node.mount_target for node in nodes)
    candidates = []
    for entry in document.lxc_entries("lxc.mount.entry"):
        fields = entry.value.split()
        if not fields or fields[0] in discovered or (len(fields) > 1 and normalize_target(fields[1]) in targets):
            continue
        if look(fields[0]) == ("d", None, None):
            candidates.extend(os.path.join(fields[0], name) for name in _directory_names(fields[0]))
        else:
            candidates.append(fields[0])
    candidates.extend(device.path for device in devices_or_empty(document) if device.path not in discovered)
    return set(info[1] for info in map(look, candidates) if info and info[0] in ("c", "b"))


def run(module, nodes, cgroup_version, dev_defaults, warnings):
    params = module.params
    path = os.path.join(params["config_dir"], "%d.conf" % params["vmid"])
    result = {"config_path": path, "backup_file": None}
    if not os.path.isfile(path):
        raise PassthroughError("CT %d has no config at %s: does the container exist on this node?" % (params["vmid"], path))
    with ConfigLock(params["lock_dir"], params["vmid"]):
        mode = os.stat(path).st_mode
        before_bytes = read_bytes(path)
        before = before_bytes.decode("utf-8", "surrogateescape")
        document = parse(before)
        sources = stat_mount_sources(document)
        protected = host_protected_majors(document, nodes, sources)
        plan = plan_passthrough(document, nodes, params["style"], cgroup_version, dev_defaults, protected, source_nodes=sources)
        after = plan.document.render()
        changed = after != before
        if changed and not module.check_mode:
            if params["backup"]:
                result["backup_file"] = write_backup(path, before_bytes, mode)
            atomic_replace(path, after.encode("utf-8", "surrogateescape"), warnings)
    result.update(changed=changed, changes=plan.changes, devices=dev_entries(plan.document))
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    restart_needed, restarted = pct_restart(module, module.get_bin_path("pct"), params["vmid"], changed)
    result.update(restart_needed=restart_needed, restarted=restarted)
    return result
