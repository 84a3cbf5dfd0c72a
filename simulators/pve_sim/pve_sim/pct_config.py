# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PVE's container config format (/etc/pve/lxc/<vmid>.conf, pct.conf(5)), read and written the way a node does.

The simulator's own implementation, written after pve-container's ``parse_pct_config`` and ``write_pct_config``
(src/PVE/LXC/Config.pm) and NOT shared with the collection's parser (plugins/module_utils/pve_lxc_config.py), so
that the simulator is an independent check of that parser (tests/unit/simulators/test_pve_sim_pct_config.py runs
both over the same public samples).

Like PVE, it reads a file into values and writes the values back in PVE's canonical order (description comments,
sorted options, raw ``lxc.*`` lines, ``[pve:pending]``, snapshots by name): a file PVE wrote comes back byte for
byte, a hand-edited one comes back as PVE would rewrite it (comments moved to the top, blank lines gone).

Reading, per section: blank lines are skipped; ``#`` lines are the description (URL-encoded, one line each);
``description: ...`` adds to it too; ``lxc.<key>: value`` or ``lxc.<key> = value`` lines are raw LXC keys kept in
order; ``delete: ...`` is only valid in ``[pve:pending]``; ``key: value`` lines are options (the last one wins);
``[pve:pending]`` and ``[snapname]`` start sections. Lines that match nothing are dropped, as PVE drops them with a
warning. Pure functions and objects: no I/O.
"""
from __future__ import annotations

import collections
import re

MAX_DEVICES = 256  # pve-container's $MAX_DEVICES: dev0 .. dev255

_BLANK = re.compile(r"^\s*$")
_PENDING_HEADER = re.compile(r"^\[pve:pending\]\s*$", re.IGNORECASE)
_SNAPSHOT_HEADER = re.compile(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", re.IGNORECASE)
_COMMENT = re.compile(r"^#(.*)$")
_RAW_LXC = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$")
_DESCRIPTION = re.compile(r"^description:\s*(.*\S)\s*$")
_DELETE = re.compile(r"^delete:\s*(.*\S)\s*$")
_OPTION = re.compile(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$")
_DEV_KEY = re.compile(r"^dev(\d+)$")
_PERCENT_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")

RawLxc = collections.namedtuple("RawLxc", "key value")
Device = collections.namedtuple("Device", "index key path gid uid mode deny_write")


def decode_text(text):
    """PVE::Tools::decode_text: %XX escapes to bytes (others left as they are), then UTF-8."""
    data = _PERCENT_ESCAPE.sub(lambda match: bytes([int(match.group(1), 16)]), text.encode("utf-8"))
    return data.decode("utf-8", errors="replace")


def encode_text(text):
    """PVE::Tools::encode_text: every byte of the UTF-8 text outside 0x20-0x39 and 0x3b-0x7e as %XX (so ':', control
    characters and non-ASCII; a '%' stays as it is, as on a node)."""
    return "".join(chr(byte) if 0x20 <= byte <= 0x39 or 0x3B <= byte <= 0x7E else "%%%02X" % byte for byte in text.encode("utf-8"))


class Section:
    """One section of the file (the current config, ``[pve:pending]`` or a snapshot): options, raw lines, description."""

    def __init__(self):
        self.options = {}
        self.lxc = []
        self.description = ""

    def get(self, key, default=None):
        return self.options.get(key, default)

    def keys(self):
        """Option keys in the order they first appear."""
        return list(self.options)

    def set(self, key, value):
        self.options[key] = value

    def remove(self, key):
        self.options.pop(key, None)

    def lxc_entries(self):
        return [RawLxc(key, value) for key, value in self.lxc]

    def devices(self):
        """The ``dev[n]`` options by index, each parsed per PVE's schema (ValueError for a malformed one)."""
        found = []
        for key, value in self.options.items():
            match = _DEV_KEY.match(key)
            if match:
                parsed = parse_device(value)
                found.append(Device(int(match.group(1)), key, parsed["path"], parsed["gid"], parsed["uid"], parsed["mode"],
                                    parsed["deny_write"]))
        return sorted(found)

    def render(self):
        """write_pct_config's generate_raw_config: description comments, sorted options, raw lines in order."""
        out = ["#%s\n" % encode_text(line) for line in _perl_split_lines(self.description)]
        for key in sorted(self.options):
            value = self.options[key]
            if "\n" in value:
                raise ValueError("detected invalid newline inside property '%s'" % key)
            out.append("%s: %s\n" % (key, value))
        out.extend("%s: %s\n" % (key, value) for key, value in self.lxc)
        return "".join(out)

    def is_empty(self):
        return not (self.options or self.lxc or self.description)


