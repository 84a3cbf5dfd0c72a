# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Mount points ``mp[n]``: bind mounts of a host directory are realised as LXC mount entries; storage-backed and
device mount points are not implemented and say so wherever PVE would allocate or mount them."""
from __future__ import annotations

import os
import re

from pve_sim import schema
from pve_sim.tasks import TaskFailed


class NotImplementedMount(ValueError):
    """A mount point pve-sim does not realise (the text says which and what to use instead)."""


def classify(volume):
    """PVE::LXC::Config::classify_mountpoint: 'device' (/dev/...), 'bind' (another absolute path) or 'volume'."""
    if volume.startswith("/"):
        return "device" if volume.startswith("/dev/") else "bind"
    return "volume"


def mount_point_keys(config_keys):
    """The mpN keys, in PVE's order (mp0, mp1, ...: mount a parent before what is mounted below it)."""
    return sorted((key for key in config_keys if re.match(r"^mp\d+$", key)), key=lambda key: int(key[2:]))


def parse(key, value):
    """The items of an mpN value, or TaskFailed as PVE's parser dies."""
    try:
        return schema.parse_mp(value)
    except schema.FormatError as error:
        raise TaskFailed("unable to parse value of '%s' - %s" % (key, str(error).strip())) from None


def check_supported(key, value):
    """NotImplementedMount for a mount point pve-sim cannot realise; nothing for a bind mount."""
    volume = parse(key, value)["volume"]
    kind = classify(volume)
    if kind == "bind":
        return
    what = "device mount points" if kind == "device" else "storage-backed mount points"
    raise NotImplementedMount("pve-sim does not implement %s (%s: %s): use a bind mount of a host directory, %s: /host/dir,mp=/path"
                              % (what, key, value, key))


def render_mount_lines(config, is_directory=os.path.isdir):
    """``lxc.mount.entry`` lines for the bind mount points; TaskFailed with what PVE's start dies with."""
    lines = []
    for key in mount_point_keys(config.keys()):
        value = config.get(key)
        try:
            check_supported(key, value)
        except NotImplementedMount as error:
            raise TaskFailed(str(error)) from None
        items = parse(key, value)
        volume, path = items["volume"], items["mp"]
        # PVE::LXC::mountpoint_mount for a bind mount.
        if not is_directory(volume):
            raise TaskFailed("directory '%s' does not exist" % volume)
        options = ["bind", "create=dir"]
        if schema.parse_boolean(items.get("ro", "0")):
            options.append("ro")
        if items.get("mountoptions"):
            options.extend(option for option in items["mountoptions"].split(";") if option)
        target = path.strip("/")
        if not target:
            raise TaskFailed("%s: cannot mount over the container's root directory" % key)
        lines.append("lxc.mount.entry = %s %s none %s 0 0" % (fstab_escape(volume), fstab_escape(target), ",".join(options)))
    return lines


def fstab_escape(path):
    """A path as an fstab field (LXC reads mount entries with getmntent): space, tab, newline and backslash in octal."""
    return "".join("\\%03o" % ord(char) if char in " \t\n\\" else char for char in path)
