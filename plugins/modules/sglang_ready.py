#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_ready
short_description: Wait until the current invocation of an SGLang unit is ready, or fail as soon as it cannot be
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Polls the unit (C(systemctl show)), the log file of the unit's CURRENT invocation (the one whose header carries the
    unit's InvocationID, so an older run's log is never taken for this one) and the server's C(/health) endpoint.
  - Returns as soon as the log shows C(The server is fired up and ready to roll!) and C(/health) answers 200, within one
    poll interval of the ready line. On a node above rank 0 of a multi-node model (O(node_rank) > 0), which serves no
    API, the line is C(Dummy health check server started in background thread at ...), which SGLang logs once the
    node's schedulers met the other ranks, and C(/health) is that dummy server's.
  - Fails at once, quoting the log's last lines, when the unit exits or restarts after a crash, or when the log shows a
    startup error (the hybrid-cache or CUDA out-of-memory message, an NCCL error); fails at O(timeout) otherwise.
  - A unit that exits says what state it is left in, and that no server of it runs (nor the one from before the
    restart). When the invocation that exited wrote nothing to its log (the launcher could not create or write it, for
    example on a full or read-only log filesystem, and exited 75 without starting the server), the failure names what
    is wrong with the log directory's filesystem (free bytes and inodes for the service account, read-only), and quotes
    the invocation's own journal lines (C(journalctl _SYSTEMD_INVOCATION_ID=<InvocationID>), at most O(tail_lines)
    lines, each masked and shortened, within 10 s), where the launcher said why.
  - There is no fixed sleep anywhere, so a slow start only costs the time it takes, and no step waits past
    O(timeout); the log is opened and read without blocking.
  - The log directory belongs to the service account, so C(current.log) is never followed blindly. It must point at a
    log file name the launcher writes in the same directory, and that file must be a regular file with one link. A
    C(current.log) that points elsewhere (for example at C(/etc/shadow)) or at a FIFO, a device node or a directory
    fails the wait at once with a message that names what was found, and none of its bytes are read. The file found is
    kept open for the whole wait, so renaming or swapping files in the directory later changes nothing.
  - Quoted log lines have their secrets masked (SGLang prints C(api_key) in its C(server_args) line).
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
options:
  name:
    description: The systemd unit, for example C(sglang-qwen36.service).
    type: str
    required: true
  log_path:
    description: The instance's C(current.log) symlink (or its log directory, which means C(<dir>/current.log)).
    type: path
    required: true
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  health_path:
    description: Path of the health endpoint (unauthenticated in SGLang).
    type: str
    default: /health
  previous_invocation_id:
    description:
      - The unit's InvocationID before a restart. While the unit still runs that invocation, the wait goes on; a restart
        that never happens ends in a timeout that says so.
    type: str
  timeout:
    description: Seconds to wait in all. Real model loads and CUDA graph capture take minutes.
    type: float
    default: 900
  poll_interval:
    description: Seconds between polls; bounds how late the ready line is noticed.
    type: float
    default: 0.25
  tail_lines:
    description: How many of the log's last lines a failure quotes.
    type: int
    default: 15
  node_rank:
    description:
      - The node's rank in a multi-node model (C(--node-rank)); 0 for a server on one node and for the node that serves
        the API. Decides which log line means ready.
    type: int
    default: 0
notes:
  - Run it as root (C(become)) so it can read the log directory, which belongs to the service account.
seealso:
  - module: llmops.serving.service_provenance
  - module: llmops.serving.log_provenance
  - module: llmops.serving.spec_decode_stats
"""

EXAMPLES = r"""
- name: Wait for the new invocation of sglang-qwen36 to be ready
  llmops.serving.sglang_ready:
    name: sglang-qwen36.service
    log_path: /var/log/llmops-serving/qwen36/current.log
    url: http://127.0.0.1:30000
    previous_invocation_id: "{{ sglang_service_previous_invocation_id }}"
    timeout: 1200
  register: ready

- name: Show how long the start took
  ansible.builtin.debug:
    msg: "ready after {{ ready.elapsed_seconds }} s, noticed {{ ready.lag_after_ready_line_seconds }} s after the ready line"
  when: ready.lag_after_ready_line_seconds is defined
"""

RETURN = r"""
ready:
  description: Whether the server became ready.
  returned: always
  type: bool
  sample: true
elapsed_seconds:
  description: Seconds the wait took.
  returned: always
  type: float
  sample: 93.4
