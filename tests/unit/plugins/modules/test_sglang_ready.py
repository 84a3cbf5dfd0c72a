# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_ready against a real log file, a real HTTP /health on loopback, and a scripted `systemctl show`."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import threading
import time

import pytest

from ansible_collections.llmops.serving.plugins.modules import sglang_ready
from ansible_collections.llmops.serving.tests.unit.fakes import (
    FakeSystemctl, launcher_log_name, root_only_secret, secret_shown, show_text, within)

INVOCATION = "0123456789abcdef0123456789abcdef"
RUN_LOG = launcher_log_name(INVOCATION, "20261129T100000Z")
DATA = pathlib.Path(__file__).parents[1] / "module_utils" / "data" / "sglang_server_args"
READY = "The server is fired up and ready to roll!"


def header(invocation=INVOCATION):
    return (f"# llmops-serving instance=q deployment_id={'d' * 64} invocation_id={invocation} pid=4242 "
            f"started_at=2026-11-29T10:00:00Z unit=sglang-q.service\n")


def stamp():
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + ".%03d" % int((now % 1) * 1000)


class Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(self.code)
        self.end_headers()

    def log_message(self, *args):
        del args


@pytest.fixture
def health():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def unit_show(active, sub, result="success", invocation=INVOCATION):
    return show_text(Id="sglang-q.service", ActiveState=active, SubState=sub, Result=result, MainPID="4242",
                     InvocationID=invocation, ExecMainStartTimestamp="Sun 2026-11-29 10:00:00 UTC",
                     ControlGroup="/system.slice/sglang-q.service")


class FakeSystemd(FakeSystemctl):
    """`systemctl show` as FakeSystemctl answers it, and `journalctl` (run under coreutils' timeout) with ``journal``, an
    (rc, stdout, stderr) tuple; with ``journal`` None, a journalctl call fails the test as any other command does."""

    def __init__(self, *replies, journal=None):
        super().__init__(*replies)
        self.journal = journal
        self.journal_calls = []

    def __call__(self, args, environ_update=None, **kwargs):
        if "journalctl" in args and self.journal is not None:
            self.journal_calls.append(list(args))
            return self.journal
        return super().__call__(args, environ_update=environ_update, **kwargs)


def run(args, states, journal=None):
    """Run the module while `systemctl show` answers with the next of ``states`` (the last one repeats) and journalctl
    with ``journal`` (FakeSystemd)."""
    systemctl = FakeSystemd(*[unit_show(*state) for state in states], journal=journal)
    result, failed = systemctl.run_module(sglang_ready.main, args)
    return result, failed, systemctl.commands


def test_ready_line_written_during_the_wait_is_noticed_within_a_poll(tmp_path, health):
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] Load weight begin.\n")
    (tmp_path / "current.log").symlink_to(log.name)

    def write_ready():
        time.sleep(0.6)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"[{stamp()}] {READY}\n")
    writer = threading.Thread(target=write_ready)
    writer.start()
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 10,
                                  "poll_interval": 0.1}, [("active", "running")])
    writer.join()
    assert not failed, result["msg"]
    assert result["ready"] and not result["ready_before_wait"]
    assert result["log_file"] == str(log)
    assert 0 <= result["lag_after_ready_line_seconds"] < 1.0
    assert result["changed"] is False


def test_an_older_invocations_log_is_never_taken_for_the_current_one(tmp_path, health):
    log = tmp_path / launcher_log_name("f" * 32, "20261129T090000Z")
    log.write_text(header("f" * 32) + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path / "current.log"), "url": health,
                                  "timeout": 0.5, "poll_interval": 0.1}, [("active", "running")])
    assert failed and not result["ready"]
    assert "has not switched" in result["msg"] and INVOCATION in result["msg"]


def test_startup_oom_fails_at_once_quoting_the_line(tmp_path, health):
    # The hybrid-cache OOM message as given in shared/reference/sglang.md (not a captured log line).
    oom = "Not enough GPU memory for hybrid (mamba/linear-attention) state cache ... Try: (1) reduce --max-running-requests"
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()} TP0] {oom}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    started = time.monotonic()
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                 [("activating", "start")])
    assert failed and time.monotonic() - started < 5
    assert result["startup_error"]["kind"] == "oom_hybrid"
    assert oom in result["msg"]


