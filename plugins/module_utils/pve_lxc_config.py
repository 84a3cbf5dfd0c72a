# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse and edit Proxmox VE container configs (/etc/pve/lxc/<vmid>.conf) without disturbing them.

The line grammar follows pve-container's ``PVE::LXC::Config::parse_pct_config``: blank lines are
ignored, ``#`` lines are the (URL-encoded) description, ``[pve:pending]`` and ``[snapname]`` start
sections (the main section ends at the first one), ``lxc.*`` keys (``:`` or ``=``) are raw LXC
lines kept in order, and ``key: value`` lines are options. Every line keeps its exact text, so
``render()`` returns the input byte for byte until something is changed, and a change rewrites
only the lines it touches. Edits apply to the main section only; snapshots and pending changes are
never modified.

Pure functions and objects: no I/O.
"""

from __future__ import annotations

import copy
import re
from urllib.parse import unquote

MAIN_SECTION = ""
PENDING_SECTION = "pve:pending"

# The regular expressions of parse_pct_config, in the order it tries them.
_BLANK_RE = re.compile(r"^\s*$")
_PENDING_RE = re.compile(r"^\[pve:pending\]\s*$", re.IGNORECASE)
_SNAPSHOT_RE = re.compile(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", re.IGNORECASE)
_COMMENT_RE = re.compile(r"^#(.*)$")
_LXC_RE = re.compile(r"^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$")
_OPTION_RE = re.compile(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$")
_DEV_KEY_RE = re.compile(r"^dev(\d+)\Z")

BLANK = "blank"
COMMENT = "comment"
SECTION = "section"
LXC = "lxc"
OPTION = "option"
UNKNOWN = "unknown"

MAX_DEVICES = 256  # pve-container's $MAX_DEVICES: dev0 .. dev255
DEVICE_OPTION_KEYS = ("path", "deny-write", "gid", "mode", "uid")
_DEVICE_MODE_RE = re.compile(r"^0[0-7]{3}\Z")


class ConfigLine:
    """One line of the file: its exact text (without the ``\\n``) and what it means."""

    __slots__ = ("kind", "text", "newline", "key", "value")

    def __init__(self, kind, text, newline="\n", key=None, value=None):
        self.kind = kind
        self.text = text
        self.newline = newline
        self.key = key
        self.value = value

    def render(self):
        return self.text + self.newline

    def __repr__(self):
        return "ConfigLine(%r, %r)" % (self.kind, self.text)


class LxcEntry:
    """A raw ``lxc.*`` line of the main section; pass it back to replace_lxc/remove_lxc."""

    __slots__ = ("key", "value", "line")

    def __init__(self, line):
        self.key = line.key
        self.value = line.value
        self.line = line

    def __repr__(self):
        return "LxcEntry(%r, %r)" % (self.key, self.value)


class DeviceEntry:
    """A ``dev[n]`` option of the main section, parsed per the PVE schema."""

    __slots__ = ("index", "key", "value", "path", "gid", "uid", "mode", "deny_write")

    def __init__(self, key, value):
        self.key = key
        self.index = int(_DEV_KEY_RE.match(key).group(1))
        self.value = value
        parsed = parse_device(value)
        self.path = parsed["path"]
        self.gid = parsed["gid"]
        self.uid = parsed["uid"]
        self.mode = parsed["mode"]
        self.deny_write = parsed["deny_write"]

    def options(self):
        """The semantic content, for comparing two entries whatever their spelling."""
        return {"path": self.path, "gid": self.gid, "uid": self.uid, "mode": self.mode, "deny_write": self.deny_write}

    def __repr__(self):
        return "DeviceEntry(%r, %r)" % (self.key, self.value)


class Section:
    """The main section (name ``""``), ``[pve:pending]`` or a snapshot: its header line and its lines."""

    __slots__ = ("name", "header", "lines")

    def __init__(self, name, header=None):
        self.name = name
        self.header = header
        self.lines = []

    @property
    def is_snapshot(self):
        return self.name not in (MAIN_SECTION, PENDING_SECTION)

    def options(self):
        """``key -> value`` of the option lines; the last one wins, as in PVE."""
        return dict((line.key, line.value) for line in self.lines if line.kind == OPTION)

    def render(self):
        head = self.header.render() if self.header is not None else ""
        return head + "".join(line.render() for line in self.lines)


def _classify(text, newline):
    if _BLANK_RE.match(text):
        return ConfigLine(BLANK, text, newline)
    if _PENDING_RE.match(text):
        return ConfigLine(SECTION, text, newline, key=PENDING_SECTION)
    match = _SNAPSHOT_RE.match(text)
    if match:
        return ConfigLine(SECTION, text, newline, key=match.group(1))
    match = _COMMENT_RE.match(text)
    if match:
        return ConfigLine(COMMENT, text, newline, value=match.group(1))
    match = _LXC_RE.match(text)
    if match:
        return ConfigLine(LXC, text, newline, key=match.group(1), value=match.group(3))
    match = _OPTION_RE.match(text)
    if match:
        return ConfigLine(OPTION, text, newline, key=match.group(1), value=match.group(2))
    return ConfigLine(UNKNOWN, text, newline)


def decode_text(text):
    """PVE::Tools::decode_text: %XX escapes to bytes, then UTF-8."""
    return unquote(text, encoding="utf-8", errors="replace")


def parse_device(value):
    """Parse a ``dev[n]`` value (``[path=]/dev/x[,gid=N][,uid=N][,mode=0660][,deny-write=1]``).

    Returns a dict with path, gid, uid (int or None), mode (str or None) and deny_write (bool).
    Raises ValueError for anything the PVE schema would reject.
    """
    result = {"path": None, "gid": None, "uid": None, "mode": None, "deny_write": False}
    seen = set()
    for part in value.split(","):
        if "=" in part:
            key, item = part.split("=", 1)
        elif result["path"] is None and "path" not in seen:
            key, item = "path", part  # the default key may be given without its name
        else:
            raise ValueError("dev value %r: %r is not key=value" % (value, part))
        key = key.strip()
        if key not in DEVICE_OPTION_KEYS:
            raise ValueError("dev value %r: unknown option %r" % (value, key))
        if key in seen:
            raise ValueError("dev value %r: option %r given twice" % (value, key))
        seen.add(key)
        if key == "path":
            result["path"] = item
        elif key in ("gid", "uid"):
            if not item.isdigit():
                raise ValueError("dev value %r: %s must be a non-negative integer" % (value, key))
            result[key] = int(item)
        elif key == "mode":
            if not _DEVICE_MODE_RE.match(item):
                raise ValueError("dev value %r: mode must be an octal mode like 0660" % value)
            result["mode"] = item
        else:
            if item not in ("0", "1"):
                raise ValueError("dev value %r: deny-write must be 0 or 1" % value)
            result["deny_write"] = item == "1"
    if not result["path"]:
        raise ValueError("dev value %r has no path" % value)
    return result


def format_device(path, gid=None, uid=None, mode=None, deny_write=False):
    """Print a ``dev[n]`` value as PVE's print_property_string does: path first, then sorted keys."""
    parts = [path]
    if deny_write:
        parts.append("deny-write=1")
    if gid is not None:
        parts.append("gid=%d" % gid)
    if mode is not None:
        parts.append("mode=%s" % mode)
    if uid is not None:
        parts.append("uid=%d" % uid)
    return ",".join(parts)


