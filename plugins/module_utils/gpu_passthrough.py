# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plan the GPU passthrough entries of a Proxmox container config. Pure: no I/O.

Input: the device nodes discovered on the host by stat (path, major, minor, type), never assumed
majors (nvidia is 195, but nvidia-uvm and nvidia-caps get dynamic majors that change with kernel
or driver updates). Output: a new :class:`LxcConfig` and the list of changes; planning the result
again yields no change.

Styles:

* ``raw``: one ``lxc.cgroup2.devices.allow: c <major>:* rwm`` (``lxc.cgroup.devices.allow`` on a
  cgroup v1 host) per distinct major and one
  ``lxc.mount.entry: <path> <path without leading /> none bind,optional,create=file`` per node
  (``create=dir`` for a directory).
* ``dev``: one ``devN: <path>[,gid=..][,mode=..][,uid=..]`` per node; an entry that already names
  the path is reused (and corrected when its options differ), new ones take the lowest free index.
  Proxmox stats the node at every start and allows its current major itself.

Which existing allow lines are "ours" (may be rewritten or removed): only lines of the exact shape
``c <major>:* rwm`` that are either for a discovered major, or STALE. A line is stale when all of
these hold:

1. its major is not the major of any discovered node;
2. its major lies in the kernel's dynamic character-major ranges (234-254, 384-511), where
   nvidia-uvm and nvidia-caps get theirs: fixed majors (195 nvidia, 226 DRI, 10 misc, ...) are
   never stale;
3. the main section passes an NVIDIA node with a dynamic major (a ``lxc.mount.entry`` whose source
   is /dev/nvidia-uvm, /dev/nvidia-uvm-tools or under /dev/nvidia-caps), so such a line is expected
   to be there for NVIDIA;
4. its major is not in ``protected_majors``: the caller stats the sources of the container's
   other mount entries and dev[n] paths on the host and passes their majors, so a line that still
   serves another device is kept.

A stale line of the host's cgroup key is rewritten in place with a missing major when there is one
(the usual case: nvidia-uvm moved from 510 to 508), otherwise removed; stale lines of the other
cgroup version's key are removed. Everything else (``a``, ``c 10:200 rwm``, ``b 7:* rwm``, other
mounts, hooks, comments) is left alone.

With ``remove_other_style`` (default), each style also removes the other style's entries for the
discovered nodes: ``raw`` removes dev[n] entries naming a discovered path; ``dev`` removes mount
entries whose source is a discovered path and "our" allow lines (discovered or stale majors, minus
``protected_majors``). The API and ``pct set`` cannot remove raw lines, so callers that use them
turn it off.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import (
    MAX_DEVICES,
    format_device,
    parse_device,
)

ALLOW_KEYS = {"v1": "lxc.cgroup.devices.allow", "v2": "lxc.cgroup2.devices.allow"}
MOUNT_KEY = "lxc.mount.entry"
STYLES = ("raw", "dev")
NODE_TYPES = ("c", "b", "d")
# fs/char_dev.c: CHRDEV_MAJOR_DYN_END..CHRDEV_MAJOR_MAX-1 and CHRDEV_MAJOR_DYN_EXT_END..START.
DYNAMIC_CHAR_MAJOR_RANGES = ((234, 254), (384, 511))
# By name, in /dev or a directory below it (a node may be bound from e.g. /dev/gpu-kit/nvidia-uvm).
_NVIDIA_DYNAMIC_SOURCE_RE = re.compile(r"^/dev/(?:[^/]+/)*nvidia-(uvm|uvm-tools|caps)(/.*)?$")
_ALLOW_ALL_MINORS_RE = re.compile(r"^([cb])\s+(\d+):\*\s+rwm$")
_MODE_RE = re.compile(r"^0[0-7]{3}$")


