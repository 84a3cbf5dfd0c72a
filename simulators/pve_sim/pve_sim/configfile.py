# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Container configs in PVE's file format, read and written with the collection's own parser.

There is one implementation of the format: plugins/module_utils/pve_lxc_config.py. It is imported
from the installed collection when that is importable, otherwise by file path from the checkout
this simulator ships in (or from PVE_SIM_MODULE_UTILS).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

_CHECKOUT_MODULE_UTILS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "plugins", "module_utils")


def _load_parser():
    try:
        from ansible_collections.llmops.serving.plugins.module_utils import pve_lxc_config  # pylint: disable=import-outside-toplevel
        return pve_lxc_config
    except ImportError:
        pass
    candidates = [os.environ.get("PVE_SIM_MODULE_UTILS"), _CHECKOUT_MODULE_UTILS]
    # An installed collection (ansible-galaxy collection install) outside sys.path.
    roots = (os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS") or "").split(os.pathsep)
    roots += [os.path.expanduser("~/.ansible/collections"), "/usr/share/ansible/collections"]
    candidates += [os.path.join(root, "ansible_collections", "llmops", "serving", "plugins", "module_utils") for root in roots if root]
    paths = [os.path.normpath(os.path.join(directory, "pve_lxc_config.py")) for directory in candidates if directory]
    found = [path for path in paths if os.path.isfile(path)]
    if not found:
        raise ImportError("pve_lxc_config.py not found (looked in %s); set PVE_SIM_MODULE_UTILS to the collection's plugins/module_utils"
                          % ", ".join(paths))
    path = found[0]
    spec = importlib.util.spec_from_file_location("pve_sim_pve_lxc_config", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pve_lxc_config = _load_parser()


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
    """(LxcConfig, raw text, digest)."""
    raw = read_raw(config_dir, vmid)
    return pve_lxc_config.parse(raw), raw, digest_of(raw)


def write_atomic(config_dir, vmid, text):
    path = config_path(config_dir, vmid)
    temporary = "%s.tmp.%d" % (path, os.getpid())
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def render_new(options, description=None):
    """A fresh config as PVE's write_pct_config prints it: description comments, then sorted keys."""
    config = pve_lxc_config.parse("")
    for key in sorted(options):
        config.set(key, str(options[key]))
    text = config.render()
    if description:
        comments = "".join("#%s\n" % encode_description_line(line) for line in description.split("\n"))
        text = comments + text
    return text


def encode_description_line(line):
    """PVE::Tools::encode_text for one description line (only what PVE escapes: % and control characters)."""
    out = []
    for char in line:
        if char == "%" or ord(char) < 32:
            out.append("%%%02X" % ord(char))
        else:
            out.append(char)
    return "".join(out)


def set_description(config, description):
    """Replace the description comments of the main section (they come first in the file)."""
    lines = config.main.lines
    keep = [line for line in lines if line.kind != pve_lxc_config.COMMENT]
    comments = []
    if description:
        for text in description.split("\n"):
            encoded = encode_description_line(text)
            comments.append(pve_lxc_config.ConfigLine(pve_lxc_config.COMMENT, "#" + encoded, value=encoded))
    lines[:] = comments + keep


def api_view(config, digest):
    """What GET /nodes/{node}/lxc/{vmid}/config returns: options, description, lxc pairs, digest."""
    result = {}
    for key in config.keys():
        value = config.get(key)
        result[key] = _typed(key, value)
    description = config.description
    if description:
        result["description"] = description
    pairs = [[entry.key, entry.value] for entry in config.lxc_entries()]
    if pairs:
        result["lxc"] = pairs
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
