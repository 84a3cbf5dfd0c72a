# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which character devices a Proxmox/LXC container config lets the container open, and the majors the kernel gave
the NVIDIA drivers (``/proc/devices``); and the one way both read such a file (a regular file only, never blocking).

The one reader of these two formats for the GPU preflight (a module) and the node's boot check (a script pve_gpu_host
installs beside this file and runs before the guests start). Standard library only, no ``ansible_collections``
imports: the boot check imports it as a plain file.
"""

from __future__ import annotations

import os
import re
import stat

_DEVICE_ALLOW = re.compile(r"^lxc\.cgroup2?\.devices\.allow\s*[:=]\s*(?P<rule>.*)$")
_PVE_DEV = re.compile(r"^dev(?P<n>\d+)\s*:\s*(?:path=)?(?P<path>[^,\s]+)")
_ALLOW_RULE = re.compile(r"^(?P<type>[abc])(?:\s+(?P<major>\*|\d+):(?P<minor>\*|\d+))?")
# The NVIDIA GPU nodes' fixed major (nvidia0.., nvidiactl, nvidia-modeset); nvidia-uvm's is dynamic.
NVIDIA_MAJOR = 195
CONFIG_NAME = re.compile(r"^(?P<vmid>\d+)\.conf$")


def read_regular_text(path, limit):
    """The first ``limit`` bytes of a regular file as text (undecodable bytes replaced); None when it cannot be read or
    is not a regular file. Opened without blocking and checked on the open descriptor, so a FIFO or a device put there
    (even between a check and the open) is never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = None
            return handle.read(limit).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    finally:
        if fd is not None:
            os.close(fd)


def parse_proc_devices(text):
    """``{name: major}`` of the character devices in ``/proc/devices``."""
    majors = {}
    section = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.endswith("devices:"):
            section = stripped
            continue
        if section == "Character devices:":
            parts = stripped.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit():
                majors.setdefault(parts[1], int(parts[0]))
    return majors


def parse_container_config(text):
    """The device rules of an LXC or PVE container config's main section: ``{"allow": [(rule, line)], "dev":
    [(path, line)], "mounts": [line]}``; snapshot sections (from the first ``[``) are ignored."""
    result = {"allow": [], "dev": [], "mounts": []}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            break
        allow = _DEVICE_ALLOW.match(stripped)
        if allow:
            result["allow"].append((allow.group("rule").strip(), line))
            continue
        dev = _PVE_DEV.match(stripped)
        if dev:
            result["dev"].append((dev.group("path"), line))
            continue
        if stripped.startswith("lxc.mount.entry") and "nvidia" in stripped:
            result["mounts"].append(line)
    return result


def allows_major(config, major):
    """True when an allow rule covers character devices of ``major`` (``a``, ``c *:*``, ``c <major>:*``...)."""
    for rule, _line in config["allow"]:
        match = _ALLOW_RULE.match(rule)
        if not match:
            continue
        if match.group("type") == "a" or (match.group("type") == "c" and match.group("major") in (None, "*", str(major))):
            return True
    return False


def allowed_char_majors(config):
    """The majors named by the config's ``c <major>:<minor>`` allow rules, in order (``*`` left out)."""
    majors = []
    for rule, _line in config["allow"]:
        match = _ALLOW_RULE.match(rule)
        if match and match.group("type") == "c" and (match.group("major") or "*").isdigit():
            major = int(match.group("major"))
            if major not in majors:
                majors.append(major)
    return majors


def passes_path(config, path):
    """True when a PVE ``devN:`` entry passes ``path`` (PVE looks its major up at every start)."""
    return any(dev_path == path for dev_path, _line in config["dev"])


def passes_gpus(config):
    """True when the config gives the container NVIDIA devices at all: a ``devN:`` entry for an nvidia* node, an allow
    rule for the GPUs' major 195, or an nvidia mount entry."""
    return (any(dev_path.rsplit("/", 1)[-1].startswith("nvidia") for dev_path, _line in config["dev"])
            or NVIDIA_MAJOR in allowed_char_majors(config) or bool(config["mounts"]))


def uvm_access(config, major, uvm_path="/dev/nvidia-uvm"):
    """How the container reaches the uvm node with the current ``major``: ``"dev"`` (a devN entry), ``"allow"`` (an
    allow rule covers the major) or None (it cannot: a stale major or no rule at all)."""
    if passes_path(config, uvm_path):
        return "dev"
    if allows_major(config, major):
        return "allow"
    return None