def test_a_unit_that_exited_fails_at_once_with_its_logs_last_lines(tmp_path, health):
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] sglang serve: error: ambiguous option: --cuda-graph-max-bs could match x, y\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                [("activating", "start"), ("activating", "auto-restart", "exit-code")])
    assert failed and len(calls) == 2
    assert "exited before it became ready" in result["msg"]
    assert "ambiguous option" in result["msg"]


def test_a_restart_that_never_happens_times_out_saying_so(tmp_path, health):
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 0.4,
                                  "poll_interval": 0.1, "previous_invocation_id": INVOCATION}, [("active", "running")])
    assert failed
    assert "from before the restart" in result["msg"]


def test_health_must_answer_200_too(tmp_path, health):
    Health.code = 503
    try:
        log = tmp_path / RUN_LOG
        log.write_text(header() + f"[{stamp()}] {READY}\n")
        (tmp_path / "current.log").symlink_to(log.name)
        # The limit leaves room for a health answer on a loaded machine (with 0.4 s the wait could end before the first).
        result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 3,
                                      "poll_interval": 0.1}, [("active", "running")])
    finally:
        Health.code = 200
    assert failed and "answered 503" in result["msg"]


def test_already_ready_reports_no_lag(tmp_path, health):
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 5},
                                 [("active", "running")])
    assert not failed and result["ready_before_wait"]
    assert "lag_after_ready_line_seconds" not in result


def test_a_down_unit_with_a_stray_on_its_port_names_the_stray(tmp_path, health):
    # The incident: the unit was stopped and something else (here: this test's own HTTP server) holds the port.
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] SIGTERM received. Draining requests and shutting down...\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, dummy_calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                      [("failed", "failed", "signal")])
    assert failed
    assert "port %s is held by PID %d" % (health.rsplit(":", 1)[1], os.getpid()) in result["msg"]
    assert [holder["pid"] for holder in result["port_holders"]] == [os.getpid()]


def test_a_down_unit_with_a_free_port_names_no_holder(tmp_path):
    log = tmp_path / RUN_LOG
    log.write_text(header())
    (tmp_path / "current.log").symlink_to(log.name)
    # A log with no line after the header: the journal of the invocation is asked too (here it has nothing).
    result, failed, dummy_calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": "http://127.0.0.1:1", "timeout": 30},
                                      [("inactive", "dead")], journal=(0, "", ""))
    assert failed and result["port_holders"] == []
    assert "held by" not in result["msg"]


def test_systemd_that_cannot_be_asked_fails_with_the_facts_so_far(tmp_path):
    systemctl = FakeSystemctl((1, "", "Failed to connect to bus: No such file or directory\n"))
    result, failed = systemctl.run_module(sglang_ready.main, {"name": "sglang-q", "log_path": str(tmp_path), "timeout": 30})
    assert failed and len(systemctl.calls) == 1
    assert result["msg"].startswith("cannot ask systemd about sglang-q.service: systemctl show")
    assert (result["ready"], result["unit"], result["last_lines"], result["log_file"]) == (False, {}, [], None)
    assert 0 <= result["elapsed_seconds"] < 5


# --------------------------------------------------------------------------- a log directory the service user tampered with

def wait_on_tampered(log_path, health, timeout=5):
    """The wait on a running unit whose log directory was tampered with: (result, failed, seconds it took). The old
    module blocked in open() on a FIFO whatever its timeout; within() turns such a hang into a failure."""
    started = time.monotonic()
    with within(3 * timeout):
        result, failed, _calls = run({"name": "sglang-q", "log_path": str(log_path), "url": health, "timeout": timeout,
                                      "poll_interval": 0.1}, [("active", "running")])
    return result, failed, time.monotonic() - started