class DeviceNode:
    """A discovered host device node (or a directory of them, type ``d``)."""

    __slots__ = ("path", "major", "minor", "type", "gid", "uid", "mode", "deny_write")

    def __init__(self, path, major, minor, node_type, gid=None, uid=None, mode=None, deny_write=False):
        self.path = path
        self.major = major
        self.minor = minor
        self.type = node_type
        self.gid = gid
        self.uid = uid
        self.mode = mode
        self.deny_write = deny_write

    @property
    def mount_target(self):
        return self.path.lstrip("/")


class PassthroughPlan:
    """The planned document and the changes that lead to it."""

    def __init__(self, document, changes):
        self.document = document
        self.changes = changes

    @property
    def changed(self):
        return bool(self.changes)


def _optional_int(raw, name, path):
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError("device %s: %s must be an integer, got %r" % (path, name, raw))
    if value < 0:
        raise ValueError("device %s: %s must not be negative" % (path, name))
    return value


def normalize_devices(devices):
    """Validate discovered nodes (dicts with path, major, minor, type; optional gid, uid, mode, deny_write).

    Returns DeviceNode objects in the given order, one per path. Raises ValueError.
    """
    nodes = []
    seen = {}
    for raw in devices or []:
        if not isinstance(raw, dict):
            raise ValueError("each device must be a dict with path, major, minor and type, got %r" % (raw,))
        path = raw.get("path")
        if not isinstance(path, str) or not path.startswith("/dev/") or re.search(r"/\.\.?(/|$)", path) or re.search(r"[\s,]", path):
            raise ValueError("device path %r must be an absolute path under /dev/ without '.', '..', commas or spaces" % (path,))
        node_type = raw.get("type", "c")
        if node_type not in NODE_TYPES:
            raise ValueError("device %s: type must be one of %s, got %r" % (path, ", ".join(NODE_TYPES), node_type))
        major = _optional_int(raw.get("major"), "major", path)
        minor = _optional_int(raw.get("minor"), "minor", path)
        if node_type != "d" and major is None:
            raise ValueError("device %s: the major number is required (stat the node, never assume it)" % path)
        mode = raw.get("mode")
        if mode is not None and not _MODE_RE.match(str(mode)):
            raise ValueError("device %s: mode must be an octal mode like 0660, got %r" % (path, mode))
        node = DeviceNode(path, major, minor, node_type, _optional_int(raw.get("gid"), "gid", path),
                          _optional_int(raw.get("uid"), "uid", path), mode, bool(raw.get("deny_write", False)))
        if path in seen:
            previous = seen[path]
            if (previous.major, previous.minor, previous.type) != (node.major, node.minor, node.type):
                raise ValueError("device %s is listed twice with different numbers" % path)
            continue
        seen[path] = node
        nodes.append(node)
    if not nodes:
        raise ValueError("no devices given: pass the nodes discovered on the host")
    return nodes


def is_dynamic_char_major(major):
    return any(low <= major <= high for low, high in DYNAMIC_CHAR_MAJOR_RANGES)


def parse_allow(value):
    """``(type, major)`` for an allow value of the exact shape ``c <major>:* rwm``, else None."""
    match = _ALLOW_ALL_MINORS_RE.match(" ".join(value.split()))
    if not match:
        return None
    return match.group(1), int(match.group(2))


def allow_value(node_type, major):
    return "%s %d:* rwm" % (node_type, major)


def mount_value(node):
    create = "dir" if node.type == "d" else "file"
    return "%s %s none bind,optional,create=%s" % (node.path, node.mount_target, create)


def mount_source_target(value):
    fields = value.split()
    if len(fields) < 2:
        return None, None
    return fields[0], fields[1].strip("/")


def _change(action, key, value=None, old_value=None, reason=""):
    change = {"action": action, "key": key, "reason": reason}
    if value is not None:
        change["value"] = value
    if old_value is not None:
        change["old_value"] = old_value
    return change


