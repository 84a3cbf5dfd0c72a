# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: build_parallelism
short_description: Compute MAX_JOBS and NVCC_THREADS for a CUDA extension build from the memory really available
description:
  - Reads the memory a build may use on the target (the smallest of C(MemAvailable) from C(/proc/meminfo) and, for
    the target's own cgroup and every parent with a limit, the limit minus the working set) and the CPUs it may use
    (C(sched_getaffinity) and the cgroup CPU quota), then splits them into ninja jobs (C(MAX_JOBS)) times nvcc threads
    (C(NVCC_THREADS)) so that RV(max_jobs) * RV(nvcc_threads) * O(per_thread_gib) fits after O(reserve_gib).
  - The cgroup limit always wins over C(/proc/meminfo). Inside an LXC container without lxcfs, or a C(docker run --memory)
    container, C(/proc/meminfo) shows the HOST's memory; flash-attn's built-in heuristic trusts it and starts enough
    nvcc processes to be OOM-killed, which then looks like a CUDA version problem.
  - cgroup v2 (C(memory.max), C(memory.current), C(cpu.max)) and v1 (C(memory.limit_in_bytes),
    C(memory.usage_in_bytes), C(cpu.cfs_quota_us)/C(cpu.cfs_period_us)) are both read; C(max) and v1's huge
    "unlimited" number mean no limit. Inactive page cache (C(inactive_file) in C(memory.stat)) counts as free, because
    the kernel reclaims it before it OOM-kills anything.
  - Returns the numbers, the memory and CPU figures they came from, and a RV(reason) sentence that names the binding
    limit and the file it was read from.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  per_thread_gib:
    description:
      - Peak memory of one nvcc thread (one cicc/ptxas for one C(-gencode) target), in GiB.
      - Measured 3-5 GiB for flash-attn with CUDA 12.8 and above 5 GiB with CUDA 13; lower it only for lighter builds.
    type: float
    default: 5.0
  reserve_gib:
    description:
      - Memory kept free for everything else in the container (pip, the Python process that drives the build, the
        service if it is running), in GiB.
    type: float
    default: 2.0
  max_nvcc_threads:
    description:
      - The most nvcc threads per job (C(NVCC_THREADS)). nvcc parallelises across C(-gencode) targets, so more
        threads than CUDA architectures being built only cost memory; set this to the number of archs
        (C(FLASH_ATTN_CUDA_ARCHS)).
    type: int
    default: 4
  cpus:
    description:
      - Use this many CPUs instead of the ones detected (affinity and cgroup quota).
    type: int
  memory_gib:
    description:
      - Use this much usable memory, in GiB, instead of the detected figure, to ask "what if". The detected figures are
        still returned under RV(memory).
    type: float
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - The memory figure is a snapshot; a build started much later, or next to a busy service, sees less. Run this task
    right before the build.
  - Per-thread peaks differ between CUDA versions and architectures; when a capped build is still OOM-killed, raise
    O(per_thread_gib) rather than guess MAX_JOBS by hand. M(llmops.serving.flash_attn_build_diagnosis) tells an OOM kill
    apart from a real incompatibility.
seealso:
  - module: llmops.serving.flash_attn_build_diagnosis
  - name: cgroup v2 memory interface files
    description: Linux kernel documentation of memory.max, memory.current, memory.stat and memory.events.
    link: https://docs.kernel.org/admin-guide/cgroup-v2.html#memory-interface-files
"""

EXAMPLES = r"""
- name: Size the flash-attn build to the container's cgroup
  llmops.serving.build_parallelism:
    max_nvcc_threads: 1   # FLASH_ATTN_CUDA_ARCHS="80": one target
  register: build_parallelism

- name: Build flash-attn with the computed caps
  ansible.builtin.command:
    cmd: "{{ venv }}/bin/pip install --no-build-isolation flash-attn==2.8.3.post2"
  environment: "{{ build_parallelism.env | combine({'FLASH_ATTN_CUDA_ARCHS': '80'}) }}"

- name: What would a 32 GiB container allow?
  llmops.serving.build_parallelism:
    memory_gib: 32
  register: what_if
"""

RETURN = r"""
max_jobs:
  description: Parallel ninja jobs (C(MAX_JOBS)). At least 1.
  returned: always
  type: int
  sample: 2
nvcc_threads:
  description: nvcc threads per job (C(NVCC_THREADS)). At least 1.
  returned: always
  type: int
  sample: 2
binding:
  description: Which limit bounded the result, C(memory) or C(cpu).
  returned: always
  type: str
  sample: memory
fits:
  description:
    - False when not even one nvcc thread of O(per_thread_gib) fits after O(reserve_gib); the result is then still
      1 x 1 and the build will probably be OOM-killed. A warning says so.
  returned: always
  type: bool
  sample: true
memory:
  description: The memory figures the result came from.
  returned: always
  type: dict
  contains:
    limit_bytes:
      description: The smaller of the tightest cgroup limit and C(MemAvailable).
      type: int
      sample: 4294967296
    usable_bytes:
      description:
        - What the computation used; the smallest of C(MemAvailable) and every cgroup level's limit minus its working
          set, or O(memory_gib) when given.
      type: int
      sample: 3951319040
    source:
      description: The binding figure and the file it was read from.
      type: str
      sample: cgroup v1 memory.limit_in_bytes 4.0 GiB at /sys/fs/cgroup/memory (0.3 GiB in use, 0.0 GiB of it reclaimable cache)
    meminfo_available_bytes:
      description: C(MemAvailable) from C(/proc/meminfo) (the host's figure inside a container without lxcfs).
      type: int
      sample: 24824508416
    cgroup_limit_bytes:
      description: The tightest cgroup memory limit on the target's cgroup or its parents; null when none.
      type: int
      sample: 4294967296
    cgroup_version:
      description: 1 or 2; null when no memory controller is visible.
      type: int
      sample: 1
cpus:
  description: The CPU count the result came from.
  returned: always
  type: dict
  contains:
    count:
      description: CPUs a build may use (or O(cpus)).
      type: int
      sample: 2
    source:
      description: Where the count came from.
      type: str
      sample: "sched_getaffinity: 2 CPUs"
per_thread_bytes:
  description: O(per_thread_gib) in bytes.
  returned: always
  type: int
  sample: 5368709120
reserve_bytes:
  description: O(reserve_gib) in bytes.
  returned: always
  type: int
  sample: 2147483648
reason:
  description: One sentence naming the binding limit, its source and the resulting split.
  returned: always
  type: str
  sample: >-
    memory: cgroup v1 memory.limit_in_bytes 16.0 GiB at /sys/fs/cgroup/memory (0.3 GiB in use, 0.0 GiB of it
    reclaimable cache) allows 2 nvcc threads of 5.0 GiB after a 2.0 GiB reserve; max_jobs=1, nvcc_threads=2
env:
  description: C(MAX_JOBS) and C(NVCC_THREADS) as strings, ready for a task's C(environment).
  returned: always
  type: dict
  sample: {"MAX_JOBS": "1", "NVCC_THREADS": "2"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.build_resources import (
    GIB,
    compute_parallelism,
    gib_text,
    read_build_cpus,
    read_build_memory,
)


def run(params, memory_reader=None, cpu_reader=None):
    """The module's result for ``params`` (pure apart from the two readers, which default to the real ones)."""
    memory_reader = memory_reader or read_build_memory
    cpu_reader = cpu_reader or read_build_cpus
    per_thread_bytes = int(params["per_thread_gib"] * GIB)
    reserve_bytes = int(params["reserve_gib"] * GIB)

    memory = memory_reader()
    usable = memory["usable_bytes"]
    mem_source = memory["source"]
    if params["memory_gib"] is not None:
        usable = int(params["memory_gib"] * GIB)
        mem_source = "memory_gib %s (override; detected: %s)" % (gib_text(usable), memory["source"])

    if params["cpus"] is not None:
        cpu_count, cpu_source = params["cpus"], "cpus option: %d CPUs" % params["cpus"]
    else:
        cpu_count, cpu_source = cpu_reader()

    decision = compute_parallelism(usable, mem_source, cpu_count, cpu_source,
                                   per_thread_bytes=per_thread_bytes, reserve_bytes=reserve_bytes,
                                   nvcc_threads_max=params["max_nvcc_threads"])
    return {
        "changed": False,
        "max_jobs": decision["max_jobs"],
        "nvcc_threads": decision["nvcc_threads"],
        "binding": decision["binding"],
        "fits": decision["fits"],
        "memory": {
            "limit_bytes": memory["limit_bytes"],
            "usable_bytes": usable,
            "source": mem_source,
            "meminfo_available_bytes": memory["meminfo_available_bytes"],
            "cgroup_limit_bytes": memory["cgroup_limit_bytes"],
            "cgroup_version": memory["cgroup_version"],
        },
        "cpus": {"count": cpu_count, "source": cpu_source},
        "per_thread_bytes": per_thread_bytes,
        "reserve_bytes": reserve_bytes,
        "reason": decision["reason"],
        "env": {"MAX_JOBS": str(decision["max_jobs"]), "NVCC_THREADS": str(decision["nvcc_threads"])},
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            per_thread_gib=dict(type="float", default=5.0),
            reserve_gib=dict(type="float", default=2.0),
            max_nvcc_threads=dict(type="int", default=4),
            cpus=dict(type="int"),
            memory_gib=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["per_thread_gib"] <= 0:
        module.fail_json(msg="per_thread_gib must be positive, got %s" % params["per_thread_gib"])
    if params["reserve_gib"] < 0:
        module.fail_json(msg="reserve_gib must not be negative, got %s" % params["reserve_gib"])
    if params["max_nvcc_threads"] < 1:
        module.fail_json(msg="max_nvcc_threads must be at least 1, got %d" % params["max_nvcc_threads"])
    if params["cpus"] is not None and params["cpus"] < 1:
        module.fail_json(msg="cpus must be at least 1, got %d" % params["cpus"])
    if params["memory_gib"] is not None and params["memory_gib"] <= 0:
        module.fail_json(msg="memory_gib must be positive, got %s" % params["memory_gib"])

    result = run(params)
    if result["memory"]["usable_bytes"] is None:
        module.fail_json(msg="no memory figure could be read (neither /proc/meminfo nor a cgroup limit); "
                             "give memory_gib", **result)
    if not result["fits"]:
        module.warn(result["reason"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
