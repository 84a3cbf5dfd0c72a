# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment_state: the instance's lock, a record read only when it is one, the staging directories of interrupted runs.
(The modules' own tests run the same code through deployment_record and deployment_restore.)"""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import deployment_state
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import record_paths, record_text
from ansible_collections.llmops.serving.tests.unit.lock_holder import hold_lock, release

A, B, C = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def paths(tmp_path):
    return record_paths("qwen36", str(tmp_path / "state"))


def archive(paths, name, mtime):
    path = os.path.join(paths["archive_root"], name)
    os.makedirs(path)
    os.utime(path, (mtime, mtime))
    return path


def test_archived_deployments_are_the_complete_archives_newest_first(paths):
    assert deployment_state.archived_deployments(paths["archive_root"]) == []
    archive(paths, A, 1767225600)
    archive(paths, B, 1767312000)
    archive(paths, C + ".partial", 1767398400)
    archive(paths, "not-an-id", 1767398400)
    assert deployment_state.archived_deployments(paths["archive_root"]) == [(B, "2026-01-02T00:00:00Z"), (A, "2026-01-01T00:00:00Z")]


def test_prune_partials_removes_only_staging_directories(paths):
    archive(paths, A, 0)
    partial = archive(paths, B + ".partial", 0)
    with open(os.path.join(partial, "00-unit"), "w", encoding="utf-8") as handle:
        handle.write("half")
    # Not a directory: not a staging directory this code made, and not followed.
    os.symlink(os.path.join(paths["archive_root"], A), os.path.join(paths["archive_root"], C + ".partial"))
    assert deployment_state.prune_partials(paths["archive_root"]) == [B + ".partial"]
    assert sorted(os.listdir(paths["archive_root"])) == [A, C + ".partial"]
    assert os.path.isdir(os.path.join(paths["archive_root"], A))
    assert deployment_state.prune_partials(os.path.join(paths["state_dir"], "absent")) == []


def test_load_record_reads_a_record_and_none_when_there_is_none(paths):
    assert deployment_state.load_record(paths["record_path"], paths["archive_root"], False) is None
    os.makedirs(paths["state_dir"])
    record = {"instance": "qwen36", "deployment_id": A, "previous_deployment_id": None, "inputs": {}}
    with open(paths["record_path"], "w", encoding="utf-8") as handle:
        handle.write(record_text(record))
    assert deployment_state.load_record(paths["record_path"], paths["archive_root"], False) == record


def test_a_corrupt_record_message_lists_at_most_ten_archives(paths):
    for n in range(12):
        archive(paths, "%064x" % n, 1767225600 + n)
    message = deployment_state.corrupt_record_message("the deployment record X is not JSON (y)", paths["record_path"],
                                                      "X.corrupt-1", paths["archive_root"])
    assert "%064x (archived 2026-01-01T00:00:11Z)" % 11 in message and "%064x" % 2 in message
    assert "%064x" % 1 not in message and " and 2 more." in message


def test_the_lock_is_exclusive_for_a_run_that_writes_and_creates_the_state_dir(paths):
    with deployment_state.instance_lock(paths, 0, check_mode=False):
        assert os.path.isfile(paths["lock_path"])
        expected = "another run is recording or restoring a deployment of instance qwen36: .* is locked by another run"
        with pytest.raises(deployment_state.StateError, match=expected):
            with deployment_state.instance_lock(paths, 0, check_mode=True):
                pass


def test_a_restore_without_a_state_dir_locks_nothing_and_creates_nothing(paths):
    with deployment_state.instance_lock(paths, 0, check_mode=False, create=False):
        assert not os.path.exists(paths["state_dir"])


def test_a_lock_held_elsewhere_fails_after_the_wait(paths):
    os.makedirs(paths["state_dir"])
    holder = hold_lock(paths["lock_path"])
    try:
        with pytest.raises(deployment_state.StateError, match=r"\(PID %d\), still after 0.2 s" % holder.pid):
            with deployment_state.instance_lock(paths, 0.2, check_mode=False):
                pass
    finally:
        release(holder)
