# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How much memory and how many CPUs a CUDA extension build really has, and how to split them into ninja jobs.

Why this exists: flash-attn's own heuristic reads /proc/meminfo, which inside an LXC container without lxcfs (and
inside a plain ``docker run --memory``) shows the HOST's memory, so it starts far more nvcc processes than the
container's cgroup allows and the OOM killer stops cicc/cc1plus. Here the cgroup limit always wins.

Memory that is "usable" by the build is the smallest of:

* ``MemAvailable`` from /proc/meminfo (the kernel's own estimate, page cache included);
* for every ancestor cgroup that has a limit (the process's own cgroup up to the root of the mount, because a parent's
  limit caps its children): ``limit - (usage - inactive_file)``. ``inactive_file`` from memory.stat is page cache the
  kernel reclaims before it OOM-kills anything in that cgroup, so it is not counted as used; ``active_file`` is
  counted as used (it is reclaimable too, but only after it ages, so counting it is the conservative side). This is
  the same "working set" that ``docker stats`` and the kubelet use.

Parsers are pure functions of the text the kernel prints. Readers take ``proc_root`` / ``cgroup_root`` so unit tests
point them at fake trees; a file that is missing or unreadable means "no information from there", never a crash.
"""

from __future__ import annotations

import math
import os

from ansible_collections.llmops.serving.plugins.module_utils.procfs import parse_cgroup

GIB = 1024 ** 3

PROC_ROOT = "/proc"
CGROUP_ROOT = "/sys/fs/cgroup"

# cgroup v1 prints "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 with 4 KiB pages, other values
# with other page sizes). No machine has 4 EiB of memory, so anything at or above 2**60 is treated as unlimited.
UNLIMITED_AT_OR_ABOVE = 1 << 60

DEFAULT_PER_THREAD_BYTES = 5 * GIB
DEFAULT_RESERVE_BYTES = 2 * GIB
DEFAULT_NVCC_THREADS_MAX = 4

# v1 cpu controller directory names seen in practice (separate, or co-mounted with cpuacct).
V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
V1_MEMORY_DIRS = ("memory",)

_READ_ERRORS = (OSError, UnicodeDecodeError)


def _read_text(path):
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _read_or_none(path):
    try:
        return _read_text(path)
    except _READ_ERRORS:
        return None


def gib_text(value):
    """``4294967296`` -> ``"4.0 GiB"`` (one decimal: enough to tell limits apart in a sentence)."""
    return "%.1f GiB" % (value / float(GIB))


# --------------------------------------------------------------------------- pure parsers

def parse_meminfo(text):
    """Parse /proc/meminfo into {field: bytes}. Values printed with "kB" are KiB (the kernel's kB is 1024)."""
    values = {}
    for line in text.splitlines():
        name, separator, rest = line.partition(":")
        fields = rest.split()
        if not separator or not fields:
            continue
        try:
            number = int(fields[0])
        except ValueError:
            continue
        if len(fields) > 1 and fields[1] == "kB":
            number *= 1024
        values[name.strip()] = number
    return values


def parse_memory_limit(text):
    """Parse memory.max (v2) or memory.limit_in_bytes (v1): bytes, or None for "no limit".

    v2 writes ``max``; v1 writes a huge number (see UNLIMITED_AT_OR_ABOVE). Anything unparsable is None too, because
    a limit we cannot read must not be invented.
    """
    value = text.strip()
    if value == "max" or not value:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    if number < 0 or number >= UNLIMITED_AT_OR_ABOVE:
        return None
    return number


def parse_flat_keyed(text):
    """Parse "key value" lines (memory.stat, memory.events, memory.oom_control, cpu.stat) into {key: int}."""
    values = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2:
            continue
        try:
            values[fields[0]] = int(fields[1])
        except ValueError:
            continue
    return values


def reclaimable_cache_bytes(stat, version):
    """Inactive page cache from a parsed memory.stat: the part of "usage" the kernel reclaims before an OOM kill.

    v1 prints both the cgroup's own ``inactive_file`` and the hierarchical ``total_inactive_file``; usage_in_bytes
    is hierarchical, so the hierarchical figure is the one that matches it. v2 memory.stat is hierarchical already.
    """
    if version == 1 and "total_inactive_file" in stat:
        return stat["total_inactive_file"]
    return stat.get("inactive_file", 0)


def parse_cpu_max(text):
    """Parse v2 cpu.max ("max 100000" or "200000 100000") into (quota_us or None, period_us)."""
    fields = text.split()
    if not fields:
        return None, None
    period = None
    if len(fields) > 1:
        try:
            period = int(fields[1])
        except ValueError:
            period = None
    if fields[0] == "max":
        return None, period
    try:
        return int(fields[0]), period
    except ValueError:
        return None, period


def cpus_from_quota(quota_us, period_us):
    """CPUs a CFS quota allows, rounded UP (a 1.5-CPU quota still runs two compilers, each at 75 %), or None."""
    if quota_us is None or period_us is None or quota_us <= 0 or period_us <= 0:
        return None
    return max(1, int(math.ceil(quota_us / float(period_us))))


def cgroup_ancestors(path):
    """``/a/b`` -> ``["/a/b", "/a", "/"]``: the cgroup and every parent up to the root of the hierarchy."""
    parts = [part for part in path.split("/") if part]
    chain = []
    for length in range(len(parts), 0, -1):
        chain.append("/" + "/".join(parts[:length]))
    chain.append("/")
    return chain


def existing_cgroup_dirs(mount, path):
    """Directories under ``mount`` for the cgroup ``path`` and its parents, deepest first, that exist.

    Inside a container the mount is usually the container's own cgroup (a namespaced or bind-mounted view) while
    /proc/self/cgroup still names the path as seen from the host (``/docker/<id>``): that path does not exist under
    the mount, and the mount's root, which is always included, is the container's cgroup. On a host, or with
    ``--cgroupns=host``, the full path exists and every parent is read as well.
    """
    dirs = []
    if ".." in path.split("/"):
        # A process outside its cgroup namespace's root sees "/../x": nothing under the mount is its cgroup.
        path = "/"
    for ancestor in cgroup_ancestors(path):
        candidate = os.path.normpath(os.path.join(mount, ancestor.lstrip("/"))) if ancestor != "/" else mount
        if os.path.isdir(candidate) and candidate not in dirs:
            dirs.append(candidate)
    if mount not in dirs and os.path.isdir(mount):
        dirs.append(mount)
    return dirs


# --------------------------------------------------------------------------- readers

def read_meminfo(proc_root=None):
    """Parsed /proc/meminfo, or {} when it cannot be read."""
    text = _read_or_none(os.path.join(proc_root or PROC_ROOT, "meminfo"))
    return parse_meminfo(text) if text is not None else {}


def _self_cgroups(proc_root):
    text = _read_or_none(os.path.join(proc_root or PROC_ROOT, "self", "cgroup"))
    return parse_cgroup(text) if text is not None else []


def _v1_entry(entries, controller):
    for entry in entries:
        if entry["hierarchy"] != 0 and controller in entry["controllers"]:
            return entry
    return None


def _v2_entry(entries):
    for entry in entries:
        if entry["hierarchy"] == 0 and not entry["controllers"]:
            return entry
    return None


def _memory_hierarchy(proc_root, cgroup_root):
    """(version, mount, path) of the memory controller for this process, or None when there is none."""
    entries = _self_cgroups(proc_root)
    v1 = _v1_entry(entries, "memory")
    if v1 is not None:
        for name in V1_MEMORY_DIRS:
            mount = os.path.join(cgroup_root, name)
            if os.path.isdir(mount):
                return 1, mount, v1["path"]
    v2 = _v2_entry(entries)
    if v2 is not None and os.path.isfile(os.path.join(cgroup_root, "cgroup.controllers")):
        return 2, cgroup_root, v2["path"]
    return None


def read_cgroup_memory_levels(proc_root=None, cgroup_root=None):
    """Every cgroup level above this process that has a memory limit, with its headroom.

    Returns ``{"version": 1|2, "levels": [...]}`` (levels deepest first; each ``path``, ``file``, ``limit_bytes``,
    ``usage_bytes``, ``reclaimable_bytes``, ``headroom_bytes``), or None when no memory controller is visible.
    A level whose usage cannot be read gets its full limit as headroom: the limit alone still binds.
    """
    cgroup_root = cgroup_root or CGROUP_ROOT
    found = _memory_hierarchy(proc_root, cgroup_root)
    if found is None:
        return None
    version, mount, path = found
    limit_file, usage_file = ("memory.limit_in_bytes", "memory.usage_in_bytes") if version == 1 \
        else ("memory.max", "memory.current")
    levels = []
    for directory in existing_cgroup_dirs(mount, path):
        limit_text = _read_or_none(os.path.join(directory, limit_file))
        limit = parse_memory_limit(limit_text) if limit_text is not None else None
        if limit is None:
            continue
        usage_text = _read_or_none(os.path.join(directory, usage_file))
        usage = None
        if usage_text is not None and usage_text.strip().isdigit():
            usage = int(usage_text.strip())
        stat_text = _read_or_none(os.path.join(directory, "memory.stat"))
        reclaimable = reclaimable_cache_bytes(parse_flat_keyed(stat_text), version) if stat_text is not None else 0
        if usage is None:
            working_set = 0
        else:
            working_set = max(0, usage - min(reclaimable, usage))
        levels.append({
            "path": directory,
            "file": limit_file,
            "limit_bytes": limit,
            "usage_bytes": usage,
            "reclaimable_bytes": reclaimable,
            "headroom_bytes": max(0, limit - working_set),
        })
    return {"version": version, "levels": levels}


def describe_cgroup_level(version, level):
    """One phrase naming a cgroup limit and where it was read, for the ``reason`` sentence."""
    phrase = "cgroup v%d %s %s at %s" % (version, level["file"], gib_text(level["limit_bytes"]), level["path"])
    if level["usage_bytes"] is not None:
        phrase += " (%s in use, %s of it reclaimable cache)" % (
            gib_text(level["usage_bytes"]), gib_text(level["reclaimable_bytes"]))
    return phrase


def effective_memory(meminfo, cgroup):
    """Combine /proc/meminfo and the cgroup levels into what a build may use (pure).

    Returns a dict: ``limit_bytes`` (the smaller of the tightest cgroup limit and MemAvailable), ``usable_bytes``
    (the smallest headroom: MemAvailable or any cgroup level's limit minus its working set), ``source`` (a phrase
    naming the binding figure and its file), ``meminfo_available_bytes``, ``cgroup_limit_bytes`` (None when no cgroup
    limit applies) and ``cgroup_version``.
    """
    available = meminfo.get("MemAvailable")
    if available is None and "MemFree" in meminfo:
        # Kernels before 3.14 have no MemAvailable; free + page cache is the classic approximation.
        available = meminfo["MemFree"] + meminfo.get("Cached", 0)
    levels = cgroup["levels"] if cgroup else []
    version = cgroup["version"] if cgroup else None

    candidates = []
    if available is not None:
        candidates.append((available, available, "/proc/meminfo MemAvailable %s" % gib_text(available)))
    for level in levels:
        candidates.append((level["headroom_bytes"], level["limit_bytes"], describe_cgroup_level(version, level)))
    if not candidates:
        return {"limit_bytes": None, "usable_bytes": None, "source": "no /proc/meminfo and no cgroup limit readable",
                "meminfo_available_bytes": None, "cgroup_limit_bytes": None, "cgroup_version": version}

    usable, _limit, source = min(candidates, key=lambda item: item[0])
    cgroup_limit = min((level["limit_bytes"] for level in levels), default=None)
    limits = [value for value in (cgroup_limit, available) if value is not None]
    return {
        "limit_bytes": min(limits),
        "usable_bytes": usable,
        "source": source,
        "meminfo_available_bytes": available,
        "cgroup_limit_bytes": cgroup_limit,
        "cgroup_version": version,
    }


def read_build_memory(proc_root=None, cgroup_root=None):
    """``effective_memory`` of this machine/container."""
    return effective_memory(read_meminfo(proc_root), read_cgroup_memory_levels(proc_root, cgroup_root))


def _v1_cpu_mount(cgroup_root):
    for name in V1_CPU_DIRS:
        mount = os.path.join(cgroup_root, name)
        if os.path.isfile(os.path.join(mount, "cpu.cfs_quota_us")):
            return mount
    return None


def read_cgroup_cpu_quota(proc_root=None, cgroup_root=None):
    """The tightest CFS quota on this process's cgroup or its parents: (cpus, phrase) or (None, None)."""
    cgroup_root = cgroup_root or CGROUP_ROOT
    entries = _self_cgroups(proc_root)
    best = (None, None)
    v1 = _v1_entry(entries, "cpu")
    v1_mount = _v1_cpu_mount(cgroup_root) if v1 is not None else None
    if v1_mount is not None:
        for directory in existing_cgroup_dirs(v1_mount, v1["path"]):
            quota_text = _read_or_none(os.path.join(directory, "cpu.cfs_quota_us"))
            period_text = _read_or_none(os.path.join(directory, "cpu.cfs_period_us"))
            if quota_text is None or period_text is None:
                continue
            try:
                quota, period = int(quota_text.strip()), int(period_text.strip())
            except ValueError:
                continue
            cpus = cpus_from_quota(quota, period)
            if cpus is not None and (best[0] is None or cpus < best[0]):
                best = (cpus, "cgroup v1 cpu.cfs_quota_us %d / cpu.cfs_period_us %d at %s" % (quota, period, directory))
        return best
    v2 = _v2_entry(entries)
    if v2 is not None and os.path.isfile(os.path.join(cgroup_root, "cgroup.controllers")):
        for directory in existing_cgroup_dirs(cgroup_root, v2["path"]):
            text = _read_or_none(os.path.join(directory, "cpu.max"))
            if text is None:
                continue
            quota, period = parse_cpu_max(text)
            cpus = cpus_from_quota(quota, period)
            if cpus is not None and (best[0] is None or cpus < best[0]):
                best = (cpus, "cgroup v2 cpu.max \"%s\" at %s" % (text.strip(), directory))
    return best


def read_affinity():
    """CPUs this process may run on (cpuset and taskset included), or None where the platform cannot say."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cpus(affinity, quota_cpus, quota_source, fallback=None):
    """Combine affinity and the CFS quota (pure): (count, source phrase). The smaller wins; never below 1."""
    if affinity is not None and (quota_cpus is None or affinity <= quota_cpus):
        return max(1, affinity), "sched_getaffinity: %d CPUs" % affinity
    if quota_cpus is not None:
        return max(1, quota_cpus), "%s = %d CPUs" % (quota_source, quota_cpus)
    count = fallback if fallback else 1
    return max(1, count), "os.cpu_count: %d CPUs" % count


def read_build_cpus(proc_root=None, cgroup_root=None):
    """(count, source) of CPUs a build may use here."""
    quota_cpus, quota_source = read_cgroup_cpu_quota(proc_root, cgroup_root)
    return usable_cpus(read_affinity(), quota_cpus, quota_source, fallback=os.cpu_count())


# --------------------------------------------------------------------------- the decision

def compute_parallelism(mem_available_bytes, mem_source, cpus, cpu_source,
                        per_thread_bytes=DEFAULT_PER_THREAD_BYTES, reserve_bytes=DEFAULT_RESERVE_BYTES,
                        nvcc_threads_max=DEFAULT_NVCC_THREADS_MAX):
    """Split the usable memory and CPUs into ninja jobs (MAX_JOBS) x nvcc threads (NVCC_THREADS). Pure.

    Every nvcc thread runs its own cicc/ptxas for one -gencode target and peaks at about ``per_thread_bytes``, so the
    build needs ``max_jobs * nvcc_threads * per_thread_bytes`` at once; that product stays within
    ``mem_available_bytes - reserve_bytes``, and ``max_jobs * nvcc_threads`` stays within ``cpus``. Threads are filled
    first (up to ``nvcc_threads_max``, as flash-attn's NVCC_THREADS default does), the rest becomes jobs. nvcc
    threads only help when several architectures are built: set ``nvcc_threads_max`` to the number of CUDA archs.

    When not even one thread fits, the answer is still 1 x 1 (a build cannot run with fewer) and ``fits`` is False,
    so callers can warn that this build will probably be OOM-killed.

    Returns a dict: ``max_jobs``, ``nvcc_threads``, ``binding`` ("memory" or "cpu"), ``fits``, ``memory_slots``,
    ``cpu_slots``, ``reason``.
    """
    if per_thread_bytes <= 0:
        raise ValueError("per_thread_bytes must be positive, got %r" % per_thread_bytes)
    if reserve_bytes < 0:
        raise ValueError("reserve_bytes must not be negative, got %r" % reserve_bytes)
    nvcc_threads_max = max(1, int(nvcc_threads_max))
    cpu_slots = max(1, int(cpus))
    after_reserve = max(0, (mem_available_bytes or 0) - reserve_bytes)
    memory_slots = int(after_reserve // per_thread_bytes)
    fits = memory_slots >= 1

    slots = max(1, min(memory_slots, cpu_slots))
    nvcc_threads = min(nvcc_threads_max, slots)
    max_jobs = max(1, slots // nvcc_threads)
    binding = "memory" if memory_slots <= cpu_slots else "cpu"
    split = "max_jobs=%d, nvcc_threads=%d" % (max_jobs, nvcc_threads)

    if not fits:
        reason = ("memory: %s leaves %s after a %s reserve, less than one nvcc thread of %s; even max_jobs=1, "
                  "nvcc_threads=1 will probably be OOM-killed: raise the memory limit or build fewer archs"
                  % (mem_source, gib_text(after_reserve), gib_text(reserve_bytes), gib_text(per_thread_bytes)))
    elif binding == "memory":
        reason = ("memory: %s allows %d nvcc thread%s of %s after a %s reserve; %s"
                  % (mem_source, memory_slots, "" if memory_slots == 1 else "s", gib_text(per_thread_bytes),
                     gib_text(reserve_bytes), split))
    else:
        reason = ("cpu: %s allows %d parallel nvcc thread%s (memory would allow %d: %s); %s"
                  % (cpu_source, cpu_slots, "" if cpu_slots == 1 else "s", memory_slots, mem_source, split))
    return {
        "max_jobs": max_jobs,
        "nvcc_threads": nvcc_threads,
        "binding": binding,
        "fits": fits,
        "memory_slots": memory_slots,
        "cpu_slots": cpu_slots,
        "reason": reason,
    }
