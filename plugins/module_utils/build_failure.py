# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Say why a CUDA extension build (flash-attn and the like) failed: out of memory, or a real incompatibility.

An OOM-killed nvcc/cicc/cc1plus ends in the same ``ninja: build stopped: subcommand failed`` and ``Error compiling
objects for extension`` as a genuine error, and is routinely misread as a CUDA or torch version problem. The build
log, the kernel log and the cgroup's OOM counters together tell the two apart.

Ordering rule (the first failure wins):

* The build log is read top to bottom and the EARLIEST line that is either an OOM kill or a known incompatibility is
  decisive. ninja prints a job's output when the job ends; once one job fails it starts no new jobs but lets running
  ones finish, so what comes after the first failure is partly collateral. An incompatibility printed before any kill
  is the real blocker (fewer jobs would not fix it); a kill printed first means the build never got far enough to show
  whether anything else is wrong, so it is OOM, and later incompatibility lines are reported as "also seen".
* Kernel-log and cgroup evidence has no position in the build log. It decides only when the build log has no decisive
  line of its own (a bare ``ninja: build stopped``, a truncated pip log): then an OOM kill of a compiler process, or a
  non-zero ``oom_kill`` counter of the build's cgroup, makes it OOM. When the build log shows an incompatibility and
  no kill at all, a kernel OOM line is mentioned but does not win: dmesg covers the whole uptime and the memory
  counters the whole life of the cgroup, so they may describe an earlier build.
* ``memory.events`` / ``memory.oom_control`` counters are cumulative; give the copy taken before the build as
  ``cgroup_events_before`` to count only this build's kills. ``memory.failcnt`` counts hits of the limit, not kills
  (the kernel reclaims and carries on), so it is reported but never decides.