class LxcConfig:
    """A parsed container config. Build it with :func:`parse`."""

    def __init__(self, sections):
        self.sections = sections

    # -- reading --------------------------------------------------------------------------------

    @property
    def main(self):
        return self.sections[0]

    @property
    def snapshots(self):
        """Snapshot sections by name, in file order."""
        return dict((section.name, section) for section in self.sections if section.is_snapshot)

    @property
    def pending(self):
        for section in self.sections:
            if section.name == PENDING_SECTION:
                return section
        return None

    @property
    def description(self):
        """The decoded description of the main section (the ``#`` lines), as PVE shows it."""
        text = ""
        for line in self.main.lines:
            if line.kind == COMMENT:
                text += decode_text(line.value) + "\n"
            elif line.kind == OPTION and line.key == "description":
                text += decode_text(line.value)
        return text

    def get(self, key, default=None):
        """The value of option ``key`` in the main section (the last line wins, as in PVE)."""
        value = default
        for line in self.main.lines:
            if line.kind == OPTION and line.key == key:
                value = line.value
        return value

    def keys(self):
        seen = []
        for line in self.main.lines:
            if line.kind == OPTION and line.key not in seen:
                seen.append(line.key)
        return seen

    def devices(self, section=None):
        """The ``dev[n]`` entries of the main section (or ``section``), ordered by index."""
        options = (section or self.main).options()
        entries = [DeviceEntry(key, value) for key, value in options.items() if _DEV_KEY_RE.match(key)]
        return sorted(entries, key=lambda entry: entry.index)

    def lxc_entries(self, key=None):
        """The raw ``lxc.*`` lines of the main section in file order, optionally only those of ``key``."""
        return [LxcEntry(line) for line in self.main.lines if line.kind == LXC and (key is None or line.key == key)]

    def render(self):
        return "".join(section.render() for section in self.sections)

    def copy(self):
        return copy.deepcopy(self)

    # -- editing (main section only) ------------------------------------------------------------

    def set(self, key, value):
        """Set option ``key``; returns True when the file changes."""
        _check_option(key, value)
        lines = self.main.lines
        for position in range(len(lines) - 1, -1, -1):
            line = lines[position]
            if line.kind == OPTION and line.key == key:
                if line.value == value:
                    return False
                lines[position] = ConfigLine(OPTION, "%s: %s" % (key, value), line.newline, key=key, value=value)
                return True
        self._insert(self._option_position(key), ConfigLine(OPTION, "%s: %s" % (key, value), key=key, value=value))
        return True

    def remove(self, key):
        """Remove every line of option ``key``; returns how many went."""
        lines = self.main.lines
        keep = [line for line in lines if not (line.kind == OPTION and line.key == key)]
        removed = len(lines) - len(keep)
        self.main.lines[:] = keep
        return removed

    def add_lxc(self, key, value):
        """Append a raw ``key: value`` lxc line at the end of the main section."""
        _check_lxc(key, value)
        self._insert(self._end_of_main(), ConfigLine(LXC, "%s: %s" % (key, value), key=key, value=value))

    def replace_lxc(self, entry, key, value):
        """Rewrite the raw line ``entry`` (from lxc_entries) in place."""
        _check_lxc(key, value)
        position = self._position_of(entry.line)
        old = self.main.lines[position]
        self.main.lines[position] = ConfigLine(LXC, "%s: %s" % (key, value), old.newline, key=key, value=value)

    def remove_lxc(self, entry):
        """Remove the raw line ``entry`` (from lxc_entries)."""
        del self.main.lines[self._position_of(entry.line)]

    # -- helpers --------------------------------------------------------------------------------

    def _position_of(self, target):
        for position, line in enumerate(self.main.lines):
            if line is target:
                return position
        raise ValueError("that lxc line is not in the main section (any more)")

    def _end_of_main(self):
        """After the last non-blank line: blank lines before the first section header stay last."""
        lines = self.main.lines
        position = len(lines)
        while position > 0 and lines[position - 1].kind == BLANK:
            position -= 1
        return position

    def _option_position(self, key):
        """Where PVE's writer (sorted keys) would put ``key`` among the existing option lines."""
        lines = self.main.lines
        after = None
        first_option = None
        for position, line in enumerate(lines):
            if line.kind != OPTION:
                continue
            if first_option is None:
                first_option = position
            if line.key < key:
                after = position
        if after is not None:
            return after + 1
        if first_option is not None:
            return first_option
        for position, line in enumerate(lines):
            if line.kind == LXC:
                return position
        return self._end_of_main()

    def _insert(self, position, new_line):
        lines = self.main.lines
        if position > 0 and lines[position - 1].newline == "":
            # The file ended without a newline right there: the new line takes over that ending.
            new_line.newline = ""
            lines[position - 1].newline = "\n"
        lines.insert(position, new_line)


