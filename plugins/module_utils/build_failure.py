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

Lines are matched the way real logs print them, not only as a clean terminal shows them:

* Known line prefixes are removed before matching: Docker BuildKit's ``#12 5057.8``, the legacy builder's ``515.6``,
  timestamps, a log level (``DEBUG``), a bracketed tag (VS Code's ``[build]``), a quote marker (``>``), ANSI colour
  codes and indentation. A bare ``Killed`` is then the whole remaining line.
* ``Killed`` also counts where the shell's newline was lost: glued to the end of a progress bar, or in the middle of
  a log pasted flattened onto one line, when the next thing is the start of another build line (``[3/49]``,
  ``FAILED:``, ``ninja:``, ``make[2]:``, ``Traceback``, a BuildKit prefix). ``Killed process`` (a kernel line) never
  counts.
* Other OOM spellings: BuildKit's ``ResourceExhausted: ... cannot allocate memory``, the CUDA front end's
  ``catastrophic error: out of memory``, ``returned a non-zero code: 137`` (legacy docker build), ninja's
  ``FAILED: [code=137]``, make's ``Error 137``, ``terminated by signal SIGKILL`` and gcc's message in the zh_CN locale
  (``已杀死 signal terminated program cc1``).
"""

from __future__ import annotations

import re

CAUSE_OOM = "oom"
CAUSE_INCOMPATIBLE = "incompatible"
CAUSE_UNKNOWN = "unknown"

OOM_MESSAGE = "out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs)"
INCOMPATIBLE_PREFIX = "a real CUDA/compiler incompatibility: "
# A line longer than this (a log pasted flattened) is quoted in the message as the part around the match.
MAX_QUOTED_LINE = 240

# Processes a CUDA extension build runs: a kernel OOM kill of one of these is a kill of the build.
BUILD_PROCESSES = frozenset([
    "cicc", "cc1plus", "cc1", "ptxas", "nvcc", "cudafe++", "fatbinary", "nvlink", "ld", "ld.bfd", "ld.gold",
    "collect2", "as", "ninja", "c++", "g++", "gcc", "cc", "clang", "clang++", "sccache", "ccache", "cmake", "make",
    "pip", "uv",
])

# What tools put in front of a build line, removed (repeatedly, in any order) before the line is matched:
# ANSI colour codes; an ISO timestamp (GitHub Actions, pip --log); Docker BuildKit's step ("#12") and either
# builder's elapsed seconds ("5057.8", legacy "515.6"); a log level ("DEBUG", as verbose installers print it);
# a bracketed tag (VS Code CMake Tools' "[build]", "[stderr]"; never ninja's "[3/49]", which starts with a digit);
# a quote marker ("> " in a GitHub comment) and indentation.
_LINE_PREFIX = re.compile(
    r"^(?:\x1b\[[0-9;]*[A-Za-z]"
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?(?=\s)"
    r"|#\d+(?=\s)"
    r"|\d+(?:\.\d+)?(?=\s)"
    r"|(?:DEBUG|INFO|NOTICE|WARN|WARNING|TRACE)\b:?"
    r"|\[[A-Za-z][\w .:/-]*\]"
    r"|>"
    r"|\s+)")

# Where a newline was lost, the next build line follows "Killed" on the same line: ninja's progress, its FAILED:
# and "ninja:" lines, make's "make[2]:", a traceback, a BuildKit or legacy-builder prefix.
_NEXT_BUILD_LINE = (r"(?:\[\d+/\d+\]|FAILED:|ninja:|g?make(?:\[\d+\])?:|CMake Error|Traceback|error:|ERROR:|"
                    r"#\d+\s+\d+\.\d+\s|\d+\.\d+\s)")

# (kind, label, compiled regex). Labels say in plain words what the line means.
OOM_PATTERNS = [
    ("oom", "the compiler driver reports its cc1plus/cicc child killed by SIGKILL",
     # "已杀死" is strsignal(SIGKILL) in gcc's zh_CN messages; other signals (a crash) are not listed on purpose.
     re.compile(r"(?:fatal error|致命错误)\s*[:：]\s*(?:Killed|已杀死) signal terminated program (\S+)")),
    ("oom", "gcc reports cc1plus killed (older gcc wording)",
     re.compile(r"internal compiler error: Killed \(program (\S+)\)")),
    ("oom", "nvcc reports a sub-process killed by signal 9",
     re.compile(r"nvcc error\s*:\s*'([^']+)' died due to signal 9\b")),
    ("oom", "the linker was killed by signal 9",
     re.compile(r"(\S+) terminated with signal 9 \[Killed\]")),
    ("oom", "the CUDA front end (cudafe++/cicc) ran out of memory",
     re.compile(r"catastrophic error: out of memory")),
    ("oom", "Docker BuildKit reports the build step ran out of memory",
     re.compile(r"ResourceExhausted: .*cannot allocate memory")),
    ("oom", "the shell reports a child killed by SIGKILL",
     re.compile(r"^Killed\s*$")),
    ("oom", "the shell reports a child killed by SIGKILL (its newline was lost)",
     re.compile(r"(?<![A-Za-z])Killed(?:\s*$|\s+(?=" + _NEXT_BUILD_LINE + r"))")),
    ("oom", "bash reports a step's command killed by SIGKILL",
     re.compile(r"^\S+: line \d+:\s+\d+ Killed\s")),
    ("oom", "a build step exited with 137 / -9 (SIGKILL, almost always the OOM killer)",
     re.compile(r"(?:exit (?:status|code):?\s*137\b|exit status -9\b|returned non-zero exit status -9\b|"
                r"returned a non-zero code:\s*137\b|\[code=137\]|\bError 137\b|died with <Signals\.SIGKILL: 9>)")),
    ("oom", "a build step was terminated by SIGKILL (almost always the OOM killer)",
     re.compile(r"(?:terminated|killed) by signal (?:SIGKILL|9)\b")),
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
    # A build without isolation (--no-build-isolation) imports setuptools from the virtualenv; Python 3.12 and newer
    # make virtualenvs without it (torch 2.9.1 requires it there, an older torch may not).
    ("incompatible", "the virtualenv has no setuptools, which a build without isolation imports from it: install "
                     "setuptools into the virtualenv",
     re.compile(r"(?:BackendUnavailable: Cannot import 'setuptools\.build_meta'|"
                r"ModuleNotFoundError: No module named 'setuptools'$)")),
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
                             r"^FAILED: |Failed to build |ERROR: Failed building wheel|died due to signal \d+|"
                             r"failed to solve: )")

KERNEL_KILL = re.compile(r"(Memory cgroup out of memory|Out of memory): Kill(?:ed)? process (\d+) \(([^)]+)\)")
KERNEL_OOM_KILL_TASK = re.compile(r"oom-kill:.*?\btask=([^,\s]+)")
KERNEL_OOM_KILL_PID = re.compile(r"oom-kill:.*?\bpid=(\d+)")
KERNEL_INVOKED = re.compile(r"(\S+) invoked oom-killer")


def _strip(line):
    return line.strip()


def strip_line_prefix(line):
    """``line`` without the prefixes tools put in front of it (see ``_LINE_PREFIX``)."""
    rest = line
    while True:
        match = _LINE_PREFIX.match(rest)
        if not match or not match.group(0):
            return rest.rstrip()
        rest = rest[match.end():]


def scan_build_log(text):
    """Every OOM or incompatibility line in a build log, in order: dicts ``index``, ``kind``, ``label``, ``line``,
    ``quote``.

    Patterns are matched against the line without its prefixes; ``line`` is the line as the log has it (stripped),
    ``quote`` the part of it a message shows (all of it unless the line is a long, flattened one).
    """
    findings = []
    for index, line in enumerate((text or "").splitlines()):
        bare = strip_line_prefix(line)
        for kind, label, pattern in OOM_PATTERNS + INCOMPATIBLE_PATTERNS:
            match = pattern.search(bare)
            if match:
                findings.append({"index": index, "kind": kind, "label": label, "line": _strip(line),
                                 "quote": _quote(bare, match)})
                break
    return findings


def _quote(bare, match):
    """The line for a message: whole, or the part around the match when it is a long (flattened) line."""
    if len(bare) <= MAX_QUOTED_LINE:
        return bare.strip()
    start = max(0, match.start() - 80)
    end = min(len(bare), match.end() + 80)
    return "%s%s%s" % ("..." if start else "", bare[start:end].strip(), "..." if end < len(bare) else "")


def last_generic_failure(text):
    """The last "the build failed" line (no cause in it), or None."""
    found = None
    for line in (text or "").splitlines():
        if GENERIC_FAILURE.search(strip_line_prefix(line)):
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
        message = "%s: %s (%s)" % (OOM_MESSAGE, _quoted(first), first["label"])
        confirmation = _confirmation(build_kills, cgroup_kills)
        if confirmation:
            message += "; " + confirmation
        if later_incompatible:
            message += ("; also seen after the kill: %r (%s), which may be collateral: rebuild with fewer jobs to "
                        "find out" % (_quoted(later_incompatible[0]), later_incompatible[0]["label"]))
        return _result(CAUSE_OOM, first["line"], message, evidence, cgroup_kills)

    if first is not None:
        message = "%s%s (%s); lowering max_jobs will not fix this" % (
            INCOMPATIBLE_PREFIX, _quoted(first), first["label"])
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
    missing = _missing_evidence(kernel_log, cgroup_events)
    if missing:
        message += "; give the kernel log or the cgroup's memory.events to tell an OOM kill apart: " + missing
    return _result(CAUSE_UNKNOWN, generic, message, evidence, cgroup_kills)


def _missing_evidence(kernel_log, cgroup_events):
    """What to collect next, in words; empty when both the kernel log and the cgroup counters were given."""
    parts = []
    if kernel_log is None:
        parts.append("the kernel log of the build's time ('dmesg' or 'journalctl -k'; an OOM kill prints an "
                     "'oom-kill:' line and 'Out of memory: Killed process N (cicc)')")
    if cgroup_events is None:
        parts.append("the build cgroup's memory counters: memory.events on cgroup v2 (its oom_kill line), or "
                     "memory.oom_control with memory.max_usage_in_bytes against memory.limit_in_bytes and "
                     "memory.failcnt on cgroup v1, copied before and after the build")
    return " and ".join(parts)


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


def _quoted(finding):
    """The finding's line as the message quotes it: verbatim, or its part around the match when very long."""
    return finding["line"] if len(finding["line"]) <= MAX_QUOTED_LINE else finding["quote"]


def _first_oom_line(findings, build_kills, cgroup_kills):
    for finding in findings:
        if finding["kind"] == "oom":
            return _quoted(finding)
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
