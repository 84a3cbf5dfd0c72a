# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Container configs on the simulated node: the files under etc/pve/lxc, read and written with pve_sim.pct_config."""
from __future__ import annotations

import hashlib
import os

from pve_sim import pct_config


class ConfigMissing(Exception):
    """The container has no config file."""


def config_path(config_dir, vmid):
    return os.path.join(config_dir, "%d.conf" % int(vmid))


def read_raw(config_dir, vmid):
    path = config_path(config_dir, vmid)
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except FileNotFoundError:
        raise ConfigMissing(path) from None


def digest_of(raw):
    """PVE's digest: sha1 hex of the raw file (parse_pct_config)."""
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()


def load(config_dir, vmid):
    """(PctConfig, raw text, digest)."""
    raw = read_raw(config_dir, vmid)
    return pct_config.parse(raw), raw, digest_of(raw)


def write_atomic(config_dir, vmid, text):
    path = config_path(config_dir, vmid)
    temporary = "%s.tmp.%d" % (path, os.getpid())
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def api_view(config, digest):
    """What GET /nodes/{node}/lxc/{vmid}/config returns: options, description, lxc pairs, digest."""
    result = {}
    for key in config.keys():
        value = config.get(key)
        result[key] = _typed(key, value)
    if config.description:
        result["description"] = config.description
    if config.lxc:
        result["lxc"] = [[key, value] for key, value in config.lxc]
    result["digest"] = digest
    return result


_INTEGER_KEYS = ("cores", "memory", "swap", "cpuunits", "tty", "onboot", "unprivileged", "protection", "template", "console", "debug")


def _typed(key, value):
    """pvesh/JSON types: integers and booleans are numbers in the API answer."""
    if key in _INTEGER_KEYS and value.isdigit():
        return int(value)
    if key == "cpulimit":
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return value
    return value