"""

from __future__ import annotations

import re

CAUSE_OOM = "oom"
CAUSE_INCOMPATIBLE = "incompatible"
CAUSE_UNKNOWN = "unknown"

OOM_MESSAGE = "out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs)"
INCOMPATIBLE_PREFIX = "a real CUDA/compiler incompatibility: "

# Processes a CUDA extension build runs: a kernel OOM kill of one of these is a kill of the build.
BUILD_PROCESSES = frozenset([
    "cicc", "cc1plus", "cc1", "ptxas", "nvcc", "cudafe++", "fatbinary", "nvlink", "ld", "ld.bfd", "ld.gold",
    "collect2", "as", "ninja", "c++", "g++", "gcc", "cc", "clang", "clang++", "sccache", "ccache", "cmake", "make",
    "pip", "uv",
])

# Docker BuildKit ("#12 5057.8 ") and legacy builder ("515.6 ") prefix every line with a step and a time.
_BUILD_PREFIX = r"^(?:#\d+\s+)?(?:\d+(?:\.\d+)?\s+)?\s*"

# (kind, label, compiled regex). Labels say in plain words what the line means.
OOM_PATTERNS = [
    ("oom", "the compiler driver reports its cc1plus/cicc child killed by SIGKILL",
     re.compile(r"fatal error: Killed signal terminated program (\S+)")),
    ("oom", "gcc reports cc1plus killed (older gcc wording)",
     re.compile(r"internal compiler error: Killed \(program (\S+)\)")),
    ("oom", "nvcc reports a sub-process killed by signal 9",
     re.compile(r"nvcc error\s*:\s*'([^']+)' died due to signal 9\b")),
    ("oom", "the linker was killed by signal 9",
     re.compile(r"(\S+) terminated with signal 9 \[Killed\]")),
    ("oom", "the shell reports a child killed by SIGKILL",
     re.compile(_BUILD_PREFIX + r"Killed\s*$")),
    ("oom", "bash reports a step's command killed by SIGKILL",
     re.compile(r"^\S+: line \d+:\s+\d+ Killed\s")),
    ("oom", "a build step exited with 137 / -9 (SIGKILL, almost always the OOM killer)",
     re.compile(r"(?:exit (?:status|code):?\s*137\b|exit status -9\b|returned non-zero exit status -9\b|"
                r"died with <Signals\.SIGKILL: 9>)")),
]

INCOMPATIBLE_PATTERNS = [
    ("incompatible", "the host compiler is newer than this CUDA toolkit supports",
     re.compile(r"#error\s+--\s+unsupported (?:GNU|clang|Microsoft Visual Studio) version")),
    ("incompatible", "the C++ standard the sources are built with is older than the headers require",
     re.compile(r"#error\s+C\+\+\d+ or later compatible compiler is required")),
    ("incompatible", "the C++ standard the sources are built with is older than the headers require",
     re.compile(r"requires compiler and library support for the ISO C\+\+ \d+ standard")),
    ("incompatible", "the toolkit's CUDA version differs from the one torch was built with",
     re.compile(r"The detected CUDA version \([^)]*\) mismatches the version that was used to compile")),
    ("incompatible", "the toolkit does not know a requested GPU architecture",
     re.compile(r"(?:Unsupported gpu architecture '?compute_\w+|Value '[^']*' is not defined for option "
                r"'gpu-architecture')")),
    ("incompatible", "the binary has no code for this GPU's architecture",
     re.compile(r"no kernel image is available for execution on the device")),
    ("incompatible", "an extension was built against a different torch/C++ ABI",
     re.compile(r"undefined symbol: \S+")),
    ("incompatible", "the CUDA toolkit was not found",
     re.compile(r"(?:CUDA_HOME environment variable is not set|nvcc: not found|No such file or directory: "
                r"'[^']*nvcc')")),
    ("incompatible", "a header the build needs is missing",
     re.compile(r"fatal error: [\w./+-]+: No such file or directory")),
    ("incompatible", "the installed torch/CUDA is older than this package supports",
     re.compile(r"(?:FlashAttention is only supported on CUDA [\d.]+ and above|"
                r"FlashAttention requires PyTorch [\d.]+ and above)")),
    ("incompatible", "a compile error in the sources (not a kill)",
     re.compile(r"(?:\.(?:cu|cuh|cpp|cc|cxx|h|hpp)(?::\d+){1,2}: (?:fatal )?error: |"
                r"\.(?:cu|cuh|h|hpp)\(\d+\): error\b)")),
]

# Lines that say "the build failed" without saying why: shown when nothing decisive is found.
GENERIC_FAILURE = re.compile(r"(?:ninja: build stopped|Error compiling objects for extension|"
                             r"error: command '[^']*' failed with exit code|CalledProcessError: Command '\['ninja'|"
                             r"^\s*FAILED: |Failed to build |ERROR: Failed building wheel|died due to signal \d+)")

KERNEL_KILL = re.compile(r"(Memory cgroup out of memory|Out of memory): Kill(?:ed)? process (\d+) \(([^)]+)\)")
KERNEL_OOM_KILL_TASK = re.compile(r"oom-kill:.*?\btask=([^,\s]+)")
KERNEL_OOM_KILL_PID = re.compile(r"oom-kill:.*?\bpid=(\d+)")
KERNEL_INVOKED = re.compile(r"(\S+) invoked oom-killer")


def _strip(line):
    return line.strip()


def scan_build_log(text):
    """Every OOM or incompatibility line in a build log, in order: dicts ``index``, ``kind``, ``label``, ``line``."""
    findings = []
    for index, line in enumerate((text or "").splitlines()):
        for kind, label, pattern in OOM_PATTERNS + INCOMPATIBLE_PATTERNS:
            if pattern.search(line):
                findings.append({"index": index, "kind": kind, "label": label, "line": _strip(line)})
                break
    return findings


def last_generic_failure(text):
    """The last "the build failed" line (no cause in it), or None."""
    found = None
    for line in (text or "").splitlines():
        if GENERIC_FAILURE.search(line):
            found = _strip(line)
    return found


def scan_kernel_log(text):
    """OOM kills in a kernel log (dmesg / journalctl -k): dicts ``process``, ``build_process`` (bool), ``line``."""
    kills = []
    seen = set()
    for line in (text or "").splitlines():
        match = KERNEL_KILL.search(line)
        process = pid = None
        if match:
            pid, process = match.group(2), match.group(3)
        else:
            task = KERNEL_OOM_KILL_TASK.search(line)
            if task:
                process = task.group(1)
                pid_match = KERNEL_OOM_KILL_PID.search(line)
                pid = pid_match.group(1) if pid_match else None
        if process is None:
            continue
        # One kill prints both an "oom-kill:" summary and a "Killed process" line: report it once.
        if pid is not None and (pid, process) in seen:
            continue
        seen.add((pid, process))
        kills.append({"process": process, "build_process": process in BUILD_PROCESSES, "line": _strip(line)})
    return kills


def parse_counters(text):
    """Parse memory.events / memory.oom_control / memory.failcnt content into {key: int}.

    memory.failcnt is a bare number; it is returned as ``{"failcnt": N}``.
    """
    counters = {}
    stripped = (text or "").strip()
    if stripped.isdigit():
        return {"failcnt": int(stripped)}
    for line in stripped.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("-").isdigit():
            counters[fields[0]] = int(fields[1])
    return counters


def cgroup_oom_kills(events_text, events_before_text=None):
    """``oom_kill`` kills counted by the cgroup during the build (or ever, without a before-copy), and failcnt."""
    after = parse_counters(events_text)
    before = parse_counters(events_before_text) if events_before_text is not None else {}
    kills = after.get("oom_kill", 0) - before.get("oom_kill", 0)
    failcnt = after.get("failcnt")
    if failcnt is not None and "failcnt" in before:
        failcnt -= before["failcnt"]
    return max(0, kills), failcnt


def classify_build_failure(build_log, kernel_log=None, cgroup_events=None, cgroup_events_before=None):
    """Classify a failed CUDA extension build. Pure.

    Returns a dict: ``cause`` ("oom", "incompatible" or "unknown"), ``decisive_line`` (the quoted line, or None),
    ``message`` (one sentence for a human), ``evidence`` (a list of ``{"source", "kind", "label", "line"}``) and
    ``cgroup_oom_kills``. See the module docstring for the ordering rule.
    """
    findings = scan_build_log(build_log)
    kernel_kills = scan_kernel_log(kernel_log)
    build_kills = [kill for kill in kernel_kills if kill["build_process"]]
    other_kills = [kill for kill in kernel_kills if not kill["build_process"]]
    cgroup_kills, failcnt = cgroup_oom_kills(cgroup_events, cgroup_events_before) if cgroup_events is not None \
        else (0, None)

    evidence = [{"source": "build_log", "kind": finding["kind"], "label": finding["label"], "line": finding["line"]}
                for finding in findings]
    evidence += [{"source": "kernel_log", "kind": "oom", "label": _kill_label(kill), "line": kill["line"]}
                 for kill in kernel_kills]
    if cgroup_kills:
        evidence.append({"source": "cgroup", "kind": "oom", "label": "the build's cgroup counted OOM kills",
                         "line": "oom_kill %d" % cgroup_kills})
    if failcnt:
        evidence.append({"source": "cgroup", "kind": "pressure", "label": "the cgroup hit its memory limit "
                         "(reclaim, not necessarily a kill)", "line": "failcnt %d" % failcnt})

    first = findings[0] if findings else None
    later_incompatible = [f for f in findings[1:] if f["kind"] == "incompatible"]
    any_oom_in_log = any(f["kind"] == "oom" for f in findings)

    if first is not None and first["kind"] == "oom":
        message = "%s: %s (%s)" % (OOM_MESSAGE, first["line"], first["label"])
        confirmation = _confirmation(build_kills, cgroup_kills)
        if confirmation:
            message += "; " + confirmation
        if later_incompatible:
            message += ("; also seen after the kill: %r (%s), which may be collateral: rebuild with fewer jobs to "
                        "find out" % (later_incompatible[0]["line"], later_incompatible[0]["label"]))
        return _result(CAUSE_OOM, first["line"], message, evidence, cgroup_kills)

    if first is not None:
        message = "%s%s (%s); lowering max_jobs will not fix this" % (
            INCOMPATIBLE_PREFIX, first["line"], first["label"])
        if any_oom_in_log or build_kills or cgroup_kills:
            message += ("; an OOM kill was also seen (%s), after or apart from this error: lower max_jobs as well"
                        % _first_oom_line(findings, build_kills, cgroup_kills))
        return _result(CAUSE_INCOMPATIBLE, first["line"], message, evidence, cgroup_kills)

    if build_kills:
        kill = build_kills[0]
        message = "%s: the kernel killed %s: %s" % (OOM_MESSAGE, kill["process"], kill["line"])
        generic = last_generic_failure(build_log)
        if generic:
            message += "; the build log only says %r" % generic
        return _result(CAUSE_OOM, kill["line"], message, evidence, cgroup_kills)

    if cgroup_kills:
        line = "oom_kill %d" % cgroup_kills
        message = "%s: the build's cgroup counted %d OOM kill%s (memory.events / memory.oom_control)" % (
            OOM_MESSAGE, cgroup_kills, "" if cgroup_kills == 1 else "s")
        return _result(CAUSE_OOM, line, message, evidence, cgroup_kills)

    generic = last_generic_failure(build_log)
    message = "cause unknown: no OOM kill and no known incompatibility in the build log"
    if generic:
        message += "; the last failure line is %r" % generic
    if other_kills:
        message += ("; the kernel OOM-killed %s (not a build process), so memory was short: try a lower max_jobs"
                    % ", ".join(sorted(set(kill["process"] for kill in other_kills))))
    if kernel_log is None and cgroup_events is None:
        message += "; give the kernel log or the cgroup's memory.events to tell an OOM kill apart"
    return _result(CAUSE_UNKNOWN, generic, message, evidence, cgroup_kills)


def _kill_label(kill):
    suffix = "" if kill["build_process"] else " (not a build process)"
    return "the kernel OOM killer killed %s%s" % (kill["process"], suffix)


def _confirmation(build_kills, cgroup_kills):
    parts = []
    if build_kills:
        parts.append("the kernel log confirms it: %s" % build_kills[0]["line"])
    if cgroup_kills:
        parts.append("the cgroup counted %d OOM kill%s" % (cgroup_kills, "" if cgroup_kills == 1 else "s"))
    return "; ".join(parts)


def _first_oom_line(findings, build_kills, cgroup_kills):
    for finding in findings:
        if finding["kind"] == "oom":
            return finding["line"]
    if build_kills:
        return build_kills[0]["line"]
    return "oom_kill %d" % cgroup_kills


def _result(cause, decisive_line, message, evidence, cgroup_kills):
    return {
        "cause": cause,
        "decisive_line": decisive_line,
        "message": message,
        "evidence": evidence,
        "cgroup_oom_kills": cgroup_kills,
    }