ready_line:
  description: The ready line of the current invocation's log.
  returned: when ready
  type: str
  sample: "[2026-11-29 19:44:42] The server is fired up and ready to roll!"
lag_after_ready_line_seconds:
  description:
    - Seconds between the ready line's own timestamp and the moment the wait noticed it and C(/health) answered.
    - SGLang's timestamps have whole seconds unless C(SGLANG_LOG_MS=1), so without milliseconds this is up to 1 s too high.
  returned: when the ready line has a timestamp and appeared during the wait
  type: float
  sample: 0.31
ready_before_wait:
  description: Whether the server was ready already at the first poll (nothing was waited for).
  returned: when ready
  type: bool
  sample: false
port_holders:
  description:
    - When the unit is down, the processes that listen on the port of O(url) in this network namespace, none of them the
      unit's (a stray server started by hand, for example with nohup). The failure message names them.
  returned: when the unit exited or is down
  type: list
  elements: dict
  sample: [{"pid": 4242, "cmdline": "python3 -m sglang.launch_server --port 30000", "comm": "python3", "started_at": "2026-11-29T19:40:02Z"}]
log_file:
  description: The log file of the current invocation (C(current.log) resolved); null while it has not been found.
  returned: always
  type: str
  sample: /var/log/llmops-serving/qwen36/20261129T194437Z-d6f816684930476185a4fb81181a8c54.log
unit:
  description:
    - The unit's state at the last poll (name, active_state, sub_state, result, main_pid, invocation_id, ...).
    - Empty when systemd could not be asked at the first poll.
  returned: always
  type: dict
last_lines:
  description: The last lines of the current invocation's log (on failure, what the message quotes).
  returned: always
  type: list
  elements: str
log_filesystem:
  description:
    - The filesystem of the log directory (the directory of O(log_path)) as a non-root writer sees it, from C(statvfs).
    - C(error) instead of the counts when it could not be examined.
  returned: when the unit exited before it became ready and its invocation's log has no line
  type: dict
  version_added: 0.2.0
  sample: {"path": "/var/log/llmops-serving/qwen36", "bytes_free": 0, "bytes_total": 1048576, "inodes_free": 250,
           "inodes_total": 256, "read_only": false}
journal_lines:
  description: The last journal lines of the invocation that exited (secrets masked, each shortened).
  returned: when the unit exited before it became ready and its invocation's log has no line
  type: list
  elements: str
  version_added: 0.2.0
journal_error:
  description: Why the journal could not be read (journalctl failed or gave no answer in time).
  returned: when the journal was asked and could not be read
  type: str
  version_added: 0.2.0
startup_error:
  description: The decisive startup error line and its kind, when one was seen.
  returned: on failure from a startup error
  type: dict
  contains:
    kind:
      description: C(oom_hybrid), C(cuda_oom) or C(nccl).
      type: str
      sample: oom_hybrid
    line:
      description: The log line.
      type: str