def _check_option(key, value):
    if not re.match(r"^[a-z][a-z_]*\d*\Z", key) or key in ("description", "delete"):
        raise ValueError("%r is not an option key this writer sets" % key)
    _check_value(key, value)
    if not value.strip():
        raise ValueError("option %s needs a value" % key)


def _check_lxc(key, value):
    if not re.match(r"^lxc\.[a-z0-9_\-\.]+\Z", key):
        raise ValueError("%r is not a raw lxc key" % key)
    _check_value(key, value)


def _check_value(key, value):
    if not isinstance(value, str):
        raise ValueError("the value of %s must be a string" % key)
    if "\n" in value or "\r" in value:
        raise ValueError("the value of %s must not contain a newline" % key)
    if value != value.strip():
        raise ValueError("the value of %s must not start or end with whitespace (PVE strips it)" % key)


def parse(text):
    """Parse the text of a container config; ``parse(text).render() == text``."""
    sections = [Section(MAIN_SECTION)]
    pieces = text.split("\n")
    for number, piece in enumerate(pieces):
        last = number == len(pieces) - 1
        if last and piece == "":
            break
        line = _classify(piece, "" if last else "\n")
        if line.kind == SECTION:
            sections.append(Section(line.key, line))
        else:
            sections[-1].lines.append(line)
    return LxcConfig(sections)
