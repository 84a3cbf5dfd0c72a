# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""log_provenance on fake /proc trees pointing at real log files, with `systemctl show` answered by a patched run_command."""

from __future__ import annotations

import datetime
import json
import os
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.modules import log_provenance
from ansible_collections.llmops.serving.tests.unit.fakes import (
    CONTROL_GROUP, INVOCATION, MAIN_PID, UNIT, FakeProc, FakeSystemctl, launcher_log_name, root_only_secret, secret_shown,
    show_text, vanish_mid_scan, within)

SESSION = "/user.slice/user-0.slice/session-3.scope"
DEPLOYMENT = "3f" * 32
OLD_INVOCATION = "0badc0de0badc0de0badc0de0badc0de"
# Verbatim line from https://github.com/sgl-project/sglang/pull/22331
DECODE_TP0 = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
              "gen throughput (token/s): 144.95, #queue-req: 0")
APPEND_WRITE = "0102001"  # O_LARGEFILE | O_APPEND | O_WRONLY, what a shell's >> redirect gives


def header(invocation=INVOCATION, pid=MAIN_PID, deployment=DEPLOYMENT, unit=UNIT):
    return ("# llmops-serving instance=qwen36 deployment_id=%s invocation_id=%s pid=%d started_at=2026-11-29T19:45:01Z unit=%s"
            % (deployment, invocation, pid, unit))


def systemd_time(epoch):
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime("%a %Y-%m-%d %H:%M:%S UTC")


class Target:
    """A fake host: a log directory with real files, a /proc tree whose fds link to them, and systemctl's answer."""

    def __init__(self, tmp_path, monkeypatch):
        self.proc = FakeProc(tmp_path / "proc")
        self.logs = tmp_path / "log" / "qwen36"
        self.logs.mkdir(parents=True)
        monkeypatch.setattr(procfs, "PROC_ROOT", str(self.proc.root))
        self.start = time.time() - 60
        self.show_overrides = {"ExecMainStartTimestamp": systemd_time(self.start)}
        self.current = self.write_log("20261129T194501Z-%s.log" % INVOCATION, header(), [DECODE_TP0])
        self.old = self.write_log("20261129T180000Z-%s.log" % OLD_INVOCATION, header(OLD_INVOCATION, 1234), ["[2026-11-29 18:30:00] old"],
                                  mtime=self.start - 3600)
        os.symlink(os.path.basename(self.current), str(self.logs / "current.log"))

    def write_log(self, name, first_line, lines, mtime=None):
        path = str(self.logs / name)
        with open(path, "w") as handle:
            if first_line is not None:
                handle.write(first_line + "\n")
            for line in lines:
                handle.write(line + "\n")
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    def server(self, output=None):
        """MainPID with stdout/stderr on ``output`` (default: the current log) and a TP worker that inherited them."""
        output = output or self.current
        self.proc.add_process(MAIN_PID, ["/opt/sglang/bin/python", "-m", "sglang.launch_server"], cgroup_path=CONTROL_GROUP,
                              starttime=1000, fds={0: ("/dev/null", "0100000"), 1: (output, APPEND_WRITE), 2: (output, APPEND_WRITE)})
        self.proc.add_process(4790, ["sglang::scheduler_TP0"], cgroup_path=CONTROL_GROUP, starttime=1100,
                              fds={1: (output, APPEND_WRITE), 2: (output, APPEND_WRITE)})

    def run(self, **args):
        params = dict({"name": UNIT, "path": str(self.logs / "current.log"), "deployment_id": DEPLOYMENT}, **args)
        return FakeSystemctl(show_text(**self.show_overrides)).run_module(log_provenance.main, params, check_mode=True)


@pytest.fixture
def target(tmp_path, monkeypatch):
    return Target(tmp_path, monkeypatch)


def test_happy_path_through_current_log(target):
    target.server()
    result, failed = target.run()
    assert not failed, result.get("msg")
    info = os.stat(target.current)
    assert result["changed"] is False
    assert result["path"] == os.path.realpath(target.current)
    assert (result["inode"], result["size"]) == (info.st_ino, info.st_size)
    assert result["header"]["invocation_id"] == INVOCATION and result["header"]["pid"] == MAIN_PID
    assert result["offset"] == len(header()) + 1
    assert result["last_timestamp"] == "2026-04-08T14:05:21"
    assert result["last_line"] == DECODE_TP0
    assert result["main_pid_output"] == {"stdout": target.current, "stderr": target.current}
    assert sorted((w["pid"], w["fd"], w["in_unit"]) for w in result["writers"]) == [
        (4711, 1, True), (4711, 2, True), (4790, 1, True), (4790, 2, True)]
    assert result["strays"] == [] and result["problems"] == []


