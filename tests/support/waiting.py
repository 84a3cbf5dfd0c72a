# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiting for a state in a test: poll a predicate with a deadline, never sleep a guessed time."""
from __future__ import annotations

import time

import pytest


def wait_until(predicate, timeout, what):
    """Poll predicate() every 0.2 s until it returns something true, and return that; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")
