# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""service_files.open_log() against what a service user can leave in its log directory: links out of it, FIFOs, device
nodes, directories, hard links, dangling links, names with newlines, and files swapped while root opens them.

Real files, links and FIFOs in a temporary directory; a root-only secret stands in for /etc/shadow, and no part of it may
appear in an exception. within() turns a blocking open or read into a failure, without threads."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import service_files
from ansible_collections.llmops.serving.tests.unit.fakes import launcher_log_name, root_only_secret, secret_shown, within

INVOCATION = "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
LOG = launcher_log_name(INVOCATION)
CONTENT = "# llmops-serving instance=q\n[2026-11-29 19:45:02] server_args={}\n"


@pytest.fixture
def logs(tmp_path):
    directory = tmp_path / "log" / "q"
    directory.mkdir(parents=True)
    (directory / LOG).write_text(CONTENT)
    return directory


def current(logs, target):
    """Point current.log at ``target``, as the service user can."""
    link = logs / "current.log"
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(str(target), str(link))
    return str(link)


def refusal(path):
    """The RefusedFile open_log(path) raises, within 5 s (a FIFO or device must never block it)."""
    with within(5):
        with pytest.raises(service_files.RefusedFile) as caught:
            service_files.open_log(path)
    return caught.value


def test_current_log_is_resolved_in_the_directory_and_read_through_the_descriptor(logs):
    with service_files.open_log(current(logs, LOG)) as log:
        assert log.path == str(logs / LOG)
        assert stat.S_ISREG(log.stat.st_mode) and log.stat.st_ino == os.stat(logs / LOG).st_ino
        assert log.identity == ("file", log.stat.st_dev, log.stat.st_ino)
        assert os.pread(log.fd, 1000, 0) == CONTENT.encode()
        with open(log.proc_path, "rb") as reopened:
            assert os.fstat(reopened.fileno()).st_ino == log.stat.st_ino
    assert log.fd is None


def test_a_log_file_named_directly_is_opened(logs):
    with service_files.open_log(str(logs / LOG)) as log:
        assert os.pread(log.fd, 9, 0) == b"# llmops-"


def test_current_log_pointing_at_a_root_only_file_outside_is_refused_unread(tmp_path, logs):
    secret = root_only_secret(tmp_path)
    refused = refusal(current(logs, secret))
    assert str(refused) == "%s points outside the log directory to %s; it is not followed" % (logs / "current.log", secret)
    assert not secret_shown(refused)


def test_a_relative_link_out_of_the_directory_is_refused(tmp_path, logs):
    root_only_secret(tmp_path)
    refused = refusal(current(logs, "../../shadow"))
    assert "points outside the log directory to ../../shadow" in str(refused)
    assert refused.resolved is None


def test_a_name_in_the_directory_that_no_launcher_writes_is_refused(tmp_path, logs):
    secret = root_only_secret(logs)  # even inside the directory: not a launcher's log name
    refused = refusal(current(logs, os.path.basename(secret)))
    assert str(refused) == (
        "%s points at shadow, which is not a log file name the launcher writes (<YYYYmmddTHHMMSSZ>-<32 hex invocation id>.log); "
        "it is not followed" % (logs / "current.log"))
    assert not secret_shown(refused)


@pytest.mark.parametrize("make, kind", [
    (os.mkfifo, "a FIFO"),
    (os.mkdir, "a directory"),
    (lambda path: os.symlink("/etc/passwd", path), "a symlink"),
])
def test_a_launcher_named_target_that_is_not_a_regular_file_is_refused(logs, make, kind):
    name = launcher_log_name("0" * 32)
    make(str(logs / name))
    refused = refusal(current(logs, name))
    assert str(refused) == "%s points at %s, which is %s, not a log file; it is not read" % (logs / "current.log", name, kind)
    assert refused.resolved == str(logs / name)


def test_a_device_node_with_a_log_name_is_refused(logs):
    name = launcher_log_name("1" * 32)
    try:
        os.mknod(str(logs / name), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    refused = refusal(current(logs, name))
    assert "which is a character device, not a log file" in str(refused)


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "a FIFO"), (os.mkdir, "a directory"),
                                        (lambda path: os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)), "a regular file")])