def test_old_log_passed_as_path(target):
    target.server()
    result, failed = target.run(path=target.old)
    assert failed
    info = os.stat(target.old)
    assert result["msg"].startswith(
        "%s (inode %d) is not the file MainPID 4711 writes now: its fds 1 and 2 go to %s (inode %d). %s is an old log (its "
        "header names invocation %s, PID 1234, started 2026-11-29T19:45:01Z); read %s (or the unit's current.log) instead."
        % (target.old, info.st_ino, target.current, os.stat(target.current).st_ino, target.old, OLD_INVOCATION, target.current))
    assert "belongs to invocation %s" % OLD_INVOCATION in result["msg"]
    assert "it is an old log that nobody writes now" in result["msg"]
    assert result["header"]["invocation_id"] == OLD_INVOCATION


def test_log_deleted_and_recreated_while_the_server_writes_the_old_inode(target):
    # `rm -f log; touch log`: the server's fds now show "<path> (deleted)"; a same-named file stands in for that inode.
    deleted = target.current + procfs.DELETED_SUFFIX
    os.rename(target.current, deleted)
    target.write_log(os.path.basename(target.current), None, ["hand-made"])
    target.server(output=deleted)
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith(
        "the unit writes to a deleted file: MainPID 4711's fds 1 and 2 -> '%s' (inode %d), not to %s (inode %d). The log was "
        "deleted and re-created while the server kept writing to the old inode"
        % (deleted, os.stat(deleted).st_ino, target.current, os.stat(target.current).st_ino))
    assert "is not an llmops-serving header" in result["msg"]
    assert result["main_pid_output"]["stdout"] == deleted
    # Writers of the deleted twin inside the unit are listed, not strays.
    assert result["strays"] == []
    assert {w["pid"] for w in result["writers"]} == {4711, 4790}


def test_stray_writes_the_deleted_inode_while_the_unit_writes_the_new_log(target):
    # The incident: an old nohup'ed server still writes to the log that was deleted and re-created under the same name.
    target.server()
    deleted = target.current + procfs.DELETED_SUFFIX
    with open(deleted, "w") as handle:
        handle.write("old run\n")
    target.proc.add_process(4242, ["python3", "-m", "sglang.launch_server", "--port", "30000"], cgroup_path=SESSION, starttime=500,
                            fds={1: (deleted, "0100001"), 2: (deleted, "0100001")})
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith(
        "PID 4242 (python3 -m sglang.launch_server --port 30000, started %s), outside sglang-qwen36.service (cgroup %s), still "
        "writes to a deleted file that was %s (fds 1 and 2 -> '%s'): a server left over from before the log was re-created"
        % (target.proc.start_iso(500), SESSION, target.current, deleted))
    assert "never kill by name" in result["msg"]
    assert [s["pid"] for s in result["strays"]] == [4242]


def test_process_outside_the_unit_writes_into_the_log(target):
    target.server()
    target.proc.add_process(4242, ["bash", "-c", "echo hi >> current.log"], cgroup_path=SESSION, starttime=700,
                            fds={3: (target.current, "0102001")})
    target.proc.add_process(4243, ["tail", "-F", "current.log"], cgroup_path=SESSION, fds={3: (target.current, "0100000")})
    result, failed = target.run()
    assert failed
    assert result["msg"] == (
        "PID 4242 (bash -c echo hi >> current.log, started %s), outside sglang-qwen36.service (cgroup %s), has %s open for writing "
        "(fd 3): a process started by hand (nohup?) writes into this log and mixes its output with the unit's. Stop it by its PID "
        "after checking it (kill 4242); never kill by name (no pkill -f)." % (target.proc.start_iso(700), SESSION, target.current))
    assert [s["reason"] for s in result["strays"]] == ["has %s open for writing outside sglang-qwen36.service" % target.current]
    assert 4243 not in [w["pid"] for w in result["writers"]]


def test_header_of_another_invocation(target):
    # The fd matches, yet the header is another start's (a launcher that appended to an existing file).
    target.current = target.write_log(os.path.basename(target.current), header(OLD_INVOCATION), [DECODE_TP0])
    target.server()
    result, failed = target.run()
    assert failed
    assert result["msg"] == (
        "%s belongs to invocation %s (PID 4711, started 2026-11-29T19:45:01Z), but sglang-qwen36.service now runs invocation %s "
        "(MainPID 4711): it is the log of another start." % (target.current, OLD_INVOCATION, INVOCATION))


def test_header_pid_is_not_main_pid(target):
    target.current = target.write_log(os.path.basename(target.current), header(pid=4700), [DECODE_TP0])
    target.server()
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("the header of %s names PID 4700, but sglang-qwen36.service's MainPID is 4711" % target.current)


