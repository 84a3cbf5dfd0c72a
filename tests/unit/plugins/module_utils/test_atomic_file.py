"""atomic_file: a replaced file has its mode from the start and nothing is left behind when the write fails."""

from __future__ import annotations

import os
import re
import stat
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file
from ansible_collections.llmops.serving.tests.unit.lock_holder import hold_lock, release


def test_atomic_write_replaces_with_mode_and_reads_back(tmp_path):
    target = tmp_path / "etc" / "server.env"
    atomic_file.atomic_write(str(target), b"SGLANG_API_KEY=x\n", 0o600)
    assert atomic_file.read_bytes(str(target)) == b"SGLANG_API_KEY=x\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    atomic_file.atomic_write(str(target), b"new\n", 0o644)
    assert target.read_bytes() == b"new\n" and stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert os.listdir(target.parent) == ["server.env"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "record.json"
    target.write_bytes(b"old\n")

    def refuse(src, dst):
        raise OSError("rename refused")
    monkeypatch.setattr(atomic_file.os, "replace", refuse)
    with pytest.raises(OSError):
        atomic_file.atomic_write(str(target), b"new\n", 0o644)
    assert target.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["record.json"]


def test_atomic_replace_keeps_mode_and_owner_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "120.conf"
    target.write_bytes(b"arch: amd64\n")
    target.chmod(0o640)
    before = os.stat(target)
    warnings = []
    atomic_file.atomic_replace(str(target), b"arch: amd64\ncores: 4\n", warnings)
    after = os.stat(target)
    assert target.read_bytes() == b"arch: amd64\ncores: 4\n"
    assert after.st_ino != before.st_ino, "replaced by rename, not rewritten in place"
    assert stat.S_IMODE(after.st_mode) == 0o640 and (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert warnings == [] and os.listdir(tmp_path) == ["120.conf"]


def test_atomic_replace_warns_when_the_filesystem_refuses_chmod(tmp_path, monkeypatch):
    # pmxcfs (/etc/pve) sets modes itself and answers chmod with an error: the content is still replaced.
    target = tmp_path / "120.conf"
    target.write_bytes(b"old\n")
    target.chmod(0o640)

    def refuse(fd, mode):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(atomic_file.os, "fchmod", refuse)
    warnings = []
    atomic_file.atomic_replace(str(target), b"new\n", warnings)
    assert target.read_bytes() == b"new\n"
    assert warnings == ["could not keep the mode of %s: [Errno 1] Operation not permitted" % target]
    assert os.listdir(tmp_path) == ["120.conf"]


def test_atomic_replace_of_a_missing_file_fails_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_file.atomic_replace(str(tmp_path / "999.conf"), b"x\n", [])
    assert os.listdir(tmp_path) == []


def test_write_backup_never_overwrites_and_keeps_the_mode(tmp_path):
    target = tmp_path / "120.conf"
    first = atomic_file.write_backup(str(target), b"one\n", 0o640, stamp="20261129T193000")
    second = atomic_file.write_backup(str(target), b"two\n", 0o100640, stamp="20261129T193000")
    assert first == str(target) + ".20261129T193000.bak" and second == str(target) + ".20261129T193000.1.bak"
    assert atomic_file.read_bytes(first) == b"one\n" and atomic_file.read_bytes(second) == b"two\n"
    assert stat.S_IMODE(os.stat(second).st_mode) == 0o640


def test_write_backup_gives_up_when_every_name_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic_file, "MAX_BACKUP_ATTEMPTS", 2)
    target = str(tmp_path / "120.conf")
    for _attempt in range(2):
        atomic_file.write_backup(target, b"x\n", 0o600, stamp="20261129T193000")
    with pytest.raises(FileExistsError, match="no free backup name"):
        atomic_file.write_backup(target, b"x\n", 0o600, stamp="20261129T193000")


# -- reading a file that must be a regular one, setting a bad file aside, the lock (issue #12) -----------------------


def test_read_regular_reads_a_regular_file(tmp_path):
    path = tmp_path / "deployment.json"
    path.write_bytes(b"{}\n")
    assert atomic_file.read_regular(str(path)) == b"{}\n"
    with pytest.raises(FileNotFoundError):
        atomic_file.read_regular(str(tmp_path / "absent"))


@pytest.mark.parametrize("make, found", [
    (lambda path: path.mkdir(), "a directory"),
    (os.mkfifo, "a FIFO"),
    (lambda path: path.symlink_to(path.parent / "target"), "a symbolic link"),
])
def test_read_regular_never_opens_anything_else(tmp_path, make, found):
    (tmp_path / "target").write_text("{}")
    path = tmp_path / "deployment.json"
    make(path)
    # A FIFO opened for reading would block until a writer came: it is refused before it is opened.
    with pytest.raises(atomic_file.NotARegularFile) as info:
        atomic_file.read_regular(str(path))
    assert info.value.found == found
    assert str(info.value.filename) == str(path) and "%s is %s, not a regular file" % (path, found) in str(info.value)


def test_set_aside_renames_without_ever_overwriting(tmp_path):
    path = tmp_path / "deployment.json"
    path.write_bytes(b"{trunc")
    taken = tmp_path / "deployment.json.corrupt-20261129T194501Z"
    taken.write_bytes(b"an earlier one")
    aside = atomic_file.set_aside(str(path), "corrupt", stamp="20261129T194501Z")
    assert aside == str(taken) + ".1"
    assert not path.exists() and taken.read_bytes() == b"an earlier one" and (tmp_path / aside).read_bytes() == b"{trunc"
    path.write_bytes(b"x")
    assert re.fullmatch(re.escape(str(path)) + r"\.corrupt-\d{8}T\d{6}Z", atomic_file.set_aside(str(path), "corrupt"))


def test_file_lock_is_exclusive_names_its_holder_and_is_free_again_after(tmp_path):
    path = str(tmp_path / "deployment.lock")
    with atomic_file.file_lock(path, 1) as held:
        assert held is True
        assert open(path, encoding="ascii").read() == "%d\n" % os.getpid()
        # flock locks belong to the open file: a second open, even in this process, is another run.
        started = time.monotonic()
        with pytest.raises(atomic_file.LockTimeout, match=r"is locked by another run \(PID %d\), still after 0.3 s" % os.getpid()) as info:
            with atomic_file.file_lock(path, 0.3):
                pass
        assert info.value.holder == os.getpid() and time.monotonic() - started >= 0.3
    assert open(path, encoding="ascii").read() == "", "the PID names the holder only while it holds the lock"
    with atomic_file.file_lock(path, 0):
        pass


def test_a_run_that_only_reads_shares_the_lock_and_needs_no_file(tmp_path):
    path = str(tmp_path / "deployment.lock")
    with atomic_file.file_lock(path, 0, shared=True) as held:
        assert held is False and not os.path.exists(path)
    holder = hold_lock(path, shared=True)
    try:
        with atomic_file.file_lock(path, 0, shared=True) as held:
            assert held is True
        with pytest.raises(atomic_file.LockTimeout, match="a PID it did not write"):
            with atomic_file.file_lock(path, 0):
                pass
    finally:
        release(holder)
    holder = hold_lock(path)
    try:
        with pytest.raises(atomic_file.LockTimeout, match=r"\(PID %d\)" % holder.pid):
            with atomic_file.file_lock(path, 0, shared=True):
                pass
    finally:
        release(holder)


def test_a_lock_whose_holder_died_is_free(tmp_path):
    path = str(tmp_path / "deployment.lock")
    holder = hold_lock(path)
    holder.kill()
    holder.wait(timeout=60)
    with atomic_file.file_lock(path, 0):
        assert open(path, encoding="ascii").read() == "%d\n" % os.getpid()
