# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unprivileged containers: the id map, host ids of container ids, and the rootfs shifted into the map.

After pve-container's PVE::LXC::parse_id_maps and map_ct_id_to_host (src/PVE/LXC.pm). PVE restores a template
through the map (restore_tar_archive_command runs tar under lxc-usernsexec, so container uid 0 is written as host
uid 100000); pve-sim extracts as host root and then shifts every owner (shift_rootfs), with the same result on disk.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess

from pve_sim import schema
from pve_sim.tasks import TaskFailed

# parse_id_maps' default ("Should we read them from /etc/subuid?"): what update_lxc_config writes as lxc.idmap.
DEFAULT_ID_MAP = (("u", 0, 100000, 65536), ("g", 0, 100000, 65536))
_IDMAP_RE = re.compile(r"^([ug])\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def has_custom_id_map(config):
    """A raw ``lxc.idmap`` line (PVE::LXC::Config::has_lxc_entry): a custom map, which replaces the default one."""
    return any(entry.key == "lxc.idmap" for entry in config.lxc_entries())


def is_unprivileged(config):
    """update_lxc_config's ``$conf->{unprivileged} || $custom_idmap``."""
    return schema.parse_boolean(config.get("unprivileged") or "0") or has_custom_id_map(config)


def parse_id_maps(unprivileged, lxc_entries=()):
    """(id map, root uid, root gid) as parse_id_maps returns them: the raw ``lxc.idmap`` lines, else the default map
    for an unprivileged container, else no map (a privileged container: ids are host ids, root is 0)."""
    id_map, root_uid, root_gid = [], 0, 0
    for entry in lxc_entries:
        if entry.key != "lxc.idmap":
            continue
        match = _IDMAP_RE.match(entry.value)
        if not match:
            raise TaskFailed("failed to parse idmap: %s" % entry.value)
        kind, inside, host, length = match.group(1), int(match.group(2)), int(match.group(3)), int(match.group(4))
        id_map.append((kind, inside, host, length))
        if inside == 0:
            if kind == "u":
                root_uid = host
            else:
                root_gid = host
    if not id_map and unprivileged:
        id_map = list(DEFAULT_ID_MAP)
        root_uid = root_gid = DEFAULT_ID_MAP[0][2]
    return id_map, root_uid, root_gid


def config_id_maps(config):
    """parse_id_maps of a container config (a PctConfig)."""
    return parse_id_maps(schema.parse_boolean(config.get("unprivileged") or "0"), config.lxc_entries())


def map_to_host(value, id_map, kind):
    """map_ct_id_to_host: the host id of container id ``value`` (``kind`` 'u' or 'g'); unmapped ids stay as they are."""
    for entry_kind, inside, host, length in id_map:
        if entry_kind == kind and inside <= value < inside + length:
            return host - inside + value
    return value


def _host_id(value, id_map, kind, path, rootfs, resume):
    for entry_kind, inside, host, length in id_map:
        if entry_kind == kind and resume and host <= value < host + length:
            return value  # shifted by an earlier, interrupted run
        if entry_kind == kind and inside <= value < inside + length:
            return host - inside + value
    # tar in PVE's user namespace cannot chown to an id outside the map either: the restore fails.
    raise TaskFailed("%s %d of /%s is outside the container's id map"
                     % ("uid" if kind == "u" else "gid", value, os.path.relpath(path, rootfs).lstrip(".")))


def shift_rootfs(rootfs, id_map, resume=False):
    """Give every file below ``rootfs`` (and ``rootfs`` itself, last) the host owner and group that the id map gives
    its container ids; returns how many were changed. Symlinks are never followed (lchown; os.walk does not descend
    into them); a file with several hard links is shifted once; setuid/setgid bits, which chown clears on files, are
    set again. Extended attributes need no shift: the extraction does not restore any (no file capabilities to
    re-map). ``resume``: ids already in the map's host ranges are left as they are (see LxcRuntime.upgrade_rootfs)."""
    if not id_map:
        return 0
    seen = set()
    changed = 0

    def shift(path, info):
        nonlocal changed
        if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
            if (info.st_dev, info.st_ino) in seen:
                return
            seen.add((info.st_dev, info.st_ino))
        uid = _host_id(info.st_uid, id_map, "u", path, rootfs, resume)
        gid = _host_id(info.st_gid, id_map, "g", path, rootfs, resume)
        if (uid, gid) == (info.st_uid, info.st_gid):
            return
        os.chown(path, uid, gid, follow_symlinks=False)
        if not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(info.st_mode))
        changed += 1

    for directory, dirs, files in os.walk(rootfs):
        for name in dirs + files:
            path = os.path.join(directory, name)
            shift(path, os.lstat(path))
    # The top last: its owner says whether the whole tree is done.
    shift(rootfs, os.lstat(rootfs))
    return changed


# Run as the container's root: prints the first of its arguments (the directories above a path, top down) that this
# user cannot search (resolving D/. needs search permission on D), or nothing.
_SEARCH_PROBE = 'for directory; do if [ ! -e "$directory/." ]; then printf "%s\\n" "$directory"; exit 0; fi; done'


def unreachable(paths, uid, gid):
    """{path: the directory that stops it} for those of ``paths`` that host uid ``uid``/gid ``gid`` cannot look up
    (search permission on every directory above the path; the path itself is not checked).

    LXC mounts the rootfs and every lxc.mount.entry of an unprivileged container from inside its user namespace, as
    that uid: a directory on the way without search permission for it (a 0700 parent) makes the start fail. Checked
    by a shell running as that user (no supplementary groups), so ACLs count as the kernel counts them."""
    found = {}
    for path in paths:
        parts = [part for part in os.path.abspath(path).split("/") if part]
        directories = ["/"] + ["/" + "/".join(parts[:depth + 1]) for depth in range(len(parts) - 1)]
        result = subprocess.run(["/bin/sh", "-c", _SEARCH_PROBE, "sh"] + directories, user=uid, group=gid, extra_groups=[],
                                capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise TaskFailed("cannot check %s as uid %d: %s" % (path, uid, result.stderr.strip()))
        if result.stdout.strip():
            found[path] = result.stdout.strip()
    return found
