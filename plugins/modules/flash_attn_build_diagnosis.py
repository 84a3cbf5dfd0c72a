# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: flash_attn_build_diagnosis
short_description: Tell an OOM-killed CUDA extension build apart from a real CUDA/compiler incompatibility
description:
  - Reads the log of a failed flash-attn (or other CUDA extension) build and, when given, the kernel log and the build
    cgroup's OOM counters, and says which of two things happened, quoting the decisive line.
  - >-
    C(oom) - the OOM killer stopped cicc/cc1plus/ptxas (C(Killed signal terminated program cc1plus),
    C(nvcc error : 'cicc' died due to signal 9), a bare C(Killed), exit 137 in any of its spellings
    (C(FAILED: [code=137]), C(Error 137), C(returned a non-zero code: 137)), Docker BuildKit's
    C(ResourceExhausted: ... cannot allocate memory), the CUDA front end's C(catastrophic error: out of memory), a
    kernel C(Out of memory: Killed process N (cicc\)) line, or a non-zero C(oom_kill) counter). Lower C(max_jobs).
  - >-
    Lines are read as real logs print them - behind BuildKit's C(#12 5057.8), a timestamp, a C(DEBUG) level, a
    C([build]) tag, a C(>) quote or indentation - and a C(Killed) whose newline was lost (glued to a progress bar,
    or in a log pasted flattened onto one line) still counts.
  - >-
    C(incompatible) - a real CUDA/compiler incompatibility (C(unsupported GNU version), C(#error C++20 or later
    compatible compiler is required to use ATen), C(The detected CUDA version ... mismatches ...),
    C(Unsupported gpu architecture), C(undefined symbol), a compile error in the sources). Fewer jobs will not help.
  - >-
    C(unknown) - neither was found; the message names the last failure line and what to collect to tell an OOM
    kill apart - the kernel log (C(dmesg) or C(journalctl -k), for C(oom-kill) lines) and the build cgroup's
    memory counters (C(memory.events), or C(memory.oom_control), C(memory.max_usage_in_bytes) and C(memory.failcnt)
    on cgroup v1) - leaving out what was given.
  - The earliest decisive line in the build log wins, because what ninja prints after its first failed job is partly
    collateral. Kernel and cgroup evidence decides only when the build log has no decisive line of its own, because dmesg spans
    the whole uptime and the cgroup counters the cgroup's whole life, so on their own they may describe an earlier build.
  - The module reports and never fails because of what it found; it fails only when a file it was given cannot be
    read. Let the play decide what to do with RV(cause), for example fail with RV(message).
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  build_log:
    description: Path of the build's full output on the target (pip with C(-v), or the setup.py/ninja output).
    type: path
    required: true
  kernel_log:
    description:
      - Path of a saved kernel log (C(dmesg) or C(journalctl -k) output) on the target.
    type: path
  read_dmesg:
    description:
      - When O(kernel_log) is not given, run C(dmesg) on the target and read its output, best effort. Inside an
        unprivileged container C(dmesg) is usually refused (C(kernel.dmesg_restrict)); RV(kernel_log_source) then says
        so and the cgroup counters are the remaining evidence.
    type: bool
    default: false
  cgroup_events:
    description:
      - Path of the build cgroup's C(memory.events) (cgroup v2), C(memory.oom_control) (v1, its C(oom_kill) line needs
        Linux 4.13 or later) or C(memory.failcnt) (v1; counts limit hits, reported but never decisive), read after the
        build. For a build that ran in this container that is C(/sys/fs/cgroup/memory.events) or
        C(/sys/fs/cgroup/memory/memory.oom_control).
    type: path
  cgroup_events_before:
    description:
      - Path of a copy of the same file taken before the build, so that only this build's kills count. Without it the
        counters since the cgroup was created are used.
    type: path
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - >-
    The build log must be the full log; C(pip install) without C(-v) hides the compiler output and leaves only
    C(error: subprocess-exited-with-error), which yields C(unknown) unless the kernel log or cgroup counters speak.
seealso:
  - module: llmops.serving.build_parallelism
"""

EXAMPLES = r"""
- name: Keep the cgroup's OOM counters from before the build
  ansible.builtin.copy:
    src: /sys/fs/cgroup/memory.events
    dest: /var/tmp/flash-attn-memory.events.before
    remote_src: true
    mode: "0644"

