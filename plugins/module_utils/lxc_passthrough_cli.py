# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Back end ``cli`` of lxc_gpu_passthrough: dev[n] entries with ``pct config`` and ``pct set`` on the node."""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import plan_passthrough
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough import (
    dev_result,
    pct_restart,
    run_pct,
    split_changes,
    warn_raw_leftovers,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse


def pct_set_args(changes):
    """``-devN value`` per set option, then one ``-delete devA,devB`` for the removed ones."""
    sets, deletes = split_changes(changes)
    args = []
    for key, value in sets:
        args.extend(["-%s" % key, value])
    if deletes:
        args.extend(["-delete", ",".join(deletes)])
    return args


def run(module, nodes, cgroup_version, dev_defaults, warnings):
    vmid = module.params["vmid"]
    pct = module.get_bin_path("pct", required=True)
    document = parse(run_pct(module, pct, "config", vmid))
    # pct set cannot remove raw lines: they are only reported.
    plan = plan_passthrough(document, nodes, "dev", cgroup_version, dev_defaults, remove_other_style=False)
    warn_raw_leftovers([(entry.key, entry.value) for entry in document.lxc_entries()], nodes, warnings, "pct")
    if plan.changed and not module.check_mode:
        run_pct(module, pct, "set", vmid, *pct_set_args(plan.changes))
    result = dev_result(plan, document, module._diff)
    restart_needed, restarted = pct_restart(module, pct, vmid, plan.changed)
    result.update(restart_needed=restart_needed, restarted=restarted)
    return result
