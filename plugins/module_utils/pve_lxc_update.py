# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plan the update of a Proxmox VE container config: send only what differs. Pure: no I/O.

Input: the config as GET /nodes/{node}/lxc/{vmid}/config returns it (integers as numbers, ``digest``, raw lines as
``lxc: [[key, value], ...]``) and the wanted options (a value of None means "remove this option").
Output: the PUT parameters (changed options, ``delete`` for removed ones) and the changes, one per option.

Comparison rules, so that a rerun sends nothing:

* scalars compare as PVE writes them: booleans as 1/0, numbers as their decimal text;
* property strings (``net[n]``, ``features``, ``mp[n]``, ``dev[n]``, ``startup``, ...) compare item by item, order
  ignored, and only the items the caller gives: PVE fills in items of its own (``net0`` gets ``hwaddr`` and
  ``type=veth``), which must not count as a difference; boolean items compare as 1/0 (``nesting=true`` = ``nesting=1``);
* ``description`` compares without trailing newlines (PVE stores it as comment lines).

Options that only exist at creation (``ostemplate``, ``storage``, ``password``, ``ssh-public-keys``, ...) are not
compared; ``rootfs`` is not updated (a resize is a separate API call) and ``unprivileged`` cannot change after
creation: a different value is an error that says so.
"""

from __future__ import annotations

import re

# Parameters of POST /nodes/{node}/lxc that are not options of the config (or cannot be set by PUT config).
CREATE_ONLY = ("ostemplate", "storage", "password", "ssh-public-keys", "pool", "restore", "force", "unique", "start",
               "ignore-unpack-errors", "bwlimit", "ha-managed")
NOT_UPDATED = ("rootfs",)
READ_ONLY_AFTER_CREATE = ("unprivileged",)
# Keys the API answers with that are not options (never compared, never deleted).
NOT_OPTIONS = ("digest", "lxc")
_PROPERTY_STRING_RE = re.compile(r"^(net\d+|mp\d+|dev\d+|unused\d+|features|startup|rootfs)\Z")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class PlanError(ValueError):
    """The wanted config cannot be reached by an update."""


def scalar_text(value):
    """A value as PVE writes it into the config file."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def is_property_string(key):
    return bool(_PROPERTY_STRING_RE.match(key))


def _normal_item_value(value):
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return "1"
    if lowered in _FALSE:
        return "0"
    return value.strip()


def property_items(text):
    """``a=1,b=x,/dev/foo`` -> {'a': '1', 'b': 'x', '': '/dev/foo'} (an item without '=' is the default key)."""
    items = {}
    for part in scalar_text(text).split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            key, value = "", key
        items[key.strip()] = _normal_item_value(value)
    return items


def values_equal(key, wanted, current):
    """True when ``current`` (from the API) already has what ``wanted`` asks for."""
    if current is None:
        return False
    if key == "description":
        return scalar_text(wanted).rstrip("\n") == scalar_text(current).rstrip("\n")
    if is_property_string(key):
        want_items = property_items(wanted)
        have_items = property_items(current)
        # A dev[n]/mp[n] path may be written with or without its key (path=/dev/x or /dev/x).
        for items in (want_items, have_items):
            if "" in items and key.startswith(("dev", "mp")):
                items.setdefault("path" if key.startswith("dev") else "volume", items.pop(""))
        return all(have_items.get(item) == value for item, value in want_items.items())
    return scalar_text(wanted) == scalar_text(current)


def options_of(api_config):
    """The options of an API config answer, without digest and raw lxc lines, as text."""
    return dict((key, scalar_text(value)) for key, value in (api_config or {}).items() if key not in NOT_OPTIONS and value is not None)


def plan_update(current, wanted):
    """Returns ``(params, changes)``.

    ``params``: what to PUT (changed options as text, ``delete`` as a comma-separated list), empty when nothing differs.
    ``changes``: ``[{key, action: set|delete, old, new}]`` in key order.
    Raises PlanError for a change that only a new container can make.
    """
    have = options_of(current)
    params = {}
    deletes = []
    changes = []
    for key in sorted(wanted):
        value = wanted[key]
        if key in CREATE_ONLY or key in NOT_OPTIONS:
            continue
        if value is None:
            if key in have:
                if key in READ_ONLY_AFTER_CREATE or key in NOT_UPDATED:
                    raise PlanError("option '%s' cannot be removed from an existing container" % key)
                deletes.append(key)
                changes.append({"key": key, "action": "delete", "old": have[key], "new": None})
            continue
        if key in READ_ONLY_AFTER_CREATE:
            if scalar_text(value) != have.get(key, "0"):
                raise PlanError("option '%s' is %s on the existing container and cannot change after creation (wanted %s): "
                                "recreate the container (backup and restore) to change it" % (key, have.get(key, "0"), scalar_text(value)))
            continue
        if key in NOT_UPDATED:
            continue
        if values_equal(key, value, have.get(key)):
            continue
        params[key] = scalar_text(value)
        changes.append({"key": key, "action": "set", "old": have.get(key), "new": params[key]})
    if deletes:
        params["delete"] = ",".join(deletes)
    return params, changes


def apply_changes(current, changes):
    """The options after ``changes`` (for the diff and the result), as text."""
    after = options_of(current)
    for change in changes:
        if change["action"] == "delete":
            after.pop(change["key"], None)
        else:
            after[change["key"]] = change["new"]
    return after


def create_params(vmid, wanted, create_only):
    """POST /nodes/{node}/lxc parameters: vmid, the wanted options (None values dropped) and the create-only ones."""
    params = {"vmid": int(vmid)}
    for key, value in (wanted or {}).items():
        if value is not None:
            params[key] = scalar_text(value)
    for key, value in (create_only or {}).items():
        if value is not None and value != "":
            params[key] = scalar_text(value)
    return params


def render_options(options, lxc_pairs=None):
    """Options (and raw lxc lines) as config-like text, for diff mode."""
    lines = ["%s: %s" % (key, options[key]) for key in sorted(options) if key != "description"]
    if options.get("description"):
        lines = ["#%s" % line for line in options["description"].rstrip("\n").split("\n")] + lines
    lines += ["%s: %s" % (pair[0], pair[1]) for pair in (lxc_pairs or []) if len(pair) == 2]
    return "".join(line + "\n" for line in lines)


def device_keys(options):
    """The dev[n] keys among ``options`` (only root@pam may set them)."""
    return sorted(key for key in options if re.match(r"^dev\d+\Z", key))
