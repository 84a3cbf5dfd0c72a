# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service's log pruner, run as a program (the way the unit's ExecStartPre=+ runs it, by its #! line) against
a log directory that the service account filled with hostile entries: names with a newline, symlinks to files outside,
FIFOs and directories named like logs, a symlinked log directory. Nothing outside the directory may be touched, nothing
but the launcher's regular log files removed, nothing a live process holds open removed, nothing truncated."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import LOG_FILE_NAME_RE

PRUNER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "sglang_service", "files", "sglang-log-prune")
# A FIFO or a file held open must never make the pruner wait; far more than a run takes even on a loaded machine.
RUN_TIMEOUT = 60


def log_name(n, invocation=None):
    """A name the launcher could have written: <YYYYmmddTHHMMSSZ>-<32 hex invocation id>.log, the n-th oldest."""
    return "202601%02dT000000Z-%s.log" % (n + 1, invocation or "%032x" % n)


def interpreter():
    """The program and options of the pruner's #! line, as the kernel runs it (the file is installed 0755, not committed so)."""
    with open(PRUNER, encoding="utf-8") as handle:
        first = handle.readline()
    assert first.startswith("#!")
    return first[2:].split()


def prune(*args, cwd=None):
    return subprocess.run(interpreter() + [PRUNER] + [str(arg) for arg in args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False, cwd=cwd)


def write(path, text, day):
    """A file with content ``text`` last modified on 2026-01-<day>."""
    path.write_text(text)
    stamp = 1767225600 + (day - 1) * 86400
    os.utime(path, (stamp, stamp))


def make_logs(log_dir, count, first=0):
    """Regular logs number first..first+count-1, each a day newer than the one before; their names, oldest first."""
    names = []
    for n in range(first, first + count):
        write(log_dir / log_name(n), "log %d\n" % n, n + 1)
        names.append(log_name(n))
    return names


def listing(directory):
    return sorted(os.listdir(directory))


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "log"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path):
    """A directory beside the log directory with a canary file, as root's files outside it."""
    path = tmp_path / "outside"
    path.mkdir()
    write(path / "canary.log", "canary\n", 1)
    return path


