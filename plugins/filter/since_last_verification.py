# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: since_last_verification
short_description: What happened to a container since its last verification - a node reboot, a restart - and whether it came back with its GPUs
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Compares the C(boot) of the last verification's summary (the JSON text sglang_verify wrote on the controller) with
    the C(boot) the container's GPU preflight returned now (M(llmops.serving.gpu_preflight)); another C(boot_id) is a
    node reboot, another C(init_started) (when the container's PID 1 started) a container restart.
  - Whether the container came back with its GPUs is whether its preflight found no error now.
  - Returns null when there is nothing to compare (no earlier summary, one that is not JSON or has no boot, a preflight
    that did not run or could not read the boot ID); a damaged summary file is never an error.
options:
  _input:
    description: The text of the last verification's summary (empty when there is none).
    type: str
    required: true
  preflight:
    description: The registered result of this verification's container preflight.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say what happened since the last verification
  ansible.builtin.debug:
    msg: "{{ (lookup('ansible.builtin.file', summary_file, errors='ignore') or '') | llmops.serving.since_last_verification(preflight_result) }}"
    # -> {"node_rebooted": true, "container_restarted": true, "gpus_back": true, "message": "Since the last verification
    #     the node rebooted (boot ... at the last verification, ... now): the container came back with its GPUs.", ...}
"""

RETURN = r"""
_value:
  description:
    - C(node_rebooted), C(container_restarted), C(gpus_back) (null without a restart), C(last_status) (the last
      verification's C(status)), C(last_boot) and C(message), one sentence; null when there is nothing to compare.
  type: dict
"""

import json

# A summary is the role's own small JSON; anything far larger is not one.
MAX_SUMMARY_CHARS = 4 * 1024 * 1024


def _boot(value):
    """``{"boot_id", "init_started"}`` with string values, or None."""
    if not isinstance(value, dict):
        return None
    boot_id, started = value.get("boot_id"), value.get("init_started")
    if not isinstance(boot_id, str) or not boot_id or not (started is None or isinstance(started, str)):
        return None
    return {"boot_id": boot_id, "init_started": started}


def since_last_verification(last_summary, preflight):
    if not isinstance(last_summary, str) or not last_summary.strip() or len(last_summary) > MAX_SUMMARY_CHARS:
        return None
    try:
        last = json.loads(last_summary)
    except ValueError:
        return None
    if not isinstance(last, dict):
        return None
    last_boot = _boot(last.get("boot"))
    now = _boot((preflight or {}).get("boot")) if isinstance(preflight, dict) else None
    if last_boot is None or now is None:
        return None
    rebooted = last_boot["boot_id"] != now["boot_id"]
    restarted = rebooted or last_boot["init_started"] != now["init_started"]
    back = None
    if restarted:
        errors = preflight.get("error_count")
        back = isinstance(errors, int) and errors == 0
    if rebooted:
        what = "the node rebooted (boot %s at the last verification, %s now)" % (last_boot["boot_id"], now["boot_id"])
    else:
        what = "the container restarted (its PID 1 started %s before, %s now)" % (last_boot["init_started"], now["init_started"])
    message = ("Since the last verification %s: the container %s" % (
        what, "came back with its GPUs." if back else "did not come back with its GPUs.")) if restarted else \
        "No reboot or restart since the last verification."
    status = last.get("status")
    return {"node_rebooted": rebooted, "container_restarted": restarted, "gpus_back": back,
            "last_status": status if isinstance(status, str) else None, "last_boot": last_boot, "message": message}


class FilterModule:
    def filters(self):
        return {"since_last_verification": since_last_verification}
