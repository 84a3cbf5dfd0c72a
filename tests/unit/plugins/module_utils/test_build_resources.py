# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""build_resources: cgroup v1/v2 memory and CPU limits from fake /proc and /sys/fs/cgroup trees, and the split."""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import build_resources as br

GIB = br.GIB
MIB = 1024 ** 2

# The value this project's own machine prints for an unlimited v1 cgroup (cat /sys/fs/cgroup/memory/memory.limit_in_bytes).
V1_UNLIMITED_4K_PAGES = "9223372036854771712\n"
# PAGE_COUNTER_MAX * 64 KiB pages (arm64/ppc64le kernels): also "unlimited".
V1_UNLIMITED_64K_PAGES = "9223372036854710272\n"

# A 24 GiB host as /proc/meminfo prints it (kB = KiB); only the fields read here and a few neighbours.
HOST_MEMINFO_24G = (
    "MemTotal:       25165824 kB\n"
    "MemFree:        20971520 kB\n"
    "MemAvailable:   24117248 kB\n"
    "Buffers:          102400 kB\n"
    "Cached:          2097152 kB\n"
    "SwapTotal:             0 kB\n"
)


def write(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def v1_tree(tmp_path, limit="4294967296\n", usage=str(1 * GIB), stat="total_inactive_file %d\n" % (512 * MIB),
            self_cgroup="12:memory:/docker/0123abcd\n11:cpu,cpuacct:/docker/0123abcd\n0::/\n"):
    """A docker --memory container on a cgroup v1 host: the mount is the container's own cgroup."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    write(proc, "meminfo", HOST_MEMINFO_24G)
    write(proc, "self/cgroup", self_cgroup)
    write(cgroup, "memory/memory.limit_in_bytes", limit)
    if usage is not None:
        write(cgroup, "memory/memory.usage_in_bytes", usage + "\n")
    if stat is not None:
        write(cgroup, "memory/memory.stat", "cache 0\n" + stat)
    return str(proc), str(cgroup)


def v2_tree(tmp_path, levels, self_path="/lxc/101/ns"):
    """A cgroup v2 hierarchy; ``levels`` maps cgroup paths ("/", "/lxc", ...) to {file: text}."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    write(proc, "meminfo", HOST_MEMINFO_24G)
    write(proc, "self/cgroup", "0::%s\n" % self_path)
    write(cgroup, "cgroup.controllers", "cpuset cpu io memory pids\n")
    for path, files in levels.items():
        for name, text in files.items():
            write(cgroup, (path.strip("/") + "/" + name).lstrip("/"), text)
    return str(proc), str(cgroup)


# --------------------------------------------------------------------------- parsers

def test_parse_meminfo_converts_kb_to_bytes():
    values = br.parse_meminfo(HOST_MEMINFO_24G + "HugePages_Total:       0\n")
    assert values["MemTotal"] == 24 * GIB
    assert values["MemAvailable"] == 23 * GIB
    assert values["HugePages_Total"] == 0


@pytest.mark.parametrize("text, expected", [
    ("max\n", None),
    (V1_UNLIMITED_4K_PAGES, None),
    (V1_UNLIMITED_64K_PAGES, None),
    ("4294967296\n", 4 * GIB),
    ("0\n", 0),
    ("", None),
    ("garbage\n", None),
])
def test_parse_memory_limit(text, expected):
    assert br.parse_memory_limit(text) == expected


def test_reclaimable_cache_prefers_hierarchical_v1_figure():
    stat = br.parse_flat_keyed("inactive_file 10\ntotal_inactive_file 300\nrss 5\n")
    assert br.reclaimable_cache_bytes(stat, 1) == 300
    assert br.reclaimable_cache_bytes(br.parse_flat_keyed("anon 5\ninactive_file 42\n"), 2) == 42
    assert br.reclaimable_cache_bytes({}, 2) == 0


@pytest.mark.parametrize("text, expected", [
    ("max 100000\n", (None, 100000)),
    ("200000 100000\n", (200000, 100000)),
    ("", (None, None)),
])
def test_parse_cpu_max(text, expected):
    assert br.parse_cpu_max(text) == expected


@pytest.mark.parametrize("quota, period, expected", [
    (200000, 100000, 2),
    (150000, 100000, 2),   # 1.5 CPUs still run two compilers
    (50000, 100000, 1),
    (-1, 100000, None),    # v1 "no quota"
    (None, 100000, None),
])
def test_cpus_from_quota_rounds_up(quota, period, expected):
    assert br.cpus_from_quota(quota, period) == expected


def test_cgroup_ancestors():
    assert br.cgroup_ancestors("/a/b/c") == ["/a/b/c", "/a/b", "/a", "/"]
    assert br.cgroup_ancestors("/") == ["/"]


# --------------------------------------------------------------------------- memory readers on fake trees

def test_v1_container_limit_wins_over_host_meminfo(tmp_path):
    """4 GiB docker --memory limit on a 24 GiB host without lxcfs: the cgroup, not /proc/meminfo, decides."""
    proc, cgroup = v1_tree(tmp_path)
    memory = br.read_build_memory(proc, cgroup)
    assert memory["meminfo_available_bytes"] == 23 * GIB
    assert memory["cgroup_limit_bytes"] == 4 * GIB
    assert memory["limit_bytes"] == 4 * GIB
    # 4 GiB limit - (1 GiB usage - 0.5 GiB inactive cache) = 3.5 GiB free for the build.
    assert memory["usable_bytes"] == 3 * GIB + 512 * MIB
    assert memory["cgroup_version"] == 1
    assert memory["source"].startswith("cgroup v1 memory.limit_in_bytes 4.0 GiB at %s/memory" % cgroup)


def test_v1_unlimited_cgroup_falls_back_to_meminfo(tmp_path):
    proc, cgroup = v1_tree(tmp_path, limit=V1_UNLIMITED_4K_PAGES)
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_limit_bytes"] is None
    assert memory["usable_bytes"] == 23 * GIB
    assert memory["source"] == "/proc/meminfo MemAvailable 23.0 GiB"


def test_v1_without_usage_file_uses_the_limit_alone(tmp_path):
    proc, cgroup = v1_tree(tmp_path, usage=None, stat=None)
    memory = br.read_build_memory(proc, cgroup)
    assert memory["usable_bytes"] == 4 * GIB


def test_v1_limit_set_on_a_parent_on_the_host(tmp_path):
    """On a host (path exists under the mount) a parent's limit caps the child that has none of its own."""
    proc, cgroup = v1_tree(tmp_path, limit=V1_UNLIMITED_4K_PAGES, self_cgroup="4:memory:/builds/job7\n")
    write(tmp_path / "cgroup", "memory/builds/memory.limit_in_bytes", "%d\n" % (6 * GIB))
    write(tmp_path / "cgroup", "memory/builds/memory.usage_in_bytes", "%d\n" % (2 * GIB))
    write(tmp_path / "cgroup", "memory/builds/job7/memory.limit_in_bytes", V1_UNLIMITED_4K_PAGES)
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_limit_bytes"] == 6 * GIB
    assert memory["usable_bytes"] == 4 * GIB
    assert "/memory/builds " in memory["source"] + " "


def test_v2_parent_limit_binds_when_child_is_unlimited(tmp_path):
    proc, cgroup = v2_tree(tmp_path, {
        "/lxc": {"memory.max": "4294967296\n", "memory.current": "%d\n" % GIB, "memory.stat": "inactive_file 0\n"},
        "/lxc/101": {"memory.max": "max\n", "memory.current": "%d\n" % GIB},
        "/lxc/101/ns": {"memory.max": "max\n", "memory.current": "%d\n" % GIB},
    })
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_version"] == 2
    assert memory["cgroup_limit_bytes"] == 4 * GIB
    assert memory["usable_bytes"] == 3 * GIB
    assert memory["source"].startswith("cgroup v2 memory.max 4.0 GiB at %s/lxc " % cgroup)


def test_v2_smallest_headroom_wins_across_levels(tmp_path):
    """The child has the lower limit but the parent, shared with siblings, has less room left."""
    proc, cgroup = v2_tree(tmp_path, {
        "/lxc": {"memory.max": "%d\n" % (16 * GIB), "memory.current": "%d\n" % (14 * GIB)},
        "/lxc/101": {"memory.max": "%d\n" % (8 * GIB), "memory.current": "%d\n" % GIB},
        "/lxc/101/ns": {"memory.max": "max\n"},
    })
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_limit_bytes"] == 8 * GIB
    assert memory["limit_bytes"] == 8 * GIB
    assert memory["usable_bytes"] == 2 * GIB
    assert "memory.max 16.0 GiB at %s/lxc " % cgroup in memory["source"]


def test_v2_namespaced_container_reads_the_mount_root(tmp_path):
    """With a private cgroup namespace /proc/self/cgroup says 0::/ and the mount's root is the container."""
    proc, cgroup = v2_tree(tmp_path, {
        "/": {"memory.max": "%d\n" % (2 * GIB), "memory.current": "%d\n" % (512 * MIB),
              "memory.stat": "anon 100\ninactive_file %d\n" % (256 * MIB)},
    }, self_path="/")
    memory = br.read_build_memory(proc, cgroup)
    assert memory["usable_bytes"] == 2 * GIB - 256 * MIB
    assert memory["limit_bytes"] == 2 * GIB


def test_path_outside_the_namespace_root_never_escapes_the_mount(tmp_path):
    """/proc/self/cgroup shows "/../x" for a process outside its cgroup namespace; only the mount root is read."""
    proc, cgroup = v2_tree(tmp_path, {"/": {"memory.max": "%d\n" % (3 * GIB)}}, self_path="/../sibling")
    write(tmp_path, "sibling/memory.max", "%d\n" % GIB)  # next to the mount: must not be read
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_limit_bytes"] == 3 * GIB


def test_meminfo_wins_when_it_is_smaller(tmp_path):
    """With lxcfs (or a busy host) MemAvailable can be below the cgroup's headroom: then it binds."""
    proc, cgroup = v1_tree(tmp_path, limit="%d\n" % (64 * GIB), usage="0", stat="")
    memory = br.read_build_memory(proc, cgroup)
    assert memory["cgroup_limit_bytes"] == 64 * GIB
    assert memory["limit_bytes"] == 23 * GIB
    assert memory["usable_bytes"] == 23 * GIB
    assert memory["source"].startswith("/proc/meminfo MemAvailable")


def test_no_cgroup_and_no_meminfo(tmp_path):
    memory = br.read_build_memory(str(tmp_path / "noproc"), str(tmp_path / "nocgroup"))
    assert memory["usable_bytes"] is None
    assert memory["cgroup_version"] is None


def test_effective_memory_without_memavailable_uses_free_plus_cached():
    memory = br.effective_memory({"MemFree": 3 * GIB, "Cached": GIB}, None)
    assert memory["usable_bytes"] == 4 * GIB


# --------------------------------------------------------------------------- CPU readers

def test_v1_cpu_quota(tmp_path):
    proc, cgroup = v1_tree(tmp_path)
    write(tmp_path / "cgroup", "cpu,cpuacct/cpu.cfs_quota_us", "250000\n")
    write(tmp_path / "cgroup", "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    cpus, source = br.read_cgroup_cpu_quota(proc, cgroup)
    assert cpus == 3
    assert source.startswith("cgroup v1 cpu.cfs_quota_us 250000 / cpu.cfs_period_us 100000 at ")


def test_v1_no_quota(tmp_path):
    proc, cgroup = v1_tree(tmp_path)
    write(tmp_path / "cgroup", "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "cgroup", "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    assert br.read_cgroup_cpu_quota(proc, cgroup) == (None, None)


def test_v2_cpu_quota_tightest_level_wins(tmp_path):
    proc, cgroup = v2_tree(tmp_path, {
        "/lxc": {"cpu.max": "400000 100000\n"},
        "/lxc/101": {"cpu.max": "200000 100000\n"},
        "/lxc/101/ns": {"cpu.max": "max 100000\n"},
    })
    cpus, source = br.read_cgroup_cpu_quota(proc, cgroup)
    assert cpus == 2
    assert source == 'cgroup v2 cpu.max "200000 100000" at %s/lxc/101' % cgroup


@pytest.mark.parametrize("affinity, quota, expected", [
    (8, 2, 2),
    (1, 4, 1),
    (4, None, 4),
    (None, 3, 3),
    (None, None, 6),   # falls back to os.cpu_count (given as 6)
])
def test_usable_cpus(affinity, quota, expected):
    count, source = br.usable_cpus(affinity, quota, "cgroup v2 cpu.max", fallback=6)
    assert count == expected
    assert source


# --------------------------------------------------------------------------- compute_parallelism

def test_parallelism_memory_binds_with_cgroup_source():
    decision = br.compute_parallelism(16 * GIB, "cgroup v2 memory.max 16.0 GiB at /sys/fs/cgroup", 32, "affinity",
                                      per_thread_bytes=5 * GIB, reserve_bytes=2 * GIB, nvcc_threads_max=4)
    assert (decision["max_jobs"], decision["nvcc_threads"]) == (1, 2)
    assert decision["binding"] == "memory"
    assert decision["fits"] is True
    assert decision["reason"] == ("memory: cgroup v2 memory.max 16.0 GiB at /sys/fs/cgroup allows 2 nvcc threads of "
                                  "5.0 GiB after a 2.0 GiB reserve; max_jobs=1, nvcc_threads=2")


def test_parallelism_cpu_binds():
    decision = br.compute_parallelism(200 * GIB, "/proc/meminfo MemAvailable 200.0 GiB", 8, "sched_getaffinity: 8 CPUs",
                                      nvcc_threads_max=2)
    assert (decision["max_jobs"], decision["nvcc_threads"]) == (4, 2)
    assert decision["binding"] == "cpu"
    assert decision["reason"].startswith("cpu: sched_getaffinity: 8 CPUs allows 8 parallel nvcc threads (memory would "
                                         "allow 39")


def test_parallelism_four_gib_cgroup_does_not_fit_a_five_gib_thread():
    decision = br.compute_parallelism(4 * GIB, "cgroup v1 memory.limit_in_bytes 4.0 GiB at /sys/fs/cgroup/memory", 16,
                                      "affinity", per_thread_bytes=5 * GIB, reserve_bytes=GIB)
    assert (decision["max_jobs"], decision["nvcc_threads"]) == (1, 1)
    assert decision["fits"] is False
    assert decision["binding"] == "memory"
    assert "less than one nvcc thread of 5.0 GiB" in decision["reason"]
    assert "cgroup v1 memory.limit_in_bytes 4.0 GiB" in decision["reason"]


def test_parallelism_rejects_nonsense():
    with pytest.raises(ValueError):
        br.compute_parallelism(GIB, "x", 1, "y", per_thread_bytes=0)
    with pytest.raises(ValueError):
        br.compute_parallelism(GIB, "x", 1, "y", reserve_bytes=-1)


@pytest.mark.parametrize("usable_gib, cpus, per_thread_gib, reserve_gib, threads_max", list(itertools.product(
    [0, 1, 3, 4, 7, 16, 24, 96, 500], [1, 2, 3, 16, 64], [1, 3, 5], [0, 2], [1, 2, 4])))
def test_parallelism_invariants(usable_gib, cpus, per_thread_gib, reserve_gib, threads_max):
    decision = br.compute_parallelism(usable_gib * GIB, "m", cpus, "c", per_thread_bytes=per_thread_gib * GIB,
                                      reserve_bytes=reserve_gib * GIB, nvcc_threads_max=threads_max)
    jobs, threads = decision["max_jobs"], decision["nvcc_threads"]
    assert jobs >= 1 and 1 <= threads <= threads_max
    assert jobs * threads <= cpus
    if decision["fits"]:
        assert jobs * threads * per_thread_gib <= usable_gib - reserve_gib
    else:
        assert (jobs, threads) == (1, 1)
        assert usable_gib - reserve_gib < per_thread_gib
