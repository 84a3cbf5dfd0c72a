# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""build_parallelism module: run in-process against fake /proc and /sys/fs/cgroup trees."""

from __future__ import annotations

import functools
from unittest import mock

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.module_utils import build_resources
from ansible_collections.llmops.serving.plugins.modules import build_parallelism
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

GIB = build_resources.GIB

HOST_MEMINFO_24G = "MemTotal:       25165824 kB\nMemFree:        24117248 kB\nMemAvailable:   24117248 kB\n"


def fake_v1_container(tmp_path, limit_bytes, usage_bytes=0):
    """A docker --memory container on a cgroup v1 host whose /proc/meminfo shows the 24 GiB host."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(HOST_MEMINFO_24G)
    (proc / "self" / "cgroup").write_text("12:memory:/docker/feed\n11:cpu,cpuacct:/docker/feed\n0::/\n")
    (cgroup / "memory").mkdir(parents=True)
    (cgroup / "memory" / "memory.limit_in_bytes").write_text("%d\n" % limit_bytes)
    (cgroup / "memory" / "memory.usage_in_bytes").write_text("%d\n" % usage_bytes)
    (cgroup / "memory" / "memory.stat").write_text("total_inactive_file 0\n")
    (cgroup / "cpu,cpuacct").mkdir()
    (cgroup / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("800000\n")
    (cgroup / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    return str(proc), str(cgroup)


@pytest.fixture
def container(tmp_path, monkeypatch):
    """Point the module's readers at a fake 16 GiB container with an 8-CPU quota, whatever this machine has."""
    def make(limit_bytes, usage_bytes=0, affinity=64):
        proc, cgroup = fake_v1_container(tmp_path, limit_bytes, usage_bytes)
        monkeypatch.setattr(build_parallelism, "read_build_memory",
                            functools.partial(build_resources.read_build_memory, proc, cgroup))
        monkeypatch.setattr(build_resources, "read_affinity", lambda: affinity)
        monkeypatch.setattr(build_parallelism, "read_build_cpus",
                            functools.partial(build_resources.read_build_cpus, proc, cgroup))
    return make


def run(args):
    with mock.patch.object(basic.AnsibleModule, "warn") as warn:
        result, failed = run_module(build_parallelism.main, args)
    return result, failed, [call.args[0] for call in warn.call_args_list]


def test_cgroup_limit_wins_over_host_meminfo(container):
    container(16 * GIB, usage_bytes=GIB)
    result, failed, warnings = run({})
    assert not failed and result["changed"] is False and warnings == []
    memory = result["memory"]
    assert memory["cgroup_limit_bytes"] == 16 * GIB
    assert memory["limit_bytes"] == 16 * GIB
    assert memory["meminfo_available_bytes"] == 23 * GIB
    assert memory["usable_bytes"] == 15 * GIB
    assert memory["cgroup_version"] == 1
    # (15 - 2) // 5 = 2 threads; 8 CPUs would allow more, so memory binds.
    assert (result["max_jobs"], result["nvcc_threads"]) == (1, 2)
    assert result["env"] == {"MAX_JOBS": "1", "NVCC_THREADS": "2"}
    assert result["binding"] == "memory" and result["fits"] is True
    assert result["reason"].startswith("memory: cgroup v1 memory.limit_in_bytes 16.0 GiB at ")
    assert result["cpus"] == {"count": 8, "source": result["cpus"]["source"]}
    assert "cpu.cfs_quota_us 800000" in result["cpus"]["source"]
    assert result["per_thread_bytes"] == 5 * GIB and result["reserve_bytes"] == 2 * GIB


def test_four_gib_container_warns_that_nothing_fits(container):
    container(4 * GIB)
    result, failed, warnings = run({})
    assert not failed
    assert (result["max_jobs"], result["nvcc_threads"]) == (1, 1)
    assert result["fits"] is False
    assert warnings == [result["reason"]]
    assert "less than one nvcc thread of 5.0 GiB" in result["reason"]


def test_options_shape_the_split(container):
    container(16 * GIB)
    result, failed, _warnings = run({"per_thread_gib": 3, "reserve_gib": 1, "max_nvcc_threads": 1, "cpus": 4})
    assert not failed
    # (16 - 1) // 3 = 5 memory slots, 4 CPUs -> CPU binds; one thread per job.
    assert (result["max_jobs"], result["nvcc_threads"]) == (4, 1)
    assert result["binding"] == "cpu"
    assert result["cpus"] == {"count": 4, "source": "cpus option: 4 CPUs"}
    assert result["per_thread_bytes"] == 3 * GIB


def test_memory_gib_what_if_keeps_detected_figures(container):
    container(4 * GIB)
    result, failed, warnings = run({"memory_gib": 32})
    assert not failed and warnings == []
    assert result["memory"]["usable_bytes"] == 32 * GIB
    assert result["memory"]["cgroup_limit_bytes"] == 4 * GIB
    assert result["memory"]["source"].startswith("memory_gib 32.0 GiB (override; detected: cgroup v1 ")
    # (32 - 2) // 5 = 6 slots, 8 CPUs -> 4 threads x 1 job.
    assert (result["max_jobs"], result["nvcc_threads"]) == (1, 4)


def test_check_mode_is_the_same(container):
    container(16 * GIB)
    normal, _failed, _warnings = run({})
    with mock.patch.object(basic.AnsibleModule, "warn"):
        checked, failed = run_module(build_parallelism.main, {}, check_mode=True)
    assert not failed
    assert checked["max_jobs"] == normal["max_jobs"] and checked["changed"] is False


@pytest.mark.parametrize("args, message", [
    ({"per_thread_gib": 0}, "per_thread_gib must be positive"),
    ({"reserve_gib": -1}, "reserve_gib must not be negative"),
    ({"max_nvcc_threads": 0}, "max_nvcc_threads must be at least 1"),
    ({"cpus": 0}, "cpus must be at least 1"),
    ({"memory_gib": 0}, "memory_gib must be positive"),
])
def test_bad_options_fail(container, args, message):
    container(16 * GIB)
    result, failed, _warnings = run(args)
    assert failed
    assert message in result["msg"]


def test_nothing_readable_fails_and_asks_for_memory_gib(tmp_path, monkeypatch):
    monkeypatch.setattr(build_parallelism, "read_build_memory",
                        functools.partial(build_resources.read_build_memory, str(tmp_path / "p"), str(tmp_path / "c")))
    monkeypatch.setattr(build_parallelism, "read_build_cpus", lambda: (2, "test"))
    result, failed, _warnings = run({})
    assert failed
    assert "give memory_gib" in result["msg"]


def test_runs_against_this_machine():
    """No fakes: whatever this machine is, the answer is consistent with its own figures."""
    result, failed, _warnings = run({"per_thread_gib": 1, "reserve_gib": 0.5})
    assert not failed
    usable = result["memory"]["usable_bytes"]
    assert result["memory"]["limit_bytes"] >= usable > 0
    if result["fits"]:
        assert result["max_jobs"] * result["nvcc_threads"] * GIB <= usable - GIB // 2
    assert result["max_jobs"] * result["nvcc_threads"] <= result["cpus"]["count"]
