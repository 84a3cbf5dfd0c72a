# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node preflight's reading of the boot check's report (gpu_preflight_checks.boot_check_findings): silent for this
boot's clean report, a warning for none, another boot's, a damaged one, and one with problems."""
from __future__ import annotations

import json

from ansible_collections.llmops.serving.plugins.module_utils import gpu_preflight_checks as checks

PATH = "/run/llmops-serving/gpu-boot-check.json"
BOOT = "0f5c3c8e-5a57-4c8b-9d1e-2f3a4b5c6d7e"


def report(**fields):
    data = {"boot_id": BOOT, "checked_at": "2026-12-04T20:00:00Z", "problems": []}
    data.update(fields)
    return json.dumps(data)


def test_this_boots_clean_report_gives_no_finding():
    assert checks.boot_check_findings(PATH, report(), BOOT) == []


def test_no_report_says_the_unit_did_not_run_in_this_boot():
    (finding,) = checks.boot_check_findings(PATH, None, BOOT)
    assert (finding.check, finding.severity, finding.subject) == ("boot_check", "warning", PATH)
    assert finding.what == "no boot check report for this boot"
    assert "systemctl enable --now llmops-gpu-boot-check.service" in finding.fix


def test_a_report_of_another_boot_is_not_this_boots():
    (finding,) = checks.boot_check_findings(PATH, report(boot_id="another"), BOOT)
    assert finding.what == "the boot check report is from another boot (this boot: %s)" % BOOT
    assert finding.evidence[0].startswith("boot_id another, checked at 2026-12-04T20:00:00Z")


def test_problems_at_boot_are_quoted_with_their_own_fix():
    problem = ("container 201: /etc/pve/lxc/201.conf passes NVIDIA devices but allows no character devices of major "
               "510, the nvidia-uvm major of this boot (allows 195, 508)")
    (finding,) = checks.boot_check_findings(PATH, report(problems=[problem]), BOOT)
    assert finding.what == "at boot: " + problem and problem in finding.evidence
    assert "systemctl restart llmops-gpu-boot-check" in finding.fix


def test_a_damaged_or_hostile_report_is_named_not_trusted():
    for text in ("", "{\"boot_id\": ", "[1, 2]", "\x1b[31m" + "x" * 5000):
        (finding,) = checks.boot_check_findings(PATH, text, BOOT)
        assert finding.what == "the boot check report is not a JSON object"
        assert "\x1b" not in finding.summary() and len(finding.evidence[0]) <= 260