- name: Build flash-attn, keeping the log
  ansible.builtin.shell:
    cmd: "{{ venv }}/bin/pip install -v --no-build-isolation flash-attn==2.8.3.post2 > /var/tmp/flash-attn-build.log 2>&1"
  environment: "{{ build_parallelism.env }}"
  register: flash_attn_build
  ignore_errors: true

- name: Say why it failed
  llmops.serving.flash_attn_build_diagnosis:
    build_log: /var/tmp/flash-attn-build.log
    read_dmesg: true
    cgroup_events: /sys/fs/cgroup/memory.events
    cgroup_events_before: /var/tmp/flash-attn-memory.events.before
  register: diagnosis
  when: flash_attn_build is failed

- name: Stop with the real cause
  ansible.builtin.fail:
    msg: "flash-attn build failed: {{ diagnosis.message }}"
  when: flash_attn_build is failed
"""

RETURN = r"""
cause:
  description: C(oom), C(incompatible) or C(unknown).
  returned: always
  type: str
  sample: oom
decisive_line:
  description: The line the verdict rests on, verbatim (stripped); null when nothing decisive was found.
  returned: always
  type: str
  sample: "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"
message:
  description: One sentence for a human, naming the cause, the decisive line and what to do.
  returned: always
  type: str
  sample: >-
    out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs): nvcc error   : 'cicc' died due to signal 9
    (Kill signal) (nvcc reports a sub-process killed by signal 9)
evidence:
  description: Every OOM or incompatibility line found, in the build log's order, then kernel and cgroup evidence.
  returned: always
  type: list
  elements: dict
  contains:
    source:
      description: C(build_log), C(kernel_log) or C(cgroup).
      type: str
    kind:
      description: C(oom), C(incompatible) or C(pressure) (limit hits without a kill).
      type: str
    label:
      description: What the line means, in plain words.
      type: str
    line:
      description: The line, verbatim (stripped).
      type: str
cgroup_oom_kills:
  description: OOM kills the cgroup counted (since O(cgroup_events_before) when given); 0 without O(cgroup_events).
  returned: always
  type: int
  sample: 1
kernel_log_source:
  description: Where the kernel log came from (the O(kernel_log) path, C(dmesg)), or why there was none.
  returned: always
  type: str
  sample: "dmesg unavailable: dmesg: read kernel buffer failed: Operation not permitted"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.llmops.serving.plugins.module_utils.build_failure import classify_build_failure


def _read(module, path, what):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        module.fail_json(msg="cannot read the %s %s: %s" % (what, path, to_native(exc)))
    return None


def _dmesg(module):
    """(text or None, source phrase): the kernel ring buffer, best effort."""
    binary = module.get_bin_path("dmesg")
    if binary is None:
        return None, "dmesg unavailable: no dmesg binary on the target"
    rc, out, err = module.run_command([binary], check_rc=False)
    if rc != 0:
        return None, "dmesg unavailable: %s" % (err.strip() or "exit %d" % rc)
    return out, "dmesg"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            build_log=dict(type="path", required=True),
            kernel_log=dict(type="path"),
            read_dmesg=dict(type="bool", default=False),
            cgroup_events=dict(type="path"),
            cgroup_events_before=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["cgroup_events_before"] and not params["cgroup_events"]:
        module.fail_json(msg="cgroup_events_before needs cgroup_events (the same file read after the build)")

    build_log = _read(module, params["build_log"], "build log")
    kernel_log = None
    kernel_log_source = "none given (set kernel_log or read_dmesg)"
    if params["kernel_log"]:
        kernel_log = _read(module, params["kernel_log"], "kernel log")
        kernel_log_source = params["kernel_log"]
    elif params["read_dmesg"]:
        kernel_log, kernel_log_source = _dmesg(module)
    cgroup_events = _read(module, params["cgroup_events"], "cgroup events file") if params["cgroup_events"] else None
    cgroup_events_before = _read(module, params["cgroup_events_before"], "cgroup events copy") \
        if params["cgroup_events_before"] else None

    verdict = classify_build_failure(build_log, kernel_log=kernel_log, cgroup_events=cgroup_events,
                                     cgroup_events_before=cgroup_events_before)
    module.exit_json(changed=False, kernel_log_source=kernel_log_source, **verdict)


if __name__ == "__main__":
    main()
