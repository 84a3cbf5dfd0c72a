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
