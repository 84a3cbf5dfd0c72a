# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus' own checker for the tests: ``promtool`` from Debian's prometheus package (scripts/host-packages.sh).

Without promtool the tests that need it are skipped with the reason, except under ``make test`` (the Makefile sets
LLMOPS_REQUIRE_PROMTOOL=1 after installing the host packages), where a missing promtool is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

MISSING = "promtool is not installed (Debian package prometheus; scripts/host-packages.sh installs it)"


def promtool():
    """The promtool executable; skips the test (or fails it under make test) when there is none."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("LLMOPS_REQUIRE_PROMTOOL") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return path


def check_metrics(text):
    """``promtool check metrics`` on exposition text: (exit status, what it said)."""
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                          check=False)
    return done.returncode, done.stdout + done.stderr
