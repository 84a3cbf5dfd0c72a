# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The start_sim fixture (simulator runs that are always killed at teardown) and the GPU kits they run on; importing
sim_harness puts sglang_sim on sys.path."""
from __future__ import annotations

import os
import signal

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators import sim_harness
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import GpuKit, SimProcess, pid_alive


@pytest.fixture
def make_gpu_kit(tmp_path_factory):
    """make_gpu_kit(gpus=2, memory_mib=49140, missing_nodes=(), name=...) -> GpuKit: RTX A6000s by default (skipped
    when not root: the kit's device nodes need mknod)."""
    def _make(**options):
        return GpuKit(tmp_path_factory.mktemp("gpu-kit"), **options)
    return _make


@pytest.fixture(autouse=True)
def default_gpu_kit(make_gpu_kit):
    """Every simulator run gets a kit of two RTX A6000s unless it names another driver directory; built only when a
    run needs it (this directory's other tests start no simulator)."""
    sim_harness.use_default_kit(make_gpu_kit)
    yield
    sim_harness.use_default_kit(None)


@pytest.fixture
def gpu_kit():
    """The default kit of this test's simulator runs (two RTX A6000s)."""
    return sim_harness.default_kit()


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