"""

import os
import time

from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import readiness
from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils import service_files
from ansible_collections.llmops.serving.plugins.module_utils import start_failure
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show
from ansible_collections.llmops.serving.plugins.module_utils import unit_check
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import CURRENT_LOG_NAME


def _health(url, timeout):
    """The status /health answers with, or None when nothing answers (the server on loopback: no certificate to check)."""
    try:
        return http_exchange.exchange(url, accept="*/*", timeout=timeout, validate_certs=False)[0]
    except http_exchange.ExchangeError:
        return None


def _open_current(path):
    """(opened log, its summary) for the log ``path`` (current.log) points at now, opened by service_files so that the
    service account cannot make root read anything else; (None, None) while there is none (MissingFile).

    Raises service_files.RefusedFile when current.log or its target is not a log the launcher wrote.
    """
    try:
        log = service_files.open_log(path)
    except service_files.MissingFile:
        return None, None
    try:
        return log, log_header.read_log_summary(log.proc_path, tail_bytes=0)
    except BaseException:
        log.close()
        raise


def _port_of(url):
    parsed = urlparse(url)
    try:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None


def _port_holders(port):
    """Processes listening on ``port`` in this network namespace (the unit is down: none of them is the unit's)."""
    if port is None:
        return []
    pids = sorted(set(pid for entry in procfs.port_listeners(port) for pid in entry["pids"]))
    return [procfs.describe_process(pid) for pid in pids]


class ReadyWait:
    """One wait for the unit's current invocation: what the last poll saw, and how the wait ends."""

    def __init__(self, module):
        params = module.params
        self.module = module
        self.unit_name = systemd_show.unit_name(params["name"])
        self.log_path = params["log_path"]
        if os.path.basename(os.path.normpath(self.log_path)) != CURRENT_LOG_NAME and os.path.isdir(self.log_path):
            self.log_path = os.path.join(self.log_path, CURRENT_LOG_NAME)
        self.url = params["url"]
        self.health_url = self.url.rstrip("/") + params["health_path"]
        self.previous_invocation_id = params["previous_invocation_id"]
        self.timeout = params["timeout"]
        self.interval = max(0.05, params["poll_interval"])
        self.tail_lines = params["tail_lines"]
        self.node_rank = params["node_rank"]
        self.started = time.monotonic()
        self.deadline = self.started + max(0.0, self.timeout)
        self.polls = 0
        self.watch = None
        self.ready_before_wait = False
        self.waiting_for = "the first poll"
        self.result = dict(changed=False, ready=False, elapsed_seconds=0.0, unit={}, last_lines=[], log_file=None)

    def poll(self):
        """Read the unit and the new lines of its current invocation's log; return the unit's readiness state."""
        self.result["elapsed_seconds"] = round(time.monotonic() - self.started, 3)
        unit = unit_check.load_unit(self.module, **self.result)
        state, self.waiting_for = readiness.unit_verdict(unit, self.previous_invocation_id)
        self.follow_log(unit.get("invocation_id"), state)
        if self.watch is not None:
            self.watch.read_new()
        self.polls += 1
        self.result = dict(changed=False, ready=False, elapsed_seconds=round(time.monotonic() - self.started, 3), unit=unit,
                           last_lines=list(self.watch.last_lines) if self.watch else [],
                           log_file=self.watch.path if self.watch else None)
        return state

    def follow_log(self, invocation, state):
        """Watch the log of the unit's latest invocation (also when it already exited, to quote why)."""
        if not invocation or invocation == self.previous_invocation_id:
            return
        if self.watch is not None and self.watch.invocation_id == invocation:
            return
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        log = summary = None
        try:
            log, summary = _open_current(self.log_path)
        except service_files.RefusedFile as exc:
            self.fail("%s: %s. The service account can write %s, so root reads nothing there but the launcher's log files; "
                      "find out who changed it, then restart %s for a fresh log." % (
                          self.unit_name, exc, os.path.dirname(self.log_path), self.unit_name))
        except OSError as exc:
            self.fail("%s: cannot read %s: %s." % (self.unit_name, self.log_path, exc.strerror or exc))
        if (summary or {}).get("header_malformed"):
            # The launcher writes the header before it points current.log at the file: a broken header is final.
            log.close()
            self.fail("%s: %s is not a log the launcher wrote: %s. Find out who wrote it, then restart %s for a fresh "
                      "log." % (self.unit_name, log.path, summary.get("header_error"), self.unit_name),
                      header_error_key=summary.get("header_error_key"))
        if ((summary or {}).get("header") or {}).get("invocation_id") != invocation:
            if log is not None:
                log.close()
            if state == readiness.WAITING:
                self.waiting_for = "the log of invocation %s (the launcher has not switched %s yet)" % (invocation, self.log_path)
            return
        self.watch = readiness.LogWatch(log, summary["offset"], keep_lines=self.tail_lines, invocation_id=invocation,
                                        node_rank=self.node_rank)
        if self.polls == 0:  # the first poll: what the log says already was there before the wait
            self.watch.read_new()
            self.ready_before_wait = self.watch.ready_line is not None

    def close(self):
        if self.watch is not None:
            self.watch.close()

    def fail(self, msg, **facts):
        self.close()
        self.module.fail_json(msg=redact.redact_text(msg), **redact.redact_deep(dict(self.result, **facts)))

    def quoted_lines(self, none="(none)"):
        """``Last lines of <log>:`` and those lines (``none`` when there are none), for a failure message."""
        where = self.watch.path if self.watch else self.log_path
        return "Last lines of %s:\n  %s" % (where, "\n  ".join(self.result["last_lines"]) or none)

    def fail_on_startup_error(self):
        if self.watch is not None and self.watch.fatal:
            kind, line = self.watch.fatal
            self.fail("%s failed to start: its log shows %s:\n  %s\n%s" % (self.unit_name, kind, line, self.quoted_lines(none="")),
                      startup_error={"kind": kind, "line": line})

    def fail_unit_down(self):
        # A server that answers on the port while the unit is down is the incident's stray: name it first.
        port = _port_of(self.url)
        holders = _port_holders(port)
        cause, journal, facts = "", "", {}
        if not self.result["last_lines"]:
            cause, journal, facts = self.why_no_log()
        self.fail("%s%s.%s %s %s%s" % (self.waiting_for, readiness.describe_port_holders(holders, port), cause,
                                       self.state_left(), journal, self.quoted_lines(none="(no log of this invocation)")),
                  port_holders=holders, **facts)

    def state_left(self):
        """The sentence that says what the failed start left running: nothing of this unit."""
        unit = self.result["unit"]
        if unit.get("sub_state") == "auto-restart":
            text = ("%s is waiting to restart (%s) and no server of it runs: systemd starts it again after its RestartSec"
                    % (self.unit_name, unit_check.unit_state(unit, ("ActiveState", "SubState", "Result"))))
        else:
            text = "%s is left %s (%s) and no server of it runs" % (
                self.unit_name, unit.get("active_state"), unit_check.unit_state(unit, ("SubState", "Result")))
        if self.previous_invocation_id:
            text += "; the server from before the restart (invocation %s) is not running either" % self.previous_invocation_id
        return text + "."

    def why_no_log(self):
        """For an invocation that exited without a line in its log: (a sentence naming the log filesystem's problem, or
        '', the invocation's own journal lines for the message, the facts for the result)."""
        log_dir = os.path.dirname(self.log_path)
        filesystem = start_failure.filesystem_facts(log_dir)
        problems = start_failure.filesystem_problems(filesystem)
        cause = ""
        if problems:
            cause = (" The log filesystem of %s %s: the launcher cannot write this start's log there and does not start the"
                     " server without one (it exits %d); free space there or make it writable, then restart %s." % (
                         log_dir, " and ".join(problems), start_failure.EXIT_LOG_UNWRITABLE, self.unit_name))
        invocation = self.result["unit"].get("invocation_id")
        lines, problem = start_failure.journal_lines(self.module.run_command, invocation, self.tail_lines)
        if not lines and problem is None:
            # The journal may not have stored the last lines of a process that exited a moment ago: one more look.
            time.sleep(min(0.5, max(0.0, self.remaining())))
            lines, problem = start_failure.journal_lines(self.module.run_command, invocation, self.tail_lines)
        journal = "Journal of invocation %s (journalctl _SYSTEMD_INVOCATION_ID=%s):\n  %s\n" % (
            invocation, invocation, "\n  ".join(lines) or "(%s)" % (problem or "no lines"))
        facts = dict(log_filesystem=filesystem, journal_lines=lines)
        if problem:
            facts["journal_error"] = problem
        return cause, journal, facts

    def exit_when_ready(self):
        """Exit when the log says ready and /health answers 200; else say what the wait is for."""
        if self.watch is None or not self.watch.ready_line:
            return
        code = _health(self.health_url, timeout=min(5.0, max(1.0, self.interval * 4), max(0.1, self.remaining())))
        if code != 200:
            self.waiting_for = "%s to answer 200 (the log says ready, /health answered %s)" % (self.health_url, code)
            return
        result = dict(self.result, ready=True, ready_line=self.watch.ready_line, ready_before_wait=self.ready_before_wait)
        line_time = readiness.line_epoch(self.watch.ready_line)
        if line_time is not None and not self.ready_before_wait:
            result["lag_after_ready_line_seconds"] = round(time.time() - line_time, 3)
        self.close()
        self.module.exit_json(**redact.redact_deep(result))

    def remaining(self):
        """Seconds left until O(timeout)."""
        return self.deadline - time.monotonic()

    def fail_on_timeout(self):
        if self.remaining() <= 0:
            self.fail("%s was not ready after %.0f s: still waiting for %s. %s" % (
                self.unit_name, self.timeout, self.waiting_for, self.quoted_lines()))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            log_path=dict(type="path", required=True),
            url=dict(type="str", default="http://127.0.0.1:30000"),
            health_path=dict(type="str", default="/health"),
            previous_invocation_id=dict(type="str"),
            timeout=dict(type="float", default=900),
            poll_interval=dict(type="float", default=0.25),
            tail_lines=dict(type="int", default=15),
            node_rank=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    wait = ReadyWait(module)
    while True:
        state = wait.poll()
        wait.fail_on_startup_error()
        if state == readiness.FAILED:
            wait.fail_unit_down()
        wait.exit_when_ready()
        wait.fail_on_timeout()
        time.sleep(max(0.0, min(wait.interval, wait.remaining())))


if __name__ == "__main__":
    main()
