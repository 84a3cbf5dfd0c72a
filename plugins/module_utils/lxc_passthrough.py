# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the back ends of lxc_gpu_passthrough share: the failure, host facts, the dev[n] result and pct on the node.

The back ends (each ``run(module, nodes, cgroup_version, dev_defaults, warnings)`` returning the module's result):
lxc_passthrough_file (the config file under Proxmox's lock), lxc_passthrough_cli (pct set) and lxc_passthrough_api
(the API through module_utils.pve_api). The plan itself is module_utils.gpu_passthrough.
"""

from __future__ import annotations

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import mount_source_target

CGROUP2_PROBE = "/sys/fs/cgroup/cgroup.controllers"

RAW_API_MSG = (
    "style=raw writes lxc.cgroup2.devices.allow and lxc.mount.entry lines, and raw lxc.* keys cannot be set through the "
    "Proxmox API (nor with pct set): they exist only in /etc/pve/lxc/<vmid>.conf. Use backend=file on the node, "
    "or style=dev."
)
RAW_CLI_MSG = (
    "style=raw writes raw lxc.* lines, which pct set cannot set: use backend=file on the node, or style=dev."
)


class PassthroughError(Exception):
    """A failure to report with fail_json."""


def resolve_cgroup_version(requested):
    if requested != "auto":
        return requested
    return "v2" if os.path.exists(CGROUP2_PROBE) else "v1"


def devices_or_empty(document):
    try:
        return document.devices()
    except ValueError:
        return []


def dev_entries(document):
    """The dev[n] entries of a parsed config as {key: value}."""
    return dict((device.key, device.value) for device in devices_or_empty(document))


def split_changes(changes):
    """The plan's changes as (options to set in order, keys to delete), for pct set and the API's PUT config."""
    sets = [(change["key"], change["value"]) for change in changes if change["action"] != "remove"]
    deletes = [change["key"] for change in changes if change["action"] == "remove"]
    return sets, deletes


def warn_raw_leftovers(lxc_pairs, nodes, warnings, how):
    """Warn about raw mount lines onto discovered nodes' places that ``how`` (pct, the API) cannot remove.

    A line counts by its source or by its target (a per-container copy bound onto dev/nvidia0 is one too).
    """
    by_path = dict((node.path, node.path) for node in nodes)
    by_target = dict((node.mount_target, node.path) for node in nodes)
    for key, value in lxc_pairs:
        source, target = mount_source_target(value)
        path = by_path.get(source) or by_target.get(target)
        if key == "lxc.mount.entry" and path:
            warnings.append("the config also passes %s with a raw line (%s: %s) that %s cannot remove; "
                            "use backend=file to clean it up" % (path, key, value, how))


def dev_result(plan, before_document, diff):
    """The result of a back end that sets dev[n] entries (cli, api): the entries after, and before/after as the diff."""
    result = {"changed": plan.changed, "changes": plan.changes, "config_path": None, "backup_file": None,
              "devices": dev_entries(plan.document)}
    if diff:
        result["diff"] = {"before": dev_entries(before_document), "after": result["devices"]}
    return result


# -- pct on the node (back ends file and cli) ----------------------------------------------------


def run_pct(module, pct, *args):
    """Run pct with args (no shell); return its stdout, or raise with its exit code and message."""
    rc, out, err = module.run_command([pct] + [str(arg) for arg in args])
    if rc != 0:
        raise PassthroughError("pct %s %s failed (rc=%d): %s" % (args[0], args[1], rc, (err or out).strip()))
    return out


def pct_restart(module, pct, vmid, changed):
    """Reboot a running container whose passthrough changed when restart is true. Returns (restart_needed, restarted).

    Without pct (a node where it is not on the PATH) the running state is unknown: a restart may be needed.
    """
    if not changed:
        return False, False
    running = bool(re.search(r"^status:\s*running\s*$", run_pct(module, pct, "status", vmid), re.MULTILINE)) if pct else None
    if running is False:
        return False, False
    if not module.params["restart"] or module.check_mode:
        return True, False
    if running is None:
        raise PassthroughError("restart=true needs pct on the node to reboot CT %d, and pct was not found" % vmid)
    run_pct(module, pct, "reboot", vmid, "--timeout", module.params["restart_timeout"])
    return False, True