def test_the_pruner_matches_log_names_with_the_pattern_the_launcher_and_the_checks_use():
    loader = importlib.machinery.SourceFileLoader("sglang_log_prune", PRUNER)
    spec = importlib.util.spec_from_loader("sglang_log_prune", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    assert module.LOG_FILE_NAME_RE.pattern == LOG_FILE_NAME_RE.pattern
    assert module.LOG_FILE_NAME_RE.flags == LOG_FILE_NAME_RE.flags


def test_the_pruner_ignores_the_python_environment_and_path_the_unit_sets_for_the_server(log_dir, tmp_path):
    # The unit's Environment= lines reach ExecStartPre=+ too, which runs as root: a PYTHONPATH into a directory the
    # service account can write, or a PATH with another python3 first, must not choose what root runs.
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "ran-as-root"
    (planted / "sitecustomize.py").write_text("open(%r, 'w').close()\n" % str(marker))
    fake = planted / "python3"
    fake.write_text("#!/bin/sh\ntouch %s\n" % marker)
    fake.chmod(0o755)
    names = make_logs(log_dir, 3)
    environment = dict(os.environ, PYTHONPATH=str(planted), PATH="%s:%s" % (planted, os.environ["PATH"]))
    run = subprocess.run(interpreter() + [PRUNER, str(log_dir), "2"], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                         check=False, env=environment)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not marker.exists()
    assert listing(log_dir) == names[2:]


def test_keeps_keep_minus_one_newest_removes_oldest_first_and_never_truncates(log_dir):
    names = make_logs(log_dir, 5)
    run = prune(log_dir, 3)
    assert run.returncode == 0, run.stdout + run.stderr
    assert listing(log_dir) == names[3:]
    assert [(log_dir / name).read_text() for name in names[3:]] == ["log 3\n", "log 4\n"]
    assert "removed '%s'" % names[0] in run.stdout


def test_equal_times_are_ordered_by_name(log_dir):
    for invocation in ("c" * 32, "a" * 32, "b" * 32):
        write(log_dir / log_name(0, invocation), "x\n", 1)
    run = prune(log_dir, 2)
    assert run.returncode == 0, run.stdout + run.stderr
    assert listing(log_dir) == [log_name(0, "c" * 32)]


def test_fewer_logs_than_keep_and_a_missing_directory_change_nothing(log_dir, tmp_path):
    names = make_logs(log_dir, 2)
    assert prune(log_dir, 3).returncode == 0
    assert listing(log_dir) == names
    run = prune(tmp_path / "absent", 3)
    assert run.returncode == 0 and run.stdout == ""


def test_a_name_with_a_newline_never_deletes_the_path_on_its_second_line(log_dir, outside):
    canary = outside / "canary.log"
    # The old pruner read `find -printf '%T@ %p\n'` line by line: the second line of this name sorted first and was
    # removed as a path. A name holds no slash, so that path is relative to the pruner's working directory (/ under
    # systemd; here the directory with the canary).
    hostile = log_name(0) + "\n" + canary.name
    write(log_dir / hostile, "hostile\n", 1)
    names = make_logs(log_dir, 4, first=1)
    run = prune(log_dir, 2, cwd=outside)
    assert run.returncode == 0, run.stdout + run.stderr
    assert canary.read_text() == "canary\n"
    assert listing(outside) == ["canary.log"]
    # Not the launcher's name, so not a log: left where the service account put it, and the real logs pruned as usual.
    assert listing(log_dir) == sorted([hostile, names[-1]])


def test_symlinks_named_like_logs_are_neither_followed_nor_counted(log_dir, outside):
    canary = outside / "canary.log"
    os.symlink(canary, log_dir / log_name(0))
    os.symlink("../outside/canary.log", log_dir / log_name(1))
    names = make_logs(log_dir, 2, first=2)
    run = prune(log_dir, 3)
    assert run.returncode == 0, run.stdout + run.stderr
    assert canary.read_text() == "canary\n" and listing(outside) == ["canary.log"]
    assert os.path.islink(log_dir / log_name(0)) and os.path.islink(log_dir / log_name(1))
    # The two symlinks are not logs: of the two regular logs, both stay with KEEP 3.
    assert listing(log_dir) == sorted([log_name(0), log_name(1)] + names)
    assert "ignoring '%s': a symbolic link, not a log file" % log_name(0) in run.stdout


def test_fifos_and_directories_named_like_logs_are_left_alone_without_blocking(log_dir):
    os.mkfifo(log_dir / log_name(0))
    (log_dir / log_name(1)).mkdir()
    (log_dir / log_name(1) / "inner.log").write_text("inner\n")
    names = make_logs(log_dir, 3, first=2)
    run = prune(log_dir, 2)
    assert run.returncode == 0, run.stdout + run.stderr
    assert listing(log_dir) == sorted([log_name(0), log_name(1), names[-1]])
    assert (log_dir / log_name(1) / "inner.log").read_text() == "inner\n"
    assert "ignoring '%s': a FIFO, not a log file" % log_name(0) in run.stdout
    assert "ignoring '%s': a directory, not a log file" % log_name(1) in run.stdout


def test_other_names_in_the_directory_are_never_candidates(log_dir):
    others = ["current.log", ".current.log.4711", "notes.txt", log_name(0) + ".bak", log_name(0).upper(), "x" + log_name(0)]
    for day, name in enumerate(others, start=1):
        write(log_dir / name, name, day)
    os.symlink(log_name(3), log_dir / "current.log.link")
    names = make_logs(log_dir, 4, first=len(others))
    run = prune(log_dir, 1)
    assert run.returncode == 0, run.stdout + run.stderr
    assert listing(log_dir) == sorted(others + ["current.log.link"])
    assert names[0] not in listing(log_dir)


def test_a_symlinked_log_directory_is_refused_and_its_target_untouched(tmp_path, outside):
    (outside / log_name(0)).write_text("outside log\n")
    link = tmp_path / "log"
    os.symlink(outside, link)
    for path in (str(link), str(link) + "/"):
        run = prune(path, 1)
        assert run.returncode == 1
        assert "is a symbolic link, not the log directory; nothing was pruned" in run.stdout
    assert listing(outside) == sorted(["canary.log", log_name(0)])


def test_a_file_in_place_of_the_log_directory_is_refused(tmp_path):
    path = tmp_path / "log"
    path.write_text("x\n")
    run = prune(path, 1)
    assert run.returncode == 1
    assert "%s is a regular file, not the log directory; nothing was pruned" % ascii(str(path)) in run.stdout
    assert path.read_text() == "x\n"


def test_a_file_a_live_process_holds_open_is_kept_by_inode_whatever_its_name(log_dir):
    names = make_logs(log_dir, 4)
    # Held through a hard link outside the log directory: the name the holder opened says nothing, the inode does.
    holder_path = log_dir.parent / "held-elsewhere"
    os.link(log_dir / names[0], holder_path)
    with open(holder_path, "ab") as handle:
        holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                  stdout=handle)
    try:
        # Popen returns once the child runs (exec succeeded), so it holds the file from here on; only it does.
        run = prune(log_dir, 1)
    finally:
        holder.communicate(timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert listing(log_dir) == [names[0]]
    assert (log_dir / names[0]).read_text() == "log 0\n", "a kept file is never truncated"
    assert "keeping '%s': a live process still has it open" % names[0] in run.stdout
    # Once the holder is gone, the file goes like any other.
    assert prune(log_dir, 1).returncode == 0
    assert listing(log_dir) == []


@pytest.mark.parametrize("keep", ["0", "-1", "+2", "two", "", " 3", "3\n", "\u0663", "1e3", "9999999999"])
def test_keep_must_be_a_positive_decimal_number(log_dir, keep):
    names = make_logs(log_dir, 3)
    run = prune(log_dir, keep)
    assert run.returncode == 2
    assert "KEEP must be a positive number" in run.stdout + run.stderr
    assert listing(log_dir) == names


@pytest.mark.parametrize("args", [[], ["/var/log/x"], ["/var/log/x", "3", "extra"], ["", "3"]])
def test_usage_errors_exit_2_and_touch_nothing(args):
    assert prune(*args).returncode == 2
