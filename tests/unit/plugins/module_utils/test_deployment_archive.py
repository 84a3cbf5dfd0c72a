from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.deployment_archive import (
    ArchiveError,
    archive_dir_for,
    archive_missing_message,
    choose_restore_target,
    describe_plan,
    parse_manifest,
    plan_restore,
    restored_record,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64


def record(deployment_id, previous=None, **extra):
    return dict({"instance": "qwen36", "deployment_id": deployment_id, "deployed_at": "2026-11-29T10:00:00Z",
                 "previous_deployment_id": previous, "inputs": {}}, **extra)


def manifest_text(**overrides):
    data = {
        "deployment_id": A,
        "inputs": {"model_path": "/models/Qwen3.6-27B"},
        "files": [
            {"path": "/etc/systemd/system/sglang-qwen36.service", "archived": "00-sglang-qwen36.service", "mode": "0644", "secret": False},
            {"path": "/usr/local/libexec/llmops-serving/sglang-launch", "archived": "01-sglang-launch", "mode": "0755", "secret": False},
            {"path": "/etc/llmops-serving/qwen36/server.env", "archived": "02-server.env", "mode": "0600", "secret": True},
        ],
    }
    data.update(overrides)
    return json.dumps(data)


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


@pytest.mark.parametrize("bad", ["../../etc", "A" * 64, "a" * 63, ""])
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


def test_parse_manifest_reads_id_inputs_and_files_and_forces_0600_on_secrets():
    text = manifest_text()
    data = json.loads(text)
    data["files"][2]["mode"] = "0644"
    parsed = parse_manifest(json.dumps(data), A)
    assert parsed["has_inputs"] and parsed["inputs"] == {"model_path": "/models/Qwen3.6-27B"}
    assert [f["mode"] for f in parsed["files"]] == [0o644, 0o755, 0o600]
    assert [f["secret"] for f in parsed["files"]] == [False, False, True]


def test_an_old_manifest_without_id_and_inputs_still_parses_with_empty_inputs():
    data = json.loads(manifest_text())
    del data["deployment_id"], data["inputs"]
    parsed = parse_manifest(json.dumps(data), A)
    assert parsed["inputs"] == {} and not parsed["has_inputs"]
    assert len(parsed["files"]) == 3


@pytest.mark.parametrize("text, why", [
    (None, "does not exist or cannot be read"),
    ("{not json", "not JSON"),
    ("[]", "no list of files"),
    (manifest_text(deployment_id=B), f"belongs to deployment {B}"),
    (manifest_text(files=[]), "lists no files"),
    (manifest_text(inputs=[1]), "inputs are not an object"),
    (manifest_text(files=[{"path": "relative", "archived": "00-x", "mode": "0644"}]), "no absolute path"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "../../etc/shadow", "mode": "0644"}]), "invalid archived file"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "manifest.json", "mode": "0644"}]), "invalid archived file"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "00-x", "mode": "rw-r--r--"}]), "invalid mode"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "00-x", "mode": "17777"}]), "invalid mode"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "00-x", "mode": "0644", "secret": "yes"}]), "non-boolean secret"),
    (manifest_text(files=[{"path": "/etc/x", "archived": "00-x", "mode": "0644"}, {"path": "/etc/x", "archived": "01-x", "mode": "0644"}]),
     "listed twice"),
])
def test_an_unusable_manifest_is_unreadable_with_the_reason(text, why):
    with pytest.raises(ArchiveError, match="the manifest /a/manifest.json is unreadable") as info:
        parse_manifest(text, A, "/a/manifest.json")
    assert why in str(info.value)


def test_plan_lists_only_files_whose_content_or_mode_differs_or_that_are_missing():
    entries = parse_manifest(manifest_text(), A)["files"]
    archived = {"00-sglang-qwen36.service": b"[Service]\n", "01-sglang-launch": b"#!/bin/sh\n", "02-server.env": b"K=old\n"}
    on_disk = {
        "/etc/systemd/system/sglang-qwen36.service": (b"[Service]\n", 0o644),
        "/usr/local/libexec/llmops-serving/sglang-launch": (b"#!/bin/sh\nnew\n", 0o700),
    }
    plan = plan_restore(entries, archived, on_disk)
    assert [(p["path"], p["reasons"]) for p in plan] == [
        ("/usr/local/libexec/llmops-serving/sglang-launch", ["content", "mode"]),
        ("/etc/llmops-serving/qwen36/server.env", ["missing"]),
    ]
    on_disk["/etc/llmops-serving/qwen36/server.env"] = (b"K=old\n", 0o644)
    on_disk["/usr/local/libexec/llmops-serving/sglang-launch"] = (b"#!/bin/sh\n", 0o755)
    assert [(p["path"], p["reasons"]) for p in plan_restore(entries, archived, on_disk)] == [("/etc/llmops-serving/qwen36/server.env", ["mode"])]
    on_disk["/etc/llmops-serving/qwen36/server.env"] = (b"K=old\n", 0o600)
    assert plan_restore(entries, archived, on_disk) == []


def test_the_plan_description_names_paths_and_reasons_but_no_content():
    entries = parse_manifest(manifest_text(), A)["files"]
    archived = {"00-sglang-qwen36.service": b"[Service]\n", "01-sglang-launch": b"#!/bin/sh\n", "02-server.env": b"SGLANG_API_KEY=topsecret\n"}
    on_disk = {
        "/etc/systemd/system/sglang-qwen36.service": (b"[Service]\n", 0o644),
        "/usr/local/libexec/llmops-serving/sglang-launch": (b"#!/bin/sh\n", 0o755),
        "/etc/llmops-serving/qwen36/server.env": (b"SGLANG_API_KEY=other\n", 0o640),
    }
    text = describe_plan(plan_restore(entries, archived, on_disk))
    assert text == "/etc/llmops-serving/qwen36/server.env (content, mode -> 0600)\n"


def test_restored_record_chains_back_to_the_deployment_it_replaces():
    current = record(B, previous=A, archive="/s/qwen36/deployments/" + B)
    new = restored_record(current, "qwen36", A, "2026-11-29T20:00:00Z", {"model_revision": "r1"}, "/s/qwen36/deployments/" + A)
    assert new == {
        "instance": "qwen36",
        "deployment_id": A,
        "deployed_at": "2026-11-29T20:00:00Z",
        "previous_deployment_id": B,
        "rolled_back_from": B,
        "inputs": {"model_revision": "r1"},
        "archive": "/s/qwen36/deployments/" + A,
    }


def test_restoring_the_deployment_the_record_names_keeps_the_record():
    current = record(A, previous=B, rolled_back_from=B, archive="/s/qwen36/deployments/" + A)
    assert restored_record(current, "qwen36", A, "2026-11-30T00:00:00Z", {}, "/s/qwen36/deployments/" + A) is current