def _wanted_majors(nodes):
    wanted = []
    for node in nodes:
        if node.type in ("c", "b") and (node.type, node.major) not in wanted:
            wanted.append((node.type, node.major))
    return wanted


def _stale_allow_entries(document, nodes, protected_majors):
    """Allow entries (either cgroup key) that are ours and stale; see the module docstring."""
    discovered = set(node.major for node in nodes if node.type in ("c", "b"))
    passes_dynamic_nvidia = any(
        _NVIDIA_DYNAMIC_SOURCE_RE.match(mount_source_target(entry.value)[0] or "")
        for entry in document.lxc_entries(MOUNT_KEY)
    )
    if not passes_dynamic_nvidia:
        return []
    stale = []
    for key in ALLOW_KEYS.values():
        for entry in document.lxc_entries(key):
            parsed = parse_allow(entry.value)
            if parsed is None or parsed[0] != "c":
                continue
            major = parsed[1]
            if major in discovered or major in protected_majors or not is_dynamic_char_major(major):
                continue
            stale.append(entry)
    return stale


def _plan_raw(document, nodes, allow_key, protected_majors, remove_other_style, changes):
    wanted = _wanted_majors(nodes)
    stale = _stale_allow_entries(document, nodes, protected_majors)
    stale_ids = set(id(entry.line) for entry in stale)
    present = set()
    for entry in document.lxc_entries(allow_key):
        parsed = parse_allow(entry.value)
        if parsed is not None and id(entry.line) not in stale_ids:
            present.add(parsed)
    missing = [pair for pair in wanted if pair not in present]

    # A stale line of the host's key becomes the line of a missing major, in place.
    for entry in stale:
        if entry.key == allow_key and missing:
            node_type, major = missing.pop(0)
            new_value = allow_value(node_type, major)
            document.replace_lxc(entry, allow_key, new_value)
            changes.append(_change("update", allow_key, new_value, entry.value,
                                   "stale dynamic major %s replaced by the discovered major %d" % (entry.value, major)))
        else:
            document.remove_lxc(entry)
            changes.append(_change("remove", entry.key, old_value=entry.value,
                                   reason="stale dynamic major: no discovered or otherwise passed node has it"))
    for node_type, major in missing:
        value = allow_value(node_type, major)
        document.add_lxc(allow_key, value)
        changes.append(_change("add", allow_key, value, reason="allow the discovered major %d" % major))

    mounted = set()
    for entry in document.lxc_entries(MOUNT_KEY):
        source, target = mount_source_target(entry.value)
        if source is not None:
            mounted.add((source, target))
    for node in nodes:
        if (node.path, node.mount_target) in mounted:
            continue
        value = mount_value(node)
        document.add_lxc(MOUNT_KEY, value)
        mounted.add((node.path, node.mount_target))
        changes.append(_change("add", MOUNT_KEY, value, reason="bind-mount %s" % node.path))

    if remove_other_style:
        paths = set(node.path for node in nodes)
        for device in document.devices():
            if device.path in paths:
                document.remove(device.key)
                changes.append(_change("remove", device.key, old_value=device.value,
                                       reason="%s is passed by raw lxc lines (style raw)" % device.path))


def _desired_device_value(node, defaults):
    def pick(name):
        own = getattr(node, name)
        return own if own is not None else defaults.get(name)

    deny_write = node.deny_write or bool(defaults.get("deny_write"))
    return format_device(node.path, gid=pick("gid"), uid=pick("uid"), mode=pick("mode"), deny_write=deny_write)