def test_a_fifo_behind_current_log_fails_at_once_instead_of_hanging(tmp_path, health):
    # The service user points current.log at a FIFO named like a log: the wait fails at once, never past its timeout.
    os.mkfifo(str(tmp_path / RUN_LOG))
    (tmp_path / "current.log").symlink_to(RUN_LOG)
    result, failed, seconds = wait_on_tampered(tmp_path, health)
    assert failed and seconds < 5
    assert "%s points at %s, which is a FIFO, not a log file" % (tmp_path / "current.log", RUN_LOG) in result["msg"]
    assert result["ready"] is False and result["log_file"] is None


def test_current_log_replaced_by_a_fifo_fails_at_once(tmp_path, health):
    os.mkfifo(str(tmp_path / "current.log"))
    result, failed, seconds = wait_on_tampered(tmp_path / "current.log", health)
    assert failed and seconds < 5
    assert "%s is a FIFO, not the symlink the launcher makes" % (tmp_path / "current.log") in result["msg"]


def test_current_log_pointing_at_a_root_only_file_fails_naming_it_and_shows_none_of_it(tmp_path, health):
    logs = tmp_path / "log"
    logs.mkdir()
    secret = root_only_secret(tmp_path)
    (logs / "current.log").symlink_to(secret)
    result, failed, seconds = wait_on_tampered(logs, health)
    assert failed and seconds < 5
    assert result["msg"].startswith("sglang-q.service: %s points outside the log directory to %s; it is not followed."
                                    % (logs / "current.log", secret))
    assert not secret_shown(json.dumps(result))


def test_quoted_log_lines_show_no_api_key(tmp_path, health):
    # SGLang 0.5.23 prints its keys in the server_args line (data/sglang_server_args); the unit then exits, and the
    # failure quotes the log's last lines.
    server_args = (DATA / "sglang-0.5.23-dict-with-keys.txt").read_text(encoding="utf-8").strip()
    log = tmp_path / RUN_LOG
    log.write_text(header() + f"[{stamp()}] {server_args}\n[{stamp()}] sglang serve: error: unrecognized arguments: "
                   f"--api-key sk-llmops-test-0f3a9c2e\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                 [("failed", "failed", "exit-code")])
    assert failed and "exited before it became ready" in result["msg"]
    # Quoted lines are shortened to 500 characters (the key fields of server_args lie further in) and masked.
    assert server_args[:400] in result["msg"] and "--api-key ********" in result["msg"]
    text = json.dumps(result)
    assert "sk-llmops-test-0f3a9c2e" not in text and "adm-llmops-test-7b1d" not in text


@pytest.mark.parametrize("bad_field, key", [
    ("pid=12a", "pid"),
    ("pid=\u0663", "pid"),
    ("pid=4242 pid=4343", "pid"),
])
def test_a_malformed_header_fails_at_once_naming_the_key(tmp_path, health, bad_field, key):
    # The launcher writes its header before it points current.log at the file, so a broken one never gets better:
    # waiting out the timeout for "the launcher to switch" would hide who wrote the file.
    log = tmp_path / RUN_LOG
    log.write_text(header().replace("pid=4242", bad_field) + f"[{stamp()}] {READY}\n", encoding="utf-8")
    (tmp_path / "current.log").symlink_to(log.name)
    started = time.monotonic()
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30,
                                  "poll_interval": 0.1}, [("active", "running")])
    assert failed and not result["ready"]
    assert time.monotonic() - started < 10
    assert "is not a log the launcher wrote" in result["msg"] and "malformed" in result["msg"]
    assert result["header_error_key"] == key


# --------------------------------------------------------------------------- a restart whose launcher could not write its log

PREVIOUS = "f" * 32
# What the launcher writes to the journal when the header of the new log cannot be written (test_sglang_launch.py runs
# it on a full tmpfs and checks this form).
LAUNCHER_LINE = ("sglang-launch: cannot write the header of the log file {dir}/20261129T100000Z-%s.log: No space left on "
                 "device; the filesystem of {dir} has 0 of 1048576 bytes and 250 of 256 inodes free. The server was not "
                 "started (exit status 75): free space there or make it writable for the service account, then restart "
                 "the unit." % INVOCATION)
STATVFS_FIELDS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_flag",
                  "f_namemax")


