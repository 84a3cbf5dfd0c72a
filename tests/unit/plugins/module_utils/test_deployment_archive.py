from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.deployment_archive import (
    ArchiveError,
    archive_missing_message,
    archives_to_prune,
    choose_restore_target,
    describe_plan,
    plan_restore,
)
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import archive_dir_for, manifest_entries

A, B, C = "a" * 64, "b" * 64, "c" * 64


def record(deployment_id, previous=None, **extra):
    return dict({"instance": "qwen36", "deployment_id": deployment_id, "deployed_at": "2026-11-29T10:00:00Z",
                 "previous_deployment_id": previous, "inputs": {}}, **extra)


def entries():
    """The manifest entries of a deployment of qwen36: unit, launcher and the secret environment file."""
    return manifest_entries(
        ["/etc/systemd/system/sglang-qwen36.service", "/usr/local/libexec/llmops-serving/sglang-launch"],
        ["/etc/llmops-serving/qwen36/server.env"],
        {"/etc/systemd/system/sglang-qwen36.service": 0o644, "/usr/local/libexec/llmops-serving/sglang-launch": 0o755},
    )


def test_default_target_is_the_previous_deployment():
    assert choose_restore_target(record(B, previous=A)) == A


def test_a_requested_id_wins_over_the_previous_one():
    assert choose_restore_target(record(B, previous=A), requested_id=C) == C


def test_a_record_written_by_a_restore_targets_itself_so_a_rerun_does_not_flip_back():
    assert choose_restore_target(record(A, previous=B, rolled_back_from=B)) == A
    assert choose_restore_target(record(A, previous=B, rolled_back_from=B), requested_id=B) == B


def test_no_record_is_an_error_that_says_so():
    with pytest.raises(ArchiveError, match=r"no deployment record at /s/qwen36/deployment.json"):
        choose_restore_target(None, record_path="/s/qwen36/deployment.json")


def test_the_first_deployment_has_nothing_to_roll_back_to():
    with pytest.raises(ArchiveError, match=f"current deployment {A} is the first recorded one.*nothing to roll back to"):
        choose_restore_target(record(A))


@pytest.mark.parametrize("bad", ["../../etc", "A" * 64, "a" * 63, "", "a" * 64 + "\n"])
def test_a_requested_id_that_is_not_an_id_is_refused_before_it_reaches_a_path(bad):
    with pytest.raises(ArchiveError, match="is not a deployment ID"):
        choose_restore_target(record(B, previous=A), requested_id=bad)


def test_a_record_with_a_broken_previous_id_is_refused():
    with pytest.raises(ArchiveError, match="invalid previous_deployment_id"):
        choose_restore_target(record(B, previous="../x"))


def test_the_missing_archive_message_names_the_directory_and_the_keep_setting():
    directory = archive_dir_for("/var/lib/llmops-serving", "qwen36", A)
    assert directory == f"/var/lib/llmops-serving/qwen36/deployments/{A}"
    message = archive_missing_message(A, directory)
    assert directory in message and "pruned" in message
    assert "sglang_service_deployment_history" in message and "`keep`" in message


def test_pruning_keeps_the_newest_and_never_the_protected_ones():
    archives = [(C, 300.0), (A, 100.0), (B, 200.0), ("d" * 64, 50.0)]
    assert archives_to_prune(archives, keep=2, protected=set()) == [A, "d" * 64]
    assert archives_to_prune(archives, keep=1, protected={A, C}) == [B, "d" * 64]
    assert archives_to_prune(archives, keep=0, protected={C}) == [B, A, "d" * 64]
    assert archives_to_prune(archives, keep=4, protected=set()) == []
    assert archives_to_prune([], keep=-1, protected=set()) == []


def test_plan_lists_only_files_whose_content_or_mode_differs_or_that_are_missing():
    archived = {"00-sglang-qwen36.service": b"[Service]\n", "01-sglang-launch": b"#!/bin/sh\n", "02-server.env": b"K=old\n"}
    on_disk = {
        "/etc/systemd/system/sglang-qwen36.service": (b"[Service]\n", 0o644),
        "/usr/local/libexec/llmops-serving/sglang-launch": (b"#!/bin/sh\nnew\n", 0o700),
    }
    plan = plan_restore(entries(), archived, on_disk)
    assert [(p["path"], p["reasons"]) for p in plan] == [
        ("/usr/local/libexec/llmops-serving/sglang-launch", ["content", "mode"]),
        ("/etc/llmops-serving/qwen36/server.env", ["missing"]),
    ]
    on_disk["/etc/llmops-serving/qwen36/server.env"] = (b"K=old\n", 0o644)
    on_disk["/usr/local/libexec/llmops-serving/sglang-launch"] = (b"#!/bin/sh\n", 0o755)
    assert [(p["path"], p["reasons"]) for p in plan_restore(entries(), archived, on_disk)] == [("/etc/llmops-serving/qwen36/server.env", ["mode"])]
    on_disk["/etc/llmops-serving/qwen36/server.env"] = (b"K=old\n", 0o600)
    assert plan_restore(entries(), archived, on_disk) == []


def test_the_plan_description_names_paths_and_reasons_but_no_content():
    archived = {"00-sglang-qwen36.service": b"[Service]\n", "01-sglang-launch": b"#!/bin/sh\n", "02-server.env": b"SGLANG_API_KEY=topsecret\n"}
    on_disk = {
        "/etc/systemd/system/sglang-qwen36.service": (b"[Service]\n", 0o644),
        "/usr/local/libexec/llmops-serving/sglang-launch": (b"#!/bin/sh\n", 0o755),
        "/etc/llmops-serving/qwen36/server.env": (b"SGLANG_API_KEY=other\n", 0o640),
    }
    text = describe_plan(plan_restore(entries(), archived, on_disk))
    assert text == "/etc/llmops-serving/qwen36/server.env (content, mode -> 0600)\n"