class PctConfig(Section):
    """A whole config file: the current section (this object), ``pending`` and ``snapshots`` (name -> Section)."""

    def __init__(self):
        super().__init__()
        self.pending = Section()
        self.snapshots = {}

    def render(self):
        text = super().render()
        if not self.pending.is_empty():
            text += "\n[pve:pending]\n" + self.pending.render()
        for name in sorted(self.snapshots):
            text += "\n[%s]\n" % name + self.snapshots[name].render()
        return text


def _perl_split_lines(text):
    """Perl's split(/\\n/, $text): trailing empty fields are dropped."""
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def parse(text):
    """parse_pct_config, without the type checks of each option's value (the API layer does those)."""
    config = PctConfig()
    section = config
    for line in text.split("\n"):
        if _BLANK.match(line):
            continue
        if _PENDING_HEADER.match(line):
            section = config.pending = Section()
            continue
        header = _SNAPSHOT_HEADER.match(line)
        if header:
            section = config.snapshots[header.group(1)] = Section()
            continue
        match = _COMMENT.match(line)
        if match:
            section.description += decode_text(match.group(1)) + "\n"
            continue
        match = _RAW_LXC.match(line)
        if match:
            section.lxc.append((match.group(1), match.group(2)))
            continue
        match = _DESCRIPTION.match(line)
        if match:
            section.description += decode_text(match.group(1))
            continue
        match = _DELETE.match(line)
        if match:
            if section is config.pending:
                section.options["delete"] = match.group(1)
            continue
        match = _OPTION.match(line)
        if match:
            section.options[match.group(1)] = match.group(2)
    return config


def render_new(options, description=""):
    """A new container's config as create writes it."""
    config = PctConfig()
    config.options = dict((key, str(value)) for key, value in options.items())
    config.description = description or ""
    return config.render()


_DEVICE_FORMAT = {"path": "string", "gid": "integer", "uid": "integer", "mode": "mode", "deny-write": "boolean"}
_TRUE = ("1", "on", "yes", "true")
_FALSE = ("0", "off", "no", "false")


def parse_device(value):
    """A ``dev[n]`` value as PVE::JSONSchema::parse_property_string reads it with pve-container's $dev_desc (default key
    ``path``): a dict with path, gid, uid (int or None), mode (str or None) and deny_write (bool). ValueError otherwise."""
    found = {}
    for part in value.split(","):
        if _BLANK.match(part):
            continue
        if "=" in part:
            key, item = part.split("=", 1)
            if not key or not item:
                raise ValueError("missing value in comma-separated list property")
        else:
            key, item = "path", part
        if key in found:
            raise ValueError("duplicate key in comma-separated list property: %s" % key)
        kind = _DEVICE_FORMAT.get(key)
        if kind is None:
            raise ValueError("invalid key in comma-separated list property: %s" % key)
        if kind == "integer" and not re.match(r"^\d+$", item):
            raise ValueError("%s: type check ('integer') failed - got '%s'" % (key, item))
        if kind == "mode" and not re.match(r"^0[0-7]{3}$", item):
            raise ValueError("mode: value does not match the regex pattern")
        if kind == "boolean" and item.lower() not in _TRUE + _FALSE:
            raise ValueError("%s: type check ('boolean') failed - got '%s'" % (key, item))
        found[key] = item
    if "path" not in found:
        raise ValueError("Path has to be defined")
    return {
        "path": found["path"],
        "gid": int(found["gid"]) if "gid" in found else None,
        "uid": int(found["uid"]) if "uid" in found else None,
        "mode": found.get("mode"),
        "deny_write": found.get("deny-write", "0").lower() in _TRUE,
    }
