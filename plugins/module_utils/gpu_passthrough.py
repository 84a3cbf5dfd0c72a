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

Mount entries are recognised by their TARGET (``dev/nvidia0`` and ``/dev/nvidia0`` are the same),
never by their source: a config that binds a per-container copy of a node (``/lxc/102010/devices/
nvidia0 dev/nvidia0 ...``, a mknod'ed node) already mounts something onto that target, and a second
mount onto it is never added. The entry is kept when its source is the node or, per ``source_nodes``
(what the caller's stat of the host path says), the same device (same type, major and minor);
otherwise its source is rewritten to the node, options untouched. Further entries onto the same
target go. A node whose target lies inside a bind-mounted directory (``/dev/nvidia-caps
dev/nvidia-caps ... create=dir`` covers ``dev/nvidia-caps/nvidia-cap1``) is covered by it when the
directory maps the node's host path; a directory bound from elsewhere onto the node's parent is
pointed at the node's host directory; anything else is refused.

Allow rules are read in the exact shapes ``<c|b> <major>:* rwm`` (all minors) and
``<c|b> <major>:<minor> rwm`` (one minor), each optionally followed by an inline ``# comment``
(LXC reads the three access letters and ignores the rest). Everything else (``a``,
``c 10:200 rw``, other keys) is not ours. Which rules are ours to rewrite or remove:

* per-minor rules (host key) of a discovered major: the wildcard the plan writes for that major
  covers them, so they go;
* STALE rules (either key), per-minor or wildcard. A rule is stale when all of these hold:

  1. its major is not the major of any discovered node;
  2. its major lies in the kernel's dynamic character-major ranges (234-254, 384-511), where
     nvidia-uvm and nvidia-caps get theirs: fixed majors (195 nvidia, 226 DRI, 10 misc, ...) are
     never stale;
  3. the main section passes an NVIDIA node with a dynamic major (a mount entry whose source or
     target is nvidia-uvm, nvidia-uvm-tools or under nvidia-caps, or such a dev[n] entry), so such
     a rule is expected to be there for NVIDIA;
  4. its major is not in ``protected_majors``: the caller stats the sources of the container's
     other mount entries and dev[n] paths on the host and passes their majors, so a rule that still
     serves another device is kept.

A stale rule is rewritten in place into the current major of the NVIDIA node it belonged to, never
into whichever major happens to be missing. What ties an old major to a node family (nvidia-uvm,
nvidia-caps):

* a per-container copy of the node (see above) whose stat shows that major;
* a comment that names exactly one family, inline or on the line right above the rule;
* the rule's paragraph (lines between blank lines) passing exactly one family, with no other
  dynamic major allowed in it;
* per-minor rules whose minors belong to exactly one family (uvm has 0 and 1, caps 1..n);
* elimination: one untied stale major left, and exactly one family that the config already passes
  still lacks its line.

A stale major tied to a family whose current major already has its line, and a stale major nothing
ties, are removed and the missing lines added at the end: the diff never shows one node's old major
turning into another node's new one. Stale rules of the other cgroup version's key are removed.

With ``remove_other_style`` (default), each style also removes the other style's entries for the
discovered nodes: ``raw`` removes dev[n] entries naming a discovered path; ``dev`` removes mount
entries onto a discovered node's target and "our" wildcard allow rules (discovered majors minus
``protected_majors``, and stale rules). The API and ``pct set`` cannot remove raw lines, so callers
that use them turn it off.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import (
    BLANK,
    COMMENT,
    LXC,
    MAX_DEVICES,
    OPTION,
    format_device,
    parse_device,
)

ALLOW_KEYS = {"v1": "lxc.cgroup.devices.allow", "v2": "lxc.cgroup2.devices.allow"}
MOUNT_KEY = "lxc.mount.entry"
STYLES = ("raw", "dev")
NODE_TYPES = ("c", "b", "d")
# fs/char_dev.c: CHRDEV_MAJOR_DYN_END..CHRDEV_MAJOR_MAX-1 and CHRDEV_MAJOR_DYN_EXT_END..START.
DYNAMIC_CHAR_MAJOR_RANGES = ((234, 254), (384, 511))
FAMILY_UVM = "nvidia-uvm"
FAMILY_CAPS = "nvidia-caps"
# By name, in /dev or a directory below it (a node may be bound from e.g. /dev/gpu-kit/nvidia-uvm).
_NVIDIA_DYNAMIC_SOURCE_RE = re.compile(r"^/dev/(?:[^/]+/)*nvidia-(uvm|uvm-tools|caps)(/.*)?\Z")
# The family of a node by the last parts of its path (a host path, a copy's path or a mount target).
_FAMILY_PATH_RES = (
    (FAMILY_UVM, re.compile(r"(?:^|/)nvidia-uvm(?:-tools)?\Z")),
    (FAMILY_CAPS, re.compile(r"(?:^|/)nvidia-caps(?:/nvidia-cap\d+)?\Z")),
)
# The family a comment speaks of ("# nvidia-uvm, nvidia-uvm-tools", "# NVIDIA UVM", "# nvidia-caps").
_FAMILY_WORD_RES = (
    (FAMILY_UVM, re.compile(r"uvm", re.IGNORECASE)),
    (FAMILY_CAPS, re.compile(r"nvidia-cap|\bcaps?\b", re.IGNORECASE)),
)
_ALLOW_RULE_RE = re.compile(r"^([cb])\s+(\d+):(\*|\d+)\s+rwm(\s+#.*)?\Z")
_MODE_RE = re.compile(r"^0[0-7]{3}\Z")


class PassthroughConflict(ValueError):
    """The config binds something onto the nodes' place that the plan cannot take over safely."""


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
        return normalize_target(self.path)


class PassthroughPlan:
    """The planned document and the changes that lead to it."""

    def __init__(self, document, changes):
        self.document = document
        self.changes = changes

    @property
    def changed(self):
        return bool(self.changes)


class AllowRule:
    """An allow line of one of our shapes: ``minor`` is None for ``*``; ``comment`` keeps an inline comment verbatim."""

    __slots__ = ("entry", "type", "major", "minor", "comment")

    def __init__(self, entry, node_type, major, minor, comment):
        self.entry = entry
        self.type = node_type
        self.major = major
        self.minor = minor
        self.comment = comment

    @property
    def key(self):
        return self.entry.key


class MountEntry:
    """A parsed ``lxc.mount.entry``: its source, normalised target and options."""

    __slots__ = ("entry", "source", "target", "options")

    def __init__(self, entry, source, target, options):
        self.entry = entry
        self.source = source
        self.target = target
        self.options = options

    @property
    def is_bind(self):
        return bool(set(self.options.split(",")) & {"bind", "rbind"})

    def with_source(self, source):
        """The entry's value with another source, everything after the source as written."""
        return source + self.entry.value[len(self.source):]


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


def parse_allow_rule(value):
    """``(type, major, minor, comment)`` for an allow value of one of our shapes, else None.

    ``minor`` is None for ``*``; ``comment`` is the inline comment with the blanks before it, or "".
    """
    match = _ALLOW_RULE_RE.match(value)
    if not match:
        return None
    minor = None if match.group(3) == "*" else int(match.group(3))
    return match.group(1), int(match.group(2)), minor, match.group(4) or ""


def parse_allow(value):
    """``(type, major)`` for an all-minors allow value (``c <major>:* rwm``, an inline comment allowed), else None."""
    parsed = parse_allow_rule(value)
    if parsed is None or parsed[2] is not None:
        return None
    return parsed[0], parsed[1]


def allow_value(node_type, major):
    return "%s %d:* rwm" % (node_type, major)


def mount_value(node):
    create = "dir" if node.type == "d" else "file"
    return "%s %s none bind,optional,create=%s" % (node.path, node.mount_target, create)


def normalize_target(target):
    """A mount target as LXC resolves it below the rootfs: ``/dev/nvidia0``, ``dev/nvidia0`` and ``dev//nvidia0/`` are one."""
    normalized = posixpath.normpath("/" + target).lstrip("/")
    return "" if normalized == "." else normalized


def mount_source_target(value):
    fields = value.split()
    if len(fields) < 2:
        return None, None
    return fields[0], normalize_target(fields[1])


def parse_mount(entry):
    """A :class:`MountEntry` for an ``lxc.mount.entry`` LxcEntry, or None when it has no source and target."""
    fields = entry.value.split()
    if len(fields) < 2:
        return None
    return MountEntry(entry, fields[0], normalize_target(fields[1]), fields[3] if len(fields) > 3 else "")


def family_of_path(path):
    """``nvidia-uvm`` or ``nvidia-caps`` for a path (or mount target) of such a node, else None."""
    for family, pattern in _FAMILY_PATH_RES:
        if pattern.search(path or ""):
            return family
    return None


def families_named(text):
    """The NVIDIA dynamic-major families a comment speaks of."""
    return set(family for family, pattern in _FAMILY_WORD_RES if pattern.search(text or ""))


def is_nvidia_dynamic_source(path):
    """True for the NVIDIA nodes whose majors are dynamic (uvm, uvm-tools, caps)."""
    return bool(_NVIDIA_DYNAMIC_SOURCE_RE.match(path or ""))


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


def _mount_entries(document):
    return [mount for mount in (parse_mount(entry) for entry in document.lxc_entries(MOUNT_KEY)) if mount is not None]


def _allow_rules(document):
    """Our allow rules of both keys, in file order."""
    rules = []
    for entry in document.lxc_entries():
        if entry.key not in ALLOW_KEYS.values():
            continue
        parsed = parse_allow_rule(entry.value)
        if parsed is not None:
            rules.append(AllowRule(entry, *parsed))
    return rules


def _passed_families(document):
    """The NVIDIA dynamic-major families the main section passes (mount sources and targets, dev[n] paths)."""
    families = set()
    for mount in _mount_entries(document):
        for path in (mount.source, mount.target):
            family = family_of_path(path)
            if family:
                families.add(family)
    for device in _devices_or_empty(document):
        family = family_of_path(device.path)
        if family:
            families.add(family)
    return families


def _passes_dynamic_nvidia(document):
    for mount in _mount_entries(document):
        if is_nvidia_dynamic_source(mount.source) or is_nvidia_dynamic_source("/" + mount.target):
            return True
    return any(is_nvidia_dynamic_source(device.path) for device in _devices_or_empty(document))


def _devices_or_empty(document):
    try:
        return document.devices()
    except ValueError:
        return []


def _stale_rules(document, nodes, protected_majors):
    """Allow rules (either key, per-minor or wildcard) that are ours and stale; see the module docstring."""
    if not _passes_dynamic_nvidia(document):
        return []
    discovered = set(node.major for node in nodes if node.type in ("c", "b"))
    return [rule for rule in _allow_rules(document)
            if rule.type == "c" and rule.major not in discovered and rule.major not in protected_majors and is_dynamic_char_major(rule.major)]


def _same_device(source_nodes, path, node):
    info = (source_nodes or {}).get(path)
    return info is not None and node.type != "d" and tuple(info) == (node.type, node.major, node.minor)


# -- mounts ---------------------------------------------------------------------------------------


def _plan_mounts(document, nodes, source_nodes):
    """Decide, per node, to keep, repoint or add a mount entry (nothing is applied yet).

    Returns ``(actions, copies)``: actions in order (``("update"|"remove"|"add", MountEntry or None, value, reason)``)
    and ``copies`` {old major: {family}} for the per-container copies that the stat shows with another major.
    """
    mounts = _mount_entries(document)
    sources = dict((id(mount.entry.line), mount.source) for mount in mounts)  # as planned so far
    actions = []
    copies = {}

    def note_copy(path, node):
        info = (source_nodes or {}).get(path)
        family = family_of_path(node.path)
        if info and info[0] == "c" and info[1] != node.major and family:
            copies.setdefault(info[1], set()).add(family)

    def repoint(mount, source, reason, node=None):
        line_id = id(mount.entry.line)
        if sources[line_id] == source:
            return
        if sources[line_id] != mount.source:
            raise PassthroughConflict("%s: %s would need two different sources" % (MOUNT_KEY, mount.entry.value))
        sources[line_id] = source
        # A bind keeps its own options; anything else mounted there (a tmpfs, ...) becomes the node's bind.
        value = mount.with_source(source) if mount.is_bind or node is None else mount_value(node)
        actions.append(("update", mount, value, reason))

    for node in nodes:
        target = node.mount_target
        onto = [mount for mount in mounts if mount.target == target]
        if onto:
            keep = next((mount for mount in onto if mount.source == node.path), None)
            if keep is None:
                keep = next((mount for mount in onto if _same_device(source_nodes, mount.source, node)), None)
            for mount in onto:
                if mount.source != node.path:
                    note_copy(mount.source, node)
            if keep is None:
                keep = onto[0]
                repoint(keep, node.path, "%s is bound from %s, which is not the host's %s: bind the host node" % (target, keep.source, node.path), node)
            for mount in onto:
                if mount is not keep:
                    actions.append(("remove", mount, None, "a second mount onto %s (the one kept: %s)" % (target, keep.entry.value)))
            continue
        around = [mount for mount in mounts if mount.is_bind and mount.target and target.startswith(mount.target + "/")]
        if around:
            mount = max(around, key=lambda candidate: len(candidate.target))
            rest = target[len(mount.target) + 1:]
            host_path = sources[id(mount.entry.line)].rstrip("/") + "/" + rest
            if host_path == node.path or _same_device(source_nodes, host_path, node):
                continue
            note_copy(host_path, node)
            if "/" in rest or mount.target == "dev" or not node.path.endswith("/" + rest):
                raise PassthroughConflict(
                    "%s would be mounted inside the bind mount '%s: %s', which shows %s there; bind %s itself or remove that entry"
                    % (node.path, MOUNT_KEY, mount.entry.value, host_path, node.path))
            host_dir = node.path[:-len(rest) - 1]
            repoint(mount, host_dir, "%s shows %s at %s, not the host's %s: bind the host directory %s"
                    % (mount.target, host_path, target, node.path, host_dir))
            continue
        actions.append(("add", None, mount_value(node), "bind-mount %s" % node.path))
    return actions, copies


def _apply_mounts(document, actions, changes):
    for action, mount, value, reason in actions:
        if action == "update":
            document.replace_lxc(mount.entry, MOUNT_KEY, value)
            changes.append(_change("update", MOUNT_KEY, value, mount.entry.value, reason))
        elif action == "remove":
            document.remove_lxc(mount.entry)
            changes.append(_change("remove", MOUNT_KEY, old_value=mount.entry.value, reason=reason))
        else:
            document.add_lxc(MOUNT_KEY, value)
            changes.append(_change("add", MOUNT_KEY, value, reason=reason))


# -- which stale major belonged to which node -----------------------------------------------------


def _family_majors(nodes):
    """{family: its current major} for the families among the discovered nodes (one dynamic major each)."""
    majors = {}
    for node in nodes:
        family = family_of_path(node.path)
        if family and node.type == "c":
            majors.setdefault(family, set()).add(node.major)
    return dict((family, found.pop()) for family, found in majors.items() if len(found) == 1 and is_dynamic_char_major(next(iter(found))))


def _paragraph(lines, position):
    """The lines around ``position`` up to the blank lines (or section ends) on either side."""
    start = position
    while start > 0 and lines[start - 1].kind != BLANK:
        start -= 1
    end = position
    while end + 1 < len(lines) and lines[end + 1].kind != BLANK:
        end += 1
    return lines[start:end + 1]


def _paragraph_family(document, rule):
    """The one family a rule's paragraph passes, when no other dynamic major is allowed in that paragraph."""
    lines = document.main.lines
    position = next(index for index, line in enumerate(lines) if line is rule.entry.line)
    families = set()
    majors = set()
    for line in _paragraph(lines, position):
        if line.kind == LXC and line.key == MOUNT_KEY:
            fields = line.value.split()
            for path in fields[:1] + [normalize_target(field) for field in fields[1:2]]:
                family = family_of_path(path)
                if family:
                    families.add(family)
        elif line.kind == LXC and line.key in ALLOW_KEYS.values():
            parsed = parse_allow_rule(line.value)
            if parsed is not None and is_dynamic_char_major(parsed[1]):
                majors.add(parsed[1])
        elif line.kind == OPTION and re.match(r"^dev\d+\Z", line.key):
            family = family_of_path(line.value.split(",")[0].replace("path=", "", 1))
            if family:
                families.add(family)
    if majors == set([rule.major]) and len(families) == 1:
        return families.pop()
    return None


def _comment_family(document, rule):
    """The one family named by the rule's inline comment or by the comment line right above it."""
    named = families_named(rule.comment)
    lines = document.main.lines
    position = next(index for index, line in enumerate(lines) if line is rule.entry.line)
    if position > 0 and lines[position - 1].kind == COMMENT:
        named |= families_named(lines[position - 1].value)
    return named.pop() if len(named) == 1 else None


def _tie_stale_majors(document, nodes, stale, copies, present, family_majors, source_nodes):
    """{old major: (family, how)} for the stale majors that something in the config ties to one node family."""
    family_minors = {}
    for node in nodes:
        family = family_of_path(node.path)
        if family and node.minor is not None:
            family_minors.setdefault(family, set()).add(node.minor)
    evidence = {}
    for rule in stale:
        votes = evidence.setdefault(rule.major, {})
        for family in copies.get(rule.major, ()):
            votes.setdefault(family, "a per-container copy of the node had this major")
        family = _comment_family(document, rule)
        if family:
            votes.setdefault(family, "its comment names %s" % family)
        family = _paragraph_family(document, rule)
        if family:
            votes.setdefault(family, "it stands with the %s entries" % family)
    for major in evidence:
        minors = set(rule.minor for rule in stale if rule.major == major and rule.minor is not None)
        owners = [family for family, known in family_minors.items() if minors and minors <= known]
        if len(owners) == 1:
            evidence[major].setdefault(owners[0], "its minors %s are %s's" % (", ".join(str(minor) for minor in sorted(minors)), owners[0]))
    ties = dict((major, next(iter(votes.items()))) for major, votes in evidence.items() if len(votes) == 1)
    if any(len(votes) > 1 for votes in evidence.values()):
        return ties  # the config contradicts itself: no guessing on top of that

    # Elimination: the one stale major nothing tied belonged to the one passed family that still lacks its line.
    untied = [major for major in evidence if major not in ties]
    tied_families = set(family for family, _how in ties.values())
    passed = _passed_families(document)
    lacking = [family for family in sorted(passed) if family in family_majors and ("c", family_majors[family]) not in present
               and family not in tied_families]
    gone = [family for family in passed - set(family_majors) if _family_known_absent(document, family, source_nodes)]
    if len(untied) == 1 and len(lacking) == 1 and not gone:
        ties[untied[0]] = (lacking[0], "%s is the only NVIDIA node the config passes that lacks its line" % lacking[0])
    return ties


def _family_known_absent(document, family, source_nodes):
    """True when the caller's stat found none of the host paths the config passes for ``family``."""
    if not source_nodes:
        return False
    paths = [mount.source for mount in _mount_entries(document) if family_of_path(mount.source) == family]
    paths += [device.path for device in _devices_or_empty(document) if family_of_path(device.path) == family]
    return bool(paths) and all(path in source_nodes and source_nodes[path] is None for path in paths)


# -- styles ---------------------------------------------------------------------------------------


def _plan_raw(document, nodes, allow_key, protected_majors, remove_other_style, source_nodes, changes):
    wanted = _wanted_majors(nodes)
    mount_actions, copies = _plan_mounts(document, nodes, source_nodes)
    stale = _stale_rules(document, nodes, protected_majors)
    stale_ids = set(id(rule.entry.line) for rule in stale)
    rules = _allow_rules(document)
    present = set((rule.type, rule.major) for rule in rules
                  if rule.key == allow_key and rule.minor is None and id(rule.entry.line) not in stale_ids)
    family_majors = _family_majors(nodes)
    ties = _tie_stale_majors(document, nodes, stale, copies, present, family_majors, source_nodes)

    written = set()
    for rule in rules:
        value = rule.entry.value
        if id(rule.entry.line) in stale_ids:
            family, how = ties.get(rule.major, (None, None))
            current = ("c", family_majors[family]) if family in family_majors else None
            if rule.key == allow_key and current and current not in present and current not in written:
                written.add(current)
                new_value = allow_value(*current) + rule.comment
                document.replace_lxc(rule.entry, allow_key, new_value)
                changes.append(_change("update", allow_key, new_value, value, "stale dynamic major %d was %s's (%s); %s is on %d now"
                                       % (rule.major, family, how, family, current[1])))
            elif family:
                now = "its line for %d is there" % current[1] if current else "it is not among the discovered nodes"
                document.remove_lxc(rule.entry)
                changes.append(_change("remove", rule.key, old_value=value,
                                       reason="stale dynamic major %d was %s's (%s); %s" % (rule.major, family, how, now)))
            else:
                document.remove_lxc(rule.entry)
                changes.append(_change("remove", rule.key, old_value=value,
                                       reason="stale dynamic major: no discovered or otherwise passed node has it, and nothing ties it to one"))
        elif rule.key == allow_key and rule.minor is not None and (rule.type, rule.major) in wanted:
            document.remove_lxc(rule.entry)
            changes.append(_change("remove", rule.key, old_value=value, reason="covered by %s" % allow_value(rule.type, rule.major)))
    for node_type, major in wanted:
        if (node_type, major) not in present and (node_type, major) not in written:
            value = allow_value(node_type, major)
            document.add_lxc(allow_key, value)
            changes.append(_change("add", allow_key, value, reason="allow the discovered major %d" % major))

    _apply_mounts(document, mount_actions, changes)

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
        stale_ids = set(id(rule.entry.line) for rule in _stale_rules(document, nodes, protected_majors))
        targets = dict((node.mount_target, node.path) for node in nodes)
        for mount in _mount_entries(document):
            if mount.target in targets:
                document.remove_lxc(mount.entry)
                changes.append(_change("remove", MOUNT_KEY, old_value=mount.entry.value,
                                       reason="%s is passed as dev[n] (style dev)" % targets[mount.target]))
        discovered = set((node.type, node.major) for node in nodes if node.major not in protected_majors)
        for rule in _allow_rules(document):
            if (rule.minor is None and (rule.type, rule.major) in discovered) or id(rule.entry.line) in stale_ids:
                document.remove_lxc(rule.entry)
                changes.append(_change("remove", rule.key, old_value=rule.entry.value,
                                       reason="Proxmox allows the majors of dev[n] nodes itself (style dev)"))


def _as_entry_options(parsed):
    return {"path": parsed["path"], "gid": parsed["gid"], "uid": parsed["uid"], "mode": parsed["mode"], "deny_write": parsed["deny_write"]}


def plan_passthrough(document, devices, style="raw", cgroup_version="v2", dev_defaults=None, protected_majors=(), remove_other_style=True,
                     source_nodes=None):
    """Plan the passthrough of ``devices`` into ``document`` (an LxcConfig, left untouched).

    ``devices``: dicts as discovered (see :func:`normalize_devices`) or DeviceNode objects.
    ``dev_defaults``: gid/uid/mode/deny_write for dev entries whose node does not set its own.
    ``protected_majors``: majors of the other devices the container passes (their allow rules are never stale).
    ``source_nodes``: what the caller's stat of the host paths that mount entries bind says, ``{path: (type, major,
    minor)}`` for a device node, ``("d", None, None)`` for a directory, None for a missing path; paths not in it are
    unknown. It tells a per-container copy of a node from a stale one.
    Returns a :class:`PassthroughPlan`. Raises ValueError (PassthroughConflict for a mount the plan cannot take over).
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
        _plan_raw(document, nodes, ALLOW_KEYS[cgroup_version], protected, remove_other_style, source_nodes, changes)
    else:
        _plan_dev(document, nodes, dict(dev_defaults or {}), protected, remove_other_style, changes)
    return PassthroughPlan(document, changes)