def _plan_dev(document, nodes, defaults, protected_majors, remove_other_style, changes):
    for node in nodes:
        if node.type == "d":
            raise ValueError("%s is a directory: dev[n] passes device nodes only; list the nodes inside it or use style raw" % node.path)
    existing = document.devices()
    used = set(device.index for device in existing)
    if document.pending is not None:
        used.update(device.index for device in document.devices(document.pending))
    by_path = {}
    for device in existing:
        by_path.setdefault(device.path, []).append(device)

    for node in nodes:
        desired = _desired_device_value(node, defaults)
        desired_options = parse_device(desired)
        current = by_path.get(node.path, [])
        if current:
            keep = current[0]
            if keep.options() != _as_entry_options(desired_options):
                document.set(keep.key, desired)
                changes.append(_change("update", keep.key, desired, keep.value, "options of %s" % node.path))
            for duplicate in current[1:]:
                document.remove(duplicate.key)
                changes.append(_change("remove", duplicate.key, old_value=duplicate.value,
                                       reason="%s is already passed as %s" % (node.path, keep.key)))
            continue
        index = next((n for n in range(MAX_DEVICES) if n not in used), None)
        if index is None:
            raise ValueError("no free dev[n] index left (Proxmox allows dev0..dev%d)" % (MAX_DEVICES - 1))
        used.add(index)
        key = "dev%d" % index
        document.set(key, desired)
        changes.append(_change("add", key, desired, reason="pass %s" % node.path))

    if remove_other_style:
        # Stale lines are recognised by the NVIDIA mounts, so find them before those mounts go.
        stale_ids = set(id(entry.line) for entry in _stale_allow_entries(document, nodes, protected_majors))
        paths = set(node.path for node in nodes)
        for entry in document.lxc_entries(MOUNT_KEY):
            source, target = mount_source_target(entry.value)
            if source in paths:
                document.remove_lxc(entry)
                changes.append(_change("remove", MOUNT_KEY, old_value=entry.value,
                                       reason="%s is passed as dev[n] (style dev)" % source))
        discovered = set((node.type, node.major) for node in nodes if node.major not in protected_majors)
        for key in ALLOW_KEYS.values():
            for entry in document.lxc_entries(key):
                parsed = parse_allow(entry.value)
                if parsed is None:
                    continue
                if parsed in discovered or id(entry.line) in stale_ids:
                    document.remove_lxc(entry)
                    changes.append(_change("remove", key, old_value=entry.value,
                                           reason="Proxmox allows the majors of dev[n] nodes itself (style dev)"))


def _as_entry_options(parsed):
    return {"path": parsed["path"], "gid": parsed["gid"], "uid": parsed["uid"], "mode": parsed["mode"], "deny_write": parsed["deny_write"]}


def plan_passthrough(document, devices, style="raw", cgroup_version="v2", dev_defaults=None, protected_majors=(), remove_other_style=True):
    """Plan the passthrough of ``devices`` into ``document`` (an LxcConfig, left untouched).

    ``devices``: dicts as discovered (see :func:`normalize_devices`) or DeviceNode objects.
    ``dev_defaults``: gid/uid/mode/deny_write for dev entries whose node does not set its own.
    Returns a :class:`PassthroughPlan`.
    """
    if style not in STYLES:
        raise ValueError("style must be one of %s, got %r" % (", ".join(STYLES), style))
    if cgroup_version not in ALLOW_KEYS:
        raise ValueError("cgroup_version must be v1 or v2, got %r" % (cgroup_version,))
    devices = list(devices or [])
    nodes = [node for node in devices if isinstance(node, DeviceNode)]
    if not nodes or len(nodes) != len(devices):
        nodes = normalize_devices(devices)
    document = document.copy()
    changes = []
    protected = frozenset(int(major) for major in protected_majors)
    if style == "raw":
        _plan_raw(document, nodes, ALLOW_KEYS[cgroup_version], protected, remove_other_style, changes)
    else:
        _plan_dev(document, nodes, dict(dev_defaults or {}), protected, remove_other_style, changes)
    return PassthroughPlan(document, changes)


def is_nvidia_dynamic_source(path):
    """True for the NVIDIA nodes whose majors are dynamic (uvm, uvm-tools, caps)."""
    return bool(_NVIDIA_DYNAMIC_SOURCE_RE.match(path or ""))
