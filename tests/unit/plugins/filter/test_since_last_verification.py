# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""since_last_verification: a node reboot, a container restart, neither, and whether the container came back with its
GPUs; nothing to compare (no summary, a damaged or hostile one, no boot facts) is null, never an error."""
from __future__ import annotations

import json

from ansible_collections.llmops.serving.plugins.filter.since_last_verification import since_last_verification

BOOT_A = {"boot_id": "a1b2c3d4-0000-4000-8000-000000000001", "init_started": "2026-12-04T20:00:05Z"}
BOOT_B = {"boot_id": "a1b2c3d4-0000-4000-8000-000000000002", "init_started": "2026-12-04T21:10:00Z"}


def summary(boot, status="passed"):
    return json.dumps({"status": status, "boot": boot, "message": None})


def preflight(boot, errors=0):
    return {"boot": boot, "error_count": errors, "warning_count": 0}


def test_nothing_happened():
    since = since_last_verification(summary(BOOT_A), preflight(BOOT_A))
    assert (since["node_rebooted"], since["container_restarted"], since["gpus_back"]) == (False, False, None)
    assert since["message"] == "No reboot or restart since the last verification."


def test_a_node_reboot_and_the_container_back_with_its_gpus():
    since = since_last_verification(summary(BOOT_A), preflight(BOOT_B))
    assert (since["node_rebooted"], since["container_restarted"], since["gpus_back"]) == (True, True, True)
    assert since["message"] == ("Since the last verification the node rebooted (boot %s at the last verification, %s now): "
                                "the container came back with its GPUs." % (BOOT_A["boot_id"], BOOT_B["boot_id"]))
    assert since["last_boot"] == BOOT_A and since["last_status"] == "passed"


def test_a_container_restart_without_its_gpus():
    restarted = dict(BOOT_A, init_started="2026-12-04T20:30:00Z")
    since = since_last_verification(summary(BOOT_A, status="failed"), preflight(restarted, errors=2))
    assert (since["node_rebooted"], since["container_restarted"], since["gpus_back"]) == (False, True, False)
    assert since["message"] == ("Since the last verification the container restarted (its PID 1 started 2026-12-04T20:00:05Z "
                                "before, 2026-12-04T20:30:00Z now): the container did not come back with its GPUs.")
    assert since["last_status"] == "failed"


def test_nothing_to_compare_is_null():
    for text in ("", "   ", None, "not json", "[1, 2]", json.dumps({"status": "passed"}), json.dumps({"boot": None}),
                 json.dumps({"boot": {"boot_id": 7}}), json.dumps({"boot": {"boot_id": ""}}), "{" * 100000,
                 json.dumps({"boot": BOOT_A, "pad": "x" * (5 * 1024 * 1024)})):
        assert since_last_verification(text, preflight(BOOT_A)) is None, text[:40] if text else text
    for now in ({}, {"boot": None}, {"boot": {"boot_id": None, "init_started": None}}, None, "text"):
        assert since_last_verification(summary(BOOT_A), now) is None


def test_a_preflight_without_an_error_count_does_not_claim_the_gpus_are_back():
    since = since_last_verification(summary(BOOT_A), {"boot": BOOT_B})
    assert since["gpus_back"] is False and since["message"].endswith("did not come back with its GPUs.")