def log_dir_after_restart(tmp_path):
    """A log directory as the failed restart leaves it: current.log still points at the previous invocation's log."""
    log = tmp_path / launcher_log_name(PREVIOUS, "20261129T090000Z")
    log.write_text(header(PREVIOUS) + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    return str(tmp_path)


def log_filesystem(monkeypatch, directory, **fields):
    """os.statvfs() of ``directory`` answers a 1 MiB filesystem (4 KiB blocks, 256 inodes) with ``fields`` changed."""
    real = os.statvfs
    values = dict(f_bsize=4096, f_frsize=4096, f_blocks=256, f_bfree=0, f_bavail=0, f_files=256, f_ffree=250,
                  f_favail=250, f_flag=0, f_namemax=255)
    values.update(fields)

    def statvfs(path):
        if os.path.realpath(path) == os.path.realpath(directory):
            return os.statvfs_result(tuple(values[name] for name in STATVFS_FIELDS))
        return real(path)
    monkeypatch.setattr(os, "statvfs", statvfs)


def wait_after_restart(log_dir, state, journal, **args):
    """The wait after a restart from PREVIOUS to INVOCATION whose unit is in ``state``: (result, failed, the fake)."""
    systemctl = FakeSystemd(unit_show(*state), journal=journal)
    params = {"name": "sglang-q", "log_path": log_dir, "url": "http://127.0.0.1:1", "timeout": 30,
              "previous_invocation_id": PREVIOUS}
    params.update(args)
    result, failed = systemctl.run_module(sglang_ready.main, params)
    return result, failed, systemctl


def test_a_restart_on_a_full_log_filesystem_names_it_quotes_the_journal_and_says_nothing_runs(tmp_path, monkeypatch):
    # Measured before: "sglang-q.service exited before it became ready (...). Last lines of .../current.log:
    # (no log of this invocation)", which names neither the full filesystem nor the state the restart left.
    log_dir = log_dir_after_restart(tmp_path)
    log_filesystem(monkeypatch, log_dir)
    line = LAUNCHER_LINE.format(dir=log_dir)
    result, failed, systemd = wait_after_restart(log_dir, ("failed", "failed", "exit-code"), (0, line + "\n", ""))
    assert failed and not result["ready"]
    assert result["msg"] == (
        "sglang-q.service exited before it became ready (ActiveState=failed, SubState=failed, Result=exit-code). "
        "The log filesystem of {dir} is full (0 bytes free of 1.0 MiB): the launcher cannot write this start's log there "
        "and does not start the server without one (it exits 75); free space there or make it writable, then restart "
        "sglang-q.service. sglang-q.service is left failed (SubState=failed, Result=exit-code) and no server of it runs; "
        "the server from before the restart (invocation {previous}) is not running either. Journal of invocation "
        "{invocation} (journalctl _SYSTEMD_INVOCATION_ID={invocation}):\n  {line}\nLast lines of {dir}/current.log:\n"
        "  (no log of this invocation)".format(dir=log_dir, previous=PREVIOUS, invocation=INVOCATION, line=line))
    assert result["log_filesystem"] == {"path": log_dir, "bytes_free": 0, "bytes_total": 1048576, "inodes_free": 250,
                                        "inodes_total": 256, "read_only": False}
    assert result["journal_lines"] == [line] and "journal_error" not in result
    # The invocation's own lines, bounded by tail_lines, under a time limit.
    assert systemd.journal_calls == [["timeout", "--kill-after=2", "10", "journalctl", "--quiet", "--no-pager", "-o", "cat",
                                      "-n", "15", "_SYSTEMD_INVOCATION_ID=" + INVOCATION]]


@pytest.mark.parametrize("fields, state, named, left", [
    ({"f_flag": os.ST_RDONLY, "f_blocks": 262144, "f_bavail": 100000}, ("failed", "failed", "exit-code"), "is read-only",
     "sglang-q.service is left failed (SubState=failed, Result=exit-code) and no server of it runs"),
    ({"f_blocks": 262144, "f_bavail": 100000, "f_favail": 0}, ("failed", "failed", "exit-code"), "has no free inodes (0 of 256)",
     "sglang-q.service is left failed (SubState=failed, Result=exit-code) and no server of it runs"),
    ({"f_bavail": 3}, ("activating", "auto-restart", "exit-code"), "is nearly full (12.0 KiB free of 1.0 MiB)",
     "sglang-q.service is waiting to restart (ActiveState=activating, SubState=auto-restart, Result=exit-code) and no "
     "server of it runs: systemd starts it again after its RestartSec"),
], ids=["read-only", "no-inodes", "nearly-full-auto-restart"])
def test_what_keeps_the_launcher_from_logging_is_named(tmp_path, monkeypatch, fields, state, named, left):
    log_dir = log_dir_after_restart(tmp_path)
    log_filesystem(monkeypatch, log_dir, **fields)
    result, failed, dummy_systemd = wait_after_restart(log_dir, state, (0, "sglang-launch: cannot create the log file\n", ""))
    assert failed
    assert "The log filesystem of %s %s: the launcher cannot write" % (log_dir, named) in result["msg"]
    assert left + "; the server from before the restart (invocation %s) is not running either." % PREVIOUS in result["msg"]
    assert "\n  sglang-launch: cannot create the log file\n" in result["msg"]


def test_journal_lines_are_masked_before_they_are_cut_and_bounded(tmp_path, monkeypatch):
    log_dir = log_dir_after_restart(tmp_path)
    log_filesystem(monkeypatch, log_dir)
    key = "sk-llmops-test-0f3a9c2e7b1d"
    # 40 lines; the last has the key across the 500-character cut of a quoted line, another one has it as a flag.
    lines = ["line %d %s" % (number, "x" * 2000) for number in range(37)]
    lines += ["sglang serve: error: unrecognized arguments: --api-key %s" % key, "sglang-launch: cannot write the header",
              "x" * 490 + " api_key='%s'" % key]
    result, failed, dummy_systemd = wait_after_restart(log_dir, ("failed", "failed", "exit-code"),
                                                       (0, "\n".join(lines) + "\n", ""), tail_lines=3)
    assert failed
    assert len(result["journal_lines"]) == 3
    assert result["journal_lines"][0] == "sglang serve: error: unrecognized arguments: --api-key ********"
    assert result["journal_lines"][1] == "sglang-launch: cannot write the header"
    # 500 characters each (sglang_log.quoted()), and a mask where the result's redaction meets a quote the cut left open.
    assert all(len(line) <= 500 + len("********") for line in result["journal_lines"])
    assert result["journal_lines"][2].startswith("x" * 490 + " api_key=")
    assert "--api-key ********" in result["msg"]
    text = json.dumps(result)
    assert not [key[:end] for end in range(6, len(key) + 1) if key[:end] in text], "no part of the key is shown"


@pytest.mark.parametrize("journal, said", [
    ((124, "", ""), "(journalctl gave no answer within 10 s)"),
    ((1, "", "Failed to get journal access: Permission denied\n"),
     "(journalctl failed (rc=1): Failed to get journal access: Permission denied)"),
    ((0, "", ""), "(no lines)"),
], ids=["timeout", "error", "empty"])
def test_a_journal_that_cannot_help_is_said_and_a_roomy_filesystem_is_not_blamed(tmp_path, monkeypatch, journal, said):
    log_dir = log_dir_after_restart(tmp_path)
    log_filesystem(monkeypatch, log_dir, f_blocks=262144, f_bavail=100000, f_bfree=100000)
    result, failed, systemd = wait_after_restart(log_dir, ("failed", "failed", "exit-code"), journal)
    assert failed
    assert "log filesystem" not in result["msg"]
    assert ("Journal of invocation %s (journalctl _SYSTEMD_INVOCATION_ID=%s):\n  %s\n" % (INVOCATION, INVOCATION, said)
            in result["msg"])
    assert result["journal_lines"] == [] and result.get("journal_error") == (said[1:-1] if journal[0] else None)
    # An empty answer is asked once more (the journal may not have stored a line written a moment ago).
    assert len(systemd.journal_calls) == (2 if journal == (0, "", "") else 1)
