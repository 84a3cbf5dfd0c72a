# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ask systemd about a unit with ``systemctl show`` and decide cgroup membership.

``run_command`` is injected (an AnsibleModule's, in modules) so the parsing is testable without systemd.
The checks built on these facts live in unit_check.
"""

from __future__ import annotations

import datetime
import re

# What the provenance modules need to know about a unit.
UNIT_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "MainPID",
    "InvocationID",
    "ExecMainStartTimestamp",
    "ControlGroup",
    "NRestarts",
)

# `systemctl show` prints timestamps as "Sun 2026-11-29 19:45:01 UTC" (local zone, so the modules run it with
# TZ=UTC), optionally with microseconds ("--timestamp=us"), or "@1795980364" with "--timestamp=unix".
_TIMESTAMP_RE = re.compile(
    r"^(?:[A-Za-z]{3} )?(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d{1,6}))?(?: (?P<zone>\S+))?$"
)
_UTC_ZONES = ("UTC", "GMT", "Etc/UTC", "UCT", "Z")

_UNIT_SUFFIXES = (".service", ".scope", ".socket", ".target", ".timer", ".mount", ".slice", ".path")


class SystemdError(Exception):
    """systemctl failed or printed something this code cannot read."""


def parse_show_output(text):
    """Parse ``systemctl show`` output (KEY=VALUE lines; a value may contain '=') into a dict of strings."""
    properties = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if separator and key:
            properties[key] = value
    return properties


def parse_timestamp(value):
    """A timestamp as systemd prints it -> aware UTC datetime; None for empty, "n/a" or "0".

    Zones other than UTC are refused (ValueError): an abbreviation like CET does not name an offset.
    """
    value = (value or "").strip()
    if value in ("", "n/a", "0"):
        return None
    if value.startswith("@"):
        return datetime.datetime.fromtimestamp(float(value[1:]), tz=datetime.timezone.utc)
    match = _TIMESTAMP_RE.match(value)
    if not match:
        raise ValueError("not a systemd timestamp: %r" % value)
    zone = match.group("zone")
    if zone is not None and zone not in _UTC_ZONES:
        raise ValueError("systemd timestamp %r is not in UTC; run systemctl with TZ=UTC" % value)
    moment = datetime.datetime.strptime(match.group("date") + " " + match.group("time"), "%Y-%m-%d %H:%M:%S")
    fraction = match.group("fraction")
    if fraction:
        moment = moment.replace(microsecond=int(fraction.ljust(6, "0")))
    return moment.replace(tzinfo=datetime.timezone.utc)


def iso_utc(moment):
    """ISO 8601 UTC text with a Z (microseconds kept when present), or None."""
    if moment is None:
        return None
    text = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat()
    return text + "Z"


def unit_facts(properties, unit):
    """The documented ``unit`` return value from parsed ``systemctl show`` properties."""
    main_pid = properties.get("MainPID", "0")
    started = parse_timestamp(properties.get("ExecMainStartTimestamp"))
    return {
        "name": properties.get("Id") or unit,
        "load_state": properties.get("LoadState", ""),
        "active_state": properties.get("ActiveState", ""),
        "sub_state": properties.get("SubState", ""),
        "result": properties.get("Result", ""),
        "main_pid": int(main_pid) if main_pid.isdigit() else 0,
        "invocation_id": properties.get("InvocationID", ""),
        "exec_main_start_timestamp": iso_utc(started),
        "exec_main_start_epoch": started.timestamp() if started else None,
        "control_group": properties.get("ControlGroup", ""),
        "n_restarts": int(properties["NRestarts"]) if properties.get("NRestarts", "").isdigit() else None,
    }


def show_unit(run_command, unit, properties=UNIT_PROPERTIES, systemctl="systemctl"):
    """Run ``systemctl show`` for ``unit`` and return unit_facts().

    ``run_command`` follows AnsibleModule.run_command: (args, environ_update=...) -> (rc, stdout, stderr).
    """
    args = [systemctl, "show", "--property=" + ",".join(properties), "--", unit]
    # TZ=UTC makes the timestamps parseable; LC_ALL=C keeps weekday names English.
    rc, stdout, stderr = run_command(args, environ_update={"TZ": "UTC", "LC_ALL": "C"})
    if rc != 0:
        raise SystemdError("%s failed (rc=%s): %s" % (" ".join(args), rc, (stderr or stdout).strip()))
    parsed = parse_show_output(stdout)
    if "ActiveState" not in parsed:
        raise SystemdError("%s printed no ActiveState: %r" % (" ".join(args), stdout[:200]))
    try:
        return unit_facts(parsed, unit)
    except ValueError as exc:
        raise SystemdError("cannot read the output of %s: %s" % (" ".join(args), exc))


def path_within(path, control_group):
    """True when cgroup ``path`` is ``control_group`` or below it."""
    if not path or not control_group or control_group == "/":
        return False
    base = control_group.rstrip("/")
    return path == base or path.startswith(base + "/")


def unit_cgroup_paths(cgroup_entries):
    """The paths of a process in the hierarchies systemd tracks units in: v1 ``name=systemd`` and unified ``0::``."""
    paths = []
    for entry in cgroup_entries:
        if entry["hierarchy"] == 0 and not entry["controllers"]:
            paths.append(entry["path"])
        elif "name=systemd" in entry["controllers"]:
            paths.append(entry["path"])
    return paths


def in_unit_cgroup(cgroup_entries, control_group):
    """Whether a process (its parsed /proc/<pid>/cgroup) belongs to the unit whose ControlGroup is given.

    A member's systemd-hierarchy (v1 name=systemd) or unified (0::) path equals ControlGroup or lies below it.
    """
    if not cgroup_entries:
        return False
    return any(path_within(path, control_group) for path in unit_cgroup_paths(cgroup_entries))


def systemd_cgroup_path(cgroup_entries):
    """The path that best names where a process lives, for messages: name=systemd, else unified, else None."""
    unified = None
    for entry in cgroup_entries or []:
        if "name=systemd" in entry["controllers"]:
            return entry["path"]
        if entry["hierarchy"] == 0 and not entry["controllers"]:
            unified = entry["path"]
    return unified


def unit_name(name):
    """Append .service to a bare name; leave names with a unit suffix alone."""
    return name if name.endswith(_UNIT_SUFFIXES) else name + ".service"
