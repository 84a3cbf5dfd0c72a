#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: log_provenance
short_description: Prove that a log file is the one a systemd unit's main process is writing right now
description:
  - Proves, from the kernel's and systemd's own state, that O(path) is the file the unit's MainPID writes now.
  - The inode behind MainPID's stdout and stderr (C(/proc/<MainPID>/fd/1) and C(2)) must be the inode at O(path)
    (C(current.log) resolved). A deleted-and-recreated log, a replaced symlink, an old log file, or output going
    elsewhere is caught, and the file the server really writes is named.
  - The log directory belongs to the service account, so the file is opened the way root must open it there. C(current.log)
    is read with readlink and must point at a log file name the launcher writes (C(<YYYYmmddTHHMMSSZ>-<invocation id>.log))
    in the same directory; the file is opened without following links and without blocking, and must be a regular file
    with one link on the directory's device. Anything else (a link to C(/etc/shadow), a FIFO, a device node, a directory,
    a hard link) fails with a message that names what was found, and none of its bytes are read.
  - Log lines and command lines in the result and the message have their secrets masked (C(api_key), C(--api-key),
    C(Authorization) headers).
  - The launcher's header line (first line of the file) must carry the unit's current InvocationID and MainPID
    (and O(deployment_id) when given); the file's mtime must not be older than the invocation's start; no live
    process outside the unit may have the file open for writing, nor a deleted file of the same name (each one is named).
  - Reads only the header line and the last 64 KiB of the file, so its cost does not grow with the log's size.
  - All collected facts are returned on failure too, next to RV(ignore:msg).
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  name:
    description:
      - The systemd unit, for example C(sglang-qwen36.service). A name without a unit suffix gets C(.service).
    type: str
    required: true
  path:
    description:
      - The log file, or the C(current.log) symlink that points at it.
    type: path
    required: true
  deployment_id:
    description:
      - The deployment ID that was just deployed; the header's C(deployment_id) must equal it.
    type: str
  clock_slack:
    description:
      - Seconds the file's mtime may lie before the invocation's start (ExecMainStartTimestamp), for clock granularity.
    type: float
    default: 2.0
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - Run it as root (C(become)) with C(CAP_SYS_PTRACE) so the file descriptors of every process can be read (Docker drops that
    capability by default).
  - C(changed) is always false.
  - The header line is written by the llmops-serving launcher as
    C(# llmops-serving instance=... deployment_id=... invocation_id=... pid=... started_at=... unit=...).
seealso:
  - module: llmops.serving.service_provenance
"""

EXAMPLES = r"""
- name: Prove that current.log is what the running server writes
  llmops.serving.log_provenance:
    name: sglang-qwen36.service
    path: /var/log/llmops-serving/qwen36/current.log
    deployment_id: "{{ sglang_service_deployment_id }}"
  register: server_log

- name: Read only this invocation's output (from the byte after the header)
  ansible.builtin.command:
    cmd: "tail -c +{{ server_log.offset + 1 }} {{ server_log.path }}"
  changed_when: false
"""

RETURN = r"""
path:
  description:
    - The file read, O(path) with C(current.log) resolved (the log directory and the name C(current.log) points at).
    - O(path) itself when C(current.log) was refused.
  returned: always
  type: str
  sample: /var/log/llmops-serving/qwen36/20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log
inode:
  description: Inode of the file at RV(path); null when it cannot be read (then so are the other facts about the file).
  returned: always
  type: int
  sample: 1835015
header:
  description: The parsed header line (unknown extra keys are kept); null when the first line is not a header.
  returned: always
  type: dict
  contains:
    instance:
      description: Instance name.
      type: str
      sample: qwen36
    deployment_id:
      description: Deployment ID the launcher was started with.
      type: str
      sample: 3f5a0c9d1e7b2a4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c
    invocation_id:
      description: systemd InvocationID of that start.
      type: str
      sample: 6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10
    pid:
      description: PID of the launcher, which became the server by exec.
      type: int
      sample: 4711
    started_at:
      description: When the launcher started, ISO 8601 UTC.
      type: str
      sample: "2026-11-29T19:45:01Z"
    unit:
      description: The unit name.
      type: str
      sample: sglang-qwen36.service
header_error:
  description: Why the first line is not a valid header; null when it is.
  returned: always
  type: str
  sample: null
offset:
  description:
    - Byte offset where the current invocation's output begins (right after the header line).
    - 0 when the first line is not a header.
  returned: always
  type: int
  sample: 196
size:
  description: Size of the file in bytes.
  returned: always
  type: int
  sample: 1048576
mtime:
  description: Last modification of the file, ISO 8601 UTC.
  returned: always
  type: str
  sample: "2026-11-29T19:52:13Z"
last_timestamp:
  description: Timestamp of the last line with SGLang's C([YYYY-MM-DD HH:MM:SS ...]) prefix in the file's tail, as logged
    (server local time, no zone); null when the tail has none.
  returned: always
  type: str
  sample: "2026-11-29T19:52:13"
last_line:
  description: That line (shortened to 500 characters).
  returned: always
  type: str
  sample: "[2026-11-29 19:52:13 TP0] Decode batch, #running-req: 1, #full token: 257, accept len: 2.83, gen throughput (token/s): 93.65, #queue-req: 0"
unit:
  description:
    - What systemd says about the unit (see M(llmops.serving.service_provenance) for the keys).
    - Null when systemd cannot be asked (then no other fact comes back).
  returned: always
  type: dict
  sample:
    name: sglang-qwen36.service
    active_state: active
    main_pid: 4711
    invocation_id: 6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10
main_pid_output:
  description:
    - Where MainPID's stdout and stderr go (the readlink text of fd 1 and 2; C( (deleted)) marks a deleted file).
    - Null when the unit is not running; a target is null when its fd cannot be read.
  returned: always
  type: dict
  contains:
    stdout:
      description: Target of fd 1.
      type: str
    stderr:
      description: Target of fd 2.
      type: str
  sample:
    stdout: /var/log/llmops-serving/qwen36/20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log
    stderr: /var/log/llmops-serving/qwen36/20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log
writers:
  description: Every process with the file (or a deleted file of the same name) open for writing.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
    fd:
      description: The file descriptor.
      type: int
    target:
      description: The fd's link text.
      type: str
    cmdline:
      description: Command line.
      type: str
    comm:
      description: Process name from C(/proc/<pid>/stat).
      type: str
    started_at:
      description: Start time, ISO 8601 UTC.
      type: str
    cgroup:
      description: Its systemd cgroup path.
      type: str
    in_unit:
      description: Whether it lives in the unit's cgroup.
      type: bool
  sample: []
strays:
  description: Writers outside the unit, with the reason.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4242
      cmdline: python3 -m sglang.launch_server --port 30000
      started_at: "2026-11-29T19:40:02Z"
      cgroup: /user.slice/user-0.slice/session-3.scope
      reason: writes to a deleted file that was /var/log/llmops-serving/qwen36/20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log
problems:
  description: Every reason for failure, one sentence each.
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import service_files
from ansible_collections.llmops.serving.plugins.module_utils import unit_check

# Problems that name a stray (templates for UnitCheck.report_stray).
DELETED_TWIN_WRITER_PROBLEM = (
    "{process}, outside {unit} (cgroup {cgroup}), still writes to a deleted file that was {path} ({fds} -> '{twin}'): a "
    "server left over from before the log was re-created; what it writes can no longer be read by name. {advice}")
LOG_WRITER_PROBLEM = (
    "{process}, outside {unit} (cgroup {cgroup}), has {path} open for writing ({fds}): a process started by hand (nohup?) "
    "writes into this log and mixes its output with the unit's. {advice}")

# The file's facts that come back as they are read (log_header.read_log_summary).
SUMMARY_KEYS = ("inode", "header", "header_error", "offset", "size", "last_timestamp", "last_line")


def fd_phrase(fds):
    return "fd %s" % fds[0] if len(fds) == 1 else "fds %s" % " and ".join(str(fd) for fd in fds)


class LogProvenance(unit_check.UnitCheck):
    """Whether a log file is the one the unit's main process writes now, and who else writes it."""

    def __init__(self, unit, path):
        super().__init__(unit)
        self.path = path
        # What the messages call the file: O(path) until service_files says which file it is.
        self.resolved = path
        self.summary = None

    def down_problem(self):
        if self.main_process_up:
            return None
        return ("%s is not running (%s): no process of the unit writes %s, so it is not the log of a running server. "
                "Read `journalctl -u %s -n 50`." % (
                    self.name, unit_check.unit_state(self.unit, ("LoadState", "ActiveState", "SubState", "MainPID")),
                    self.path, self.name))

    def read_file(self):
        """Open the file safely (service_files: the service user writes this directory) and read its header and tail;
        a file that is refused is named with what was found there, and none of its bytes are read."""
        try:
            with service_files.open_log(self.path) as log:
                self.resolved = log.path
                self.summary = log_header.read_log_summary(log.proc_path)
        except service_files.RefusedFile as exc:
            self.resolved = exc.resolved or self.path
            self.problems.append("%s." % exc)
        except OSError as exc:
            self.problems.append("cannot read %s: %s." % (self.resolved, exc.strerror or exc))
        return self.summary

    def file_facts(self):
        """The documented facts about the file, null for those that could not be read."""
        facts = dict.fromkeys(SUMMARY_KEYS + ("mtime",))
        if self.summary is not None:
            facts.update((key, self.summary[key]) for key in SUMMARY_KEYS)
            facts["mtime"] = procfs.iso_utc(self.summary["mtime"])
        return facts

    def identity(self):
        return ("file", self.summary["device"], self.summary["inode"]) if self.summary else None

    def old_log_hint(self):
        header = (self.summary or {}).get("header")
        if not header:
            return ""
        return " (its header names invocation %s, PID %s, started %s)" % (header["invocation_id"], header["pid"], header["started_at"])

    def check_main_pid_output(self):
        """MainPID's fds 1 and 2 must point at the inode at path. Returns {"stdout": link, "stderr": link}."""
        main_pid = self.unit["main_pid"]
        links = {}
        by_target = {}
        for fd in (1, 2):
            target = procfs.fd_link(main_pid, fd)
            links[fd] = target
            if target is not None and not target.startswith("/"):
                # socket:[N], pipe:[N], anon_inode:...: not a file, whatever its inode.
                by_target.setdefault((target, None), []).append(fd)
                continue
            stat_result = procfs.fd_stat(main_pid, fd)
            if target is None or stat_result is None:
                self.problems.append("cannot read fd %d of MainPID %s (process gone, or not root)." % (fd, main_pid))
                continue
            if self.summary is not None and procfs.file_identity(stat_result) == self.identity():
                continue
            by_target.setdefault((target, stat_result.st_ino), []).append(fd)
        where = "%s (inode %s)" % (self.resolved, self.summary["inode"]) if self.summary else self.resolved
        for (target, inode), fds in sorted(by_target.items(), key=lambda item: item[1]):
            if target.endswith(procfs.DELETED_SUFFIX):
                self.problems.append(
                    "the unit writes to a deleted file: MainPID %s's %s -> '%s' (inode %d), not to %s. The log was deleted and "
                    "re-created while the server kept writing to the old inode, so %s does not show what the server says now; "
                    "its output survives only behind /proc/%s/fd/%d. Restart %s for a fresh log, and never delete a log "
                    "that is open." % (main_pid, fd_phrase(fds), target, inode, where, self.path, main_pid, fds[0], self.name))
            elif target.startswith("/"):
                self.problems.append(
                    "%s is not the file MainPID %s writes now: its %s go%s to %s (inode %d). %s is an old log%s; read %s "
                    "(or the unit's current.log) instead." % (
                        where, main_pid, fd_phrase(fds), "" if len(fds) > 1 else "es", target, inode, self.path,
                        self.old_log_hint(), target))
            else:
                self.problems.append(
                    "MainPID %s's %s go%s to %s, not to a log file: %s was not started through the llmops-serving launcher, "
                    "so its output is not in %s." % (main_pid, fd_phrase(fds), "" if len(fds) > 1 else "es", target, self.name, self.path))
        return {"stdout": links[1], "stderr": links[2]}

    def check_header(self, expected_deployment):
        summary = self.summary
        header = summary["header"]
        if header is None and summary.get("header_malformed"):
            self.problems.append(
                "the header of %s is malformed (%s): the launcher writes every key once in its own format, so something "
                "else wrote or edited this file, and nothing ties it to an invocation." % (self.resolved, summary["header_error"]))
            return
        if header is None:
            self.problems.append(
                "the first line of %s is not an llmops-serving header (%s): the launcher did not create this file "
                "(re-created by hand?), so nothing ties it to an invocation." % (self.resolved, summary["header_error"]))
            return
        if header["invocation_id"] != self.unit["invocation_id"]:
            self.problems.append(
                "%s belongs to invocation %s (PID %s, started %s), but %s now runs invocation %s (MainPID %s): it is the log "
                "of another start." % (
                    self.resolved, header["invocation_id"], header["pid"], header["started_at"], self.name,
                    self.unit["invocation_id"] or "none", self.unit["main_pid"]))
        elif header["pid"] != self.unit["main_pid"]:
            self.problems.append(
                "the header of %s names PID %s, but %s's MainPID is %s: the launcher did not exec the server (or the main "
                "process changed), so the header's PID is not the server's." % (self.resolved, header["pid"], self.name, self.unit["main_pid"]))
        if header.get("unit") != self.name:
            self.problems.append("the header of %s names unit %s, not %s." % (self.resolved, header.get("unit"), self.name))
        if expected_deployment and header["deployment_id"] != expected_deployment:
            self.problems.append(
                "%s was written for deployment %s, not %s that was just deployed: the unit was not restarted after the "
                "change." % (self.resolved, header["deployment_id"], expected_deployment))

    def check_mtime(self, slack):
        start = self.unit["exec_main_start_epoch"]
        if start is None or self.summary["mtime"] >= start - slack:
            return
        self.problems.append(
            "%s was last written at %s, before the current invocation of %s started at %s: it is an old log that nobody "
            "writes now." % (self.resolved, procfs.iso_utc(self.summary["mtime"]), self.name, self.unit["exec_main_start_timestamp"]))

    def check_writers(self):
        """Every process with the file, or a deleted file of its name, open for writing; those outside the unit are
        strays, named once per process and file however many fds they hold."""
        deleted_twin = self.resolved + procfs.DELETED_SUFFIX
        writers = []
        outside = {}
        for holder in procfs.writers_of(self.identity(), pids=self.other_pids, link_targets=[deleted_twin]):
            facts = self.describe(holder["pid"])
            writers.append(dict(facts, fd=holder["fd"], target=holder["target"]))
            if not facts["in_unit"]:
                key = (holder["pid"], holder["target"] == deleted_twin)
                outside.setdefault(key, (facts, []))[1].append(holder["fd"])
        for (dummy_pid, deleted), (facts, fds) in sorted(outside.items()):
            if deleted:
                self.report_stray(facts, "writes to a deleted file that was %s" % self.resolved, DELETED_TWIN_WRITER_PROBLEM,
                                  path=self.resolved, fds=fd_phrase(fds), twin=deleted_twin)
            else:
                self.report_stray(facts, "has %s open for writing outside %s" % (self.resolved, self.name), LOG_WRITER_PROBLEM,
                                  path=self.resolved, fds=fd_phrase(fds))
        return writers


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            path=dict(type="path", required=True),
            deployment_id=dict(type="str"),
            clock_slack=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    check = LogProvenance(unit_check.load_unit(module, unseen="writers", unit=None), params["path"])
    running = check.unit_running()
    readable = check.read_file() is not None
    result = dict(path=check.resolved, unit=check.unit, main_pid_output=None)
    if running:
        result["main_pid_output"] = check.check_main_pid_output()
    if running and readable:
        check.check_header(params["deployment_id"])
        check.check_mtime(params["clock_slack"])
    result.update(check.file_facts(), writers=check.check_writers())
    check.finish(module, **result)


if __name__ == "__main__":
    main()