def test_a_malformed_header_is_named_as_such_not_as_a_file_made_by_hand(target):
    # Two pid keys: the launcher writes each key once, so something else wrote this line.
    target.current = target.write_log(os.path.basename(target.current), header().replace(" unit=", " pid=4711 unit="), [DECODE_TP0])
    target.server()
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("the header of %s is malformed (" % target.current)
    assert "pid" in result["msg"] and "re-created by hand" not in result["msg"]


def test_header_of_another_deployment_and_unit(target):
    target.current = target.write_log(os.path.basename(target.current), header(deployment="aa" * 32, unit="other.service"), [])
    target.server()
    result, failed = target.run()
    assert failed
    assert result["problems"] == [
        "the header of %s names unit other.service, not sglang-qwen36.service." % target.current,
        "%s was written for deployment %s, not %s that was just deployed: the unit was not restarted after the change."
        % (target.current, "aa" * 32, DEPLOYMENT)]


def test_mtime_older_than_the_invocation(target):
    target.server()
    os.utime(target.current, (target.start - 10, target.start - 10))
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("%s was last written at %s, before the current invocation of sglang-qwen36.service started at "
                                    % (target.current, procfs.iso_utc(target.start - 10)))
    os.utime(target.current, (target.start - 1, target.start - 1))  # within the clock slack
    result, failed = target.run()
    assert not failed, result.get("msg")
    result, failed = target.run(clock_slack=0.0)
    assert failed


def test_output_not_going_to_a_file(target):
    target.server(output="socket:[31337]")
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith(
        "MainPID 4711's fds 1 and 2 go to socket:[31337], not to a log file: sglang-qwen36.service was not started through the "
        "llmops-serving launcher")


def test_unit_not_running(target):
    target.show_overrides.update(ActiveState="inactive", SubState="dead", MainPID="0")
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("sglang-qwen36.service is not running (LoadState=loaded, ActiveState=inactive, SubState=dead, MainPID=0)")
    # The file's facts still come back.
    assert result["header"]["invocation_id"] == INVOCATION and result["main_pid_output"] is None


def test_systemctl_failure(target):
    result, failed = FakeSystemctl((1, "", "Failed to connect to bus: No such file or directory\n")).run_module(
        log_provenance.main, {"name": "sglang-qwen36", "path": str(target.logs / "current.log")}, check_mode=True)
    assert failed
    assert result["msg"].startswith("cannot ask systemd about sglang-qwen36.service: systemctl show")
    assert result["msg"].endswith("Failed to connect to bus: No such file or directory")
    assert result["unit"] is None


def test_path_missing(target):
    target.server()
    os.unlink(target.current)
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("%s points at %s, which does not exist." % (
        target.logs / "current.log", os.path.basename(target.current)))
    assert result["path"] == target.current and result["inode"] is None


def test_main_pid_fd_unreadable(target):
    target.server()
    os.unlink(str(target.proc.root / str(MAIN_PID) / "fd" / "2"))
    result, failed = target.run()
    assert failed
    assert result["msg"] == "cannot read fd 2 of MainPID 4711 (process gone, or not root)."


def test_pids_vanishing_mid_scan(target, monkeypatch):
    target.server()
    target.proc.add_process(4242, ["gone"], cgroup_path=SESSION, fds={3: (target.current, "0102001")})
    vanish_mid_scan(monkeypatch, listdir={"/4242/fd": ProcessLookupError})
    result, failed = target.run()
    assert not failed, result.get("msg")


# --------------------------------------------------------------------------- a log directory the service user tampered with

def repoint(target, name):
    """current.log -> ``name``, as the service user can do at any time."""
    link = target.logs / "current.log"
    os.unlink(str(link))
    os.symlink(name, str(link))


def test_current_log_pointing_at_a_root_only_file_is_refused_and_none_of_it_comes_back(target, tmp_path):
    # The old module followed the link and quoted the file's first line as the "header" it could not parse.
    target.server()
    secret = root_only_secret(tmp_path)
    repoint(target, secret)
    result, failed = target.run()
    assert failed
    assert result["msg"].startswith("%s points outside the log directory to %s; it is not followed." % (
        target.logs / "current.log", secret))
    # What the server really writes is still named, from its fds.
    assert "is not the file MainPID 4711 writes now: its fds 1 and 2 go to %s" % target.current in result["msg"]
    assert result["path"] == str(target.logs / "current.log")
    assert (result["inode"], result["header"], result["header_error"], result["last_line"]) == (None, None, None, None)
    assert not secret_shown(json.dumps(result))


