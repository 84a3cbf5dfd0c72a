# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Back end ``api`` of lxc_gpu_passthrough: dev[n] entries through the Proxmox API (module_utils.pve_api).

Only root@pam with a password may set them; other credentials fail before any request. The config is changed with
the ``digest`` that was read, so that a concurrent change is refused by Proxmox instead of overwritten.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import plan_passthrough
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough import (
    PassthroughError,
    dev_result,
    split_changes,
    warn_raw_leftovers,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_api import (
    api_errors,
    connect,
    require_positive_seconds,
    require_root_for_devices,
    wait_for_upid,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse

# Seconds the reboot task may run beyond the container's shutdown timeout (the start after it).
REBOOT_START_SECONDS = 30


def config_put_params(changes, digest):
    """The parameters of PUT /nodes/{node}/lxc/{vmid}/config for the plan's changes."""
    sets, deletes = split_changes(changes)
    update = dict(sets)
    if deletes:
        update["delete"] = ",".join(deletes)
    if digest:
        update["digest"] = digest
    return update


def run(module, nodes, cgroup_version, dev_defaults, warnings):
    params = module.params
    vmid = params["vmid"]
    require_root_for_devices(params, [node.path for node in nodes])
    missing = [name for name in ("api_host", "node") if not params[name]]
    if missing:
        raise PassthroughError("backend=api needs %s" % " and ".join(missing))
    require_positive_seconds(params, ["api_timeout"])
    with api_errors(params, "CT %d on node %s" % (vmid, params["node"])):
        api = connect(params)
        container = api.nodes(params["node"]).lxc(vmid)
        config = container.config.get() or {}
        text = "".join("%s: %s\n" % (key, config[key]) for key in sorted(config) if re.match(r"^dev\d+$", key))
        document = parse(text)
        # The API cannot remove raw lines: they are only reported.
        plan = plan_passthrough(document, nodes, "dev", cgroup_version, dev_defaults, remove_other_style=False)
        warn_raw_leftovers([tuple(pair) for pair in config.get("lxc") or [] if len(pair) == 2], nodes, warnings, "the API")
        if plan.changed and not module.check_mode:
            container.config.put(**config_put_params(plan.changes, config.get("digest")))
        result = dev_result(plan, document, module._diff)
        result.update(restart_needed=False, restarted=False)
        if plan.changed:
            running = (container.status.current.get() or {}).get("status") == "running"
            if running and params["restart"] and not module.check_mode:
                upid = container.status.reboot.post(timeout=params["restart_timeout"])
                wait_for_upid(api, params["node"], upid, params["restart_timeout"] + REBOOT_START_SECONDS, "rebooting CT %d" % vmid)
                result["restarted"] = True
            else:
                result["restart_needed"] = running
    return result
