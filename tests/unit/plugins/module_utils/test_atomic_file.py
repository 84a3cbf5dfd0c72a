"""atomic_file: a replaced file has its mode from the start and nothing is left behind when the write fails."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file


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
