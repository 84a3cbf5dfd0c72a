# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The start_sim fixture (simulator runs that are always killed at teardown); importing sim_harness puts sglang_sim on sys.path."""
from __future__ import annotations

import os
import signal

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SimProcess, pid_alive


@pytest.fixture
def start_sim(tmp_path):
    """start_sim(args, **env) -> SimProcess; every run is killed at teardown."""
    runs = []

    def _start(args=(), **env):
        run = SimProcess(tmp_path, args, **env)
        runs.append(run)
        return run

    yield _start
    for run in runs:
        pids = list(run.children())
        run.stop()
        for pid in pids:
            # Only a still-running child of this run (PDEATHSIG normally took them already).
            if pid_alive(pid) and run.is_sim_child(pid):
                os.kill(pid, signal.SIGKILL)