def test_a_hard_link_to_a_root_only_file_is_refused(target, tmp_path):
    target.server()
    secret = root_only_secret(tmp_path)
    name = launcher_log_name("9" * 32)
    os.link(secret, str(target.logs / name))
    repoint(target, name)
    result, failed = target.run()
    assert failed and "which has 2 hard links" in result["msg"]
    assert not secret_shown(json.dumps(result))


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "a FIFO"), (os.mkdir, "a directory")])
def test_current_log_pointing_at_a_fifo_or_directory_fails_without_blocking(target, make, kind):
    target.server()
    name = launcher_log_name("8" * 32)
    make(str(target.logs / name))
    repoint(target, name)
    with within(10):
        result, failed = target.run()
    assert failed
    assert result["msg"].startswith("%s points at %s, which is %s, not a log file; it is not read." % (
        target.logs / "current.log", name, kind))
    assert result["path"] == str(target.logs / name)


def test_a_fifo_passed_as_path_fails_without_blocking(target):
    target.server()
    fifo = str(target.logs / launcher_log_name("7" * 32))
    os.mkfifo(fifo)
    with within(10):
        result, failed = target.run(path=fifo)
    assert failed and result["msg"].startswith("%s is a FIFO, not a log file; it is not read." % fifo)


def test_command_lines_and_log_lines_come_back_without_the_api_key(target):
    # A process outside the unit writes into the log, started with the key on its command line; the log's last
    # line carries it too (SGLang's repr of its arguments).
    key = "sk-0f3a9c2e5d7b"
    line = "[2026-11-29 19:45:03 TP0] ServerArgs(model_path='/models/q', api_key='%s', port=30000)" % key
    target.current = target.write_log(os.path.basename(target.current), header(), [DECODE_TP0, line])
    target.server()
    target.proc.add_process(4242, ["python3", "-m", "sglang.launch_server", "--api-key", key, "--port", "30000"],
                            cgroup_path=SESSION, starttime=700, fds={1: (target.current, "0102001")})
    result, failed = target.run()
    assert failed
    assert "PID 4242 (python3 -m sglang.launch_server --api-key ******** --port 30000, started" in result["msg"]
    assert result["last_line"] == line.replace(key, "********")
    assert key not in json.dumps(result)


# --------------------------------------------------------------------------- this machine's real /proc

def wait_for_exec(pid, cmdline, limit=30.0):
    """Wait until the child has exec'd: between fork and the end of execve its /proc cmdline is the parent's or empty
    (read as ``[comm]``), and a check made then names the wrong command. Waits for the state, bounded by ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                if handle.read() == cmdline:
                    return
        except OSError:
            pass
        time.sleep(0.01)
    pytest.fail("PID %d did not exec %r within %.0f s" % (pid, cmdline, limit))


@pytest.fixture
def real_server(tmp_path):
    """A child process whose stdout and stderr go (O_APPEND) to a real log file with a launcher header, as the unit's would."""
    import subprocess  # pylint: disable=import-outside-toplevel

    path = tmp_path / ("20261129T194501Z-%s.log" % INVOCATION)
    with open(str(path), "ab") as output:
        child = subprocess.Popen(["sleep", "60"], stdout=output, stderr=output)  # pylint: disable=consider-using-with
    wait_for_exec(child.pid, b"sleep\x0060\x00")
    with open(str(path), "a") as handle:
        handle.write(header(pid=child.pid) + "\n" + DECODE_TP0 + "\n")
    if procfs.fd_link(child.pid, 1) is None:
        child.kill()
        child.wait()
        pytest.skip("cannot read another process's fds here")
    yield child, str(path)
    child.kill()
    child.wait()


def run_against_real_proc(main_pid, path):
    systemctl = FakeSystemctl(show_text(MainPID=str(main_pid), ExecMainStartTimestamp=systemd_time(time.time() - 30)))
    return systemctl.run_module(log_provenance.main, {"name": UNIT, "path": path}, check_mode=True)


def test_real_proc_inode_match_and_writer_outside_the_unit(real_server):
    child, path = real_server
    result, failed = run_against_real_proc(child.pid, path)
    # The child runs in this test's cgroup, not in the (pretended) unit's: it is the only problem, and it is named.
    assert failed
    assert result["main_pid_output"] == {"stdout": path, "stderr": path}
    assert result["header"]["pid"] == child.pid and result["inode"] == os.stat(path).st_ino
    assert len(result["problems"]) == 1
    assert result["problems"][0].startswith("PID %d (sleep 60, started " % child.pid)
    assert "has %s open for writing (fds 1 and 2)" % path in result["problems"][0]


def test_real_proc_log_deleted_and_recreated(real_server):
    child, path = real_server
    old_inode = os.stat(path).st_ino
    os.unlink(path)
    with open(path, "w") as handle:
        handle.write("re-created by hand\n")
    result, failed = run_against_real_proc(child.pid, path)
    assert failed
    assert result["main_pid_output"]["stdout"] == path + " (deleted)"
    assert result["msg"].startswith(
        "the unit writes to a deleted file: MainPID %d's fds 1 and 2 -> '%s (deleted)' (inode %d), not to %s (inode %d)."
        % (child.pid, path, old_inode, path, os.stat(path).st_ino))