def test_current_log_replaced_by_something_else_than_a_link_is_refused(logs, make, kind):
    make(str(logs / "current.log"))
    refused = refusal(str(logs / "current.log"))
    assert str(refused) == "%s is %s, not the symlink the launcher makes; it is not read" % (logs / "current.log", kind)


def test_a_hard_link_to_a_root_only_file_is_refused(tmp_path, logs):
    secret = root_only_secret(tmp_path)
    name = launcher_log_name("2" * 32)
    os.link(secret, str(logs / name))
    refused = refusal(current(logs, name))
    assert "which has 2 hard links, where a log the launcher writes has one" in str(refused)
    assert not secret_shown(refused)


def test_a_directly_named_link_or_fifo_is_refused(tmp_path, logs):
    secret = root_only_secret(tmp_path)
    os.symlink(secret, str(logs / launcher_log_name("3" * 32)))
    assert str(refusal(str(logs / launcher_log_name("3" * 32)))) == (
        "%s is a symlink, not a log file; it is not read" % (logs / launcher_log_name("3" * 32)))
    os.mkfifo(str(logs / "fifo.log"))
    assert "fifo.log is a FIFO" in str(refusal(str(logs / "fifo.log")))


def test_missing_and_dangling_are_missing_not_refused(logs):
    with pytest.raises(service_files.MissingFile, match="current.log does not exist$"):
        service_files.open_log(str(logs / "current.log"))
    name = launcher_log_name("4" * 32)
    link = current(logs, name)
    with pytest.raises(service_files.MissingFile) as caught:
        service_files.open_log(link)
    assert str(caught.value) == "%s points at %s, which does not exist" % (link, name)
    assert caught.value.resolved == str(logs / name)
    with pytest.raises(service_files.MissingFile, match="does not exist"):
        service_files.open_log(str(logs.parent / "gone" / "current.log"))


def test_a_name_with_a_newline_is_shown_escaped(logs):
    name = "20261129T194501Z-%s.log\nforged: line" % INVOCATION
    (logs / name).write_text("x\n")
    refused = refusal(current(logs, name))
    assert "\n" not in str(refused)
    assert repr(name)[1:-1] in str(refused) and "not a log file name the launcher writes" in str(refused)
    refused = refusal(str(logs / "a\nb" / "current.log"))
    assert "\n" not in str(refused)


def test_a_file_swapped_for_a_fifo_while_it_is_opened_is_refused_without_blocking(logs, monkeypatch):
    # The service user replaces the file between root's lstat and open: O_NONBLOCK keeps the open from blocking on the
    # FIFO, and the fstat that follows sees it.
    real_open = os.open

    def swap_then_open(path, flags, *args, **kwargs):
        if path == LOG:
            os.unlink(str(logs / LOG))
            os.mkfifo(str(logs / LOG))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(service_files.os, "open", swap_then_open)
    refused = refusal(current(logs, LOG))
    assert str(refused) == "%s points at %s, which changed while it was opened (now a FIFO); it is not read" % (
        logs / "current.log", LOG)


def test_a_file_swapped_for_a_link_while_it_is_opened_is_not_followed(tmp_path, logs, monkeypatch):
    secret = root_only_secret(tmp_path)
    real_open = os.open

    def swap_then_open(path, flags, *args, **kwargs):
        if path == LOG:
            os.unlink(str(logs / LOG))
            os.symlink(secret, str(logs / LOG))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(service_files.os, "open", swap_then_open)
    refused = refusal(current(logs, LOG))
    assert "which changed while it was opened" in str(refused)
    assert not secret_shown(refused)


def test_paths_that_name_no_file_are_refused(logs):
    assert str(refusal("/")) == "/ names no file in a directory"
    assert str(refusal(str(logs) + "/..")) == "%s is a directory, not a log file; it is not read" % (str(logs) + "/..")
    assert "is not a directory" in str(refusal(str(logs / LOG / "current.log")))
