# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deployment_layout: per-instance paths, the record, deployment.env, the archive's manifest and the log header."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import deployment_layout as layout
from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import ManifestError, parse_manifest, restored_record

A, B, C = "a" * 64, "b" * 64, "c" * 64


T = "2026-11-29T10:00:00Z"


def manifest_json(**overrides):
    """A manifest as deployment_record writes it, with fields replaced to break it."""
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


# -- paths ----------------------------------------------------------------------------------------


def test_the_default_layout_of_an_instance():
    assert layout.instance_paths("qwen36") == {
        "instance": "qwen36",
        "unit": "sglang-qwen36.service",
        "unit_path": "/etc/systemd/system/sglang-qwen36.service",
        "config_dir": "/etc/llmops-serving/qwen36",
        "server_env": "/etc/llmops-serving/qwen36/server.env",
        "deployment_env": "/etc/llmops-serving/qwen36/deployment.env",
        "secrets_config": "/etc/llmops-serving/qwen36/server-secrets.yaml",
        "node_env": "/etc/llmops-serving/qwen36/node.env",
        "state_dir": "/var/lib/llmops-serving/qwen36",
        "record_path": "/var/lib/llmops-serving/qwen36/deployment.json",
        "sampling_path": "/var/lib/llmops-serving/qwen36/sampling.json",
        "served_model_dir": "/var/lib/llmops-serving/qwen36/model",
        "rollout_path": "/var/lib/llmops-serving/qwen36/rollout.json",
        "archive_root": "/var/lib/llmops-serving/qwen36/deployments",
        "log_dir": "/var/log/llmops-serving/qwen36",
        "current_log": "/var/log/llmops-serving/qwen36/current.log",
        "cache_dir": "/var/cache/llmops-serving/qwen36",
    }


def test_every_path_follows_its_root():
    paths = layout.instance_paths("q", config_dir="/c", state_dir="/s/", log_root="/var/log/x", cache_root="/k", unit_dir="/u")
    assert (paths["server_env"], paths["deployment_env"]) == ("/c/q/server.env", "/c/q/deployment.env")
    assert (paths["record_path"], paths["archive_root"]) == ("/s/q/deployment.json", "/s/q/deployments")
    assert (paths["current_log"], paths["cache_dir"], paths["unit_path"]) == ("/var/log/x/q/current.log", "/k/q", "/u/sglang-q.service")


def test_the_modules_paths_put_deployment_env_where_their_option_says():
    paths = layout.record_paths("q", "/s")
    assert (paths["record_path"], paths["deployment_env"]) == ("/s/q/deployment.json", "/etc/llmops-serving/q/deployment.env")
    assert layout.record_paths("q", "/s", "/e/deployment.env")["deployment_env"] == "/e/deployment.env"
    assert paths["lock_path"] == "/s/q/deployment.lock"


@pytest.mark.parametrize("name, ok", [
    ("20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log", True),
    ("current.log", False),
    ("20261129T194501Z-6F1C3E0B9A8D4C2E8F7A6B5C4D3E2F10.log", False),
    ("20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log\n", False),
    ("../20261129T194501Z-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log", False),
])
def test_log_file_names_are_start_time_and_invocation(name, ok):
    assert bool(layout.LOG_FILE_NAME_RE.match(name)) is ok


def test_an_archive_lies_under_the_archive_root_by_its_id():
    assert layout.archive_dir_for("/s", "q", A) == layout.instance_paths("q", state_dir="/s")["archive_root"] + "/" + A


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b"])
def test_an_instance_name_that_escapes_the_roots_is_refused(bad):
    assert layout.instance_name_error(bad) == f"instance {bad!r} is not a valid instance name (no slashes, not hidden)"
    with pytest.raises(ValueError, match="not a valid instance name"):
        layout.instance_paths(bad)


def test_plain_instance_names_are_accepted():
    assert layout.instance_name_error("qwen3.6-27b_a") is None


# -- deployment.env and the record ----------------------------------------------------------------


def test_deployment_env_text_is_byte_stable():
    # Changing this text rewrites every target's deployment.env on the next run, reported as a change.
    assert layout.deployment_env_text("qwen36", A) == (
        f"# Written by llmops.serving.deployment_record; loaded by the unit.\nLLMOPS_DEPLOYMENT_ID={A}\nLLMOPS_INSTANCE=qwen36\n"
    )


def test_build_record_is_the_schema_of_new_and_restored_records_alike():
    assert layout.build_record("q", A, "t", None, {"x": 1}, "/s/q/deployments/" + A) == {
        "instance": "q", "deployment_id": A, "deployed_at": "t", "previous_deployment_id": None, "inputs": {"x": 1},
        "archive": "/s/q/deployments/" + A,
    }
    restored = layout.build_record("q", A, "t", B, {}, "/arch", rolled_back_from=B)
    assert restored["rolled_back_from"] == B
    assert set(restored) - {"rolled_back_from"} == set(layout.build_record("q", A, "t", B, {}, "/arch"))


def test_next_record_keeps_an_unchanged_record_and_chains_a_new_one():
    first = layout.next_record(None, "qwen36", A, "2026-11-29T10:00:00Z", {}, "/s/" + A)
    assert first["previous_deployment_id"] is None and first["archive"] == "/s/" + A
    assert layout.next_record(first, "qwen36", A, "2026-11-29T11:00:00Z", {}, "/s/" + A) == first
    second = layout.next_record(first, "qwen36", B, "2026-11-29T12:00:00Z", {"x": 1}, "/s/" + B)
    assert second == layout.build_record("qwen36", B, "2026-11-29T12:00:00Z", A, {"x": 1}, "/s/" + B)


def test_next_record_of_an_unchanged_deployment_keeps_a_restores_fields_and_names_the_archive():
    restored = layout.build_record("qwen36", A, T, B, {}, "/old/" + A, rolled_back_from=B)
    kept = layout.next_record(restored, "qwen36", A, "2026-11-30T00:00:00Z", {"ignored": True}, "/s/" + A)
    assert kept == dict(restored, archive="/s/" + A)


def test_restored_record_chains_back_to_the_deployment_it_replaces():
    current = layout.build_record("qwen36", B, T, A, {}, "/s/qwen36/deployments/" + B)
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
    current = layout.build_record("qwen36", A, T, B, {}, "/s/qwen36/deployments/" + A, rolled_back_from=B)
    assert restored_record(current, "qwen36", A, "2026-11-30T00:00:00Z", {}, "/s/qwen36/deployments/" + A) is current


def test_a_written_record_parses_back_as_written():
    for record in (layout.build_record("q", A, T, None, {"x": 1}, "/s/q/deployments/" + A),
                   layout.build_record("q", A, T, B, {}, "/arch", rolled_back_from=B)):
        assert layout.parse_record(layout.record_text(record)) == record
        assert layout.parse_record(layout.record_text(record).encode()) == record
    assert layout.parse_record('{"deployment_id": "%s"}' % A) == {"deployment_id": A}


@pytest.mark.parametrize("text, why", [
    ('{"deployment_id": "%s", "deployed_at": "%s"' % (A, T), "is not JSON (Expecting"),
    ("", "is not JSON ("),
    (b"\xff\xfe\x00", "is not JSON ("),
    ("[]", "is a list, not an object"),
    ("null", "is null, not an object"),
    ("true", "is a boolean, not an object"),
    ("{}", "is not a record: its deployment_id is null, not a deployment ID (64 lowercase hexadecimal digits)"),
    ('{"deployment_id": "%s"}' % A.upper(), "its deployment_id is '%s', not a deployment ID" % A.upper()),
    ('{"deployment_id": "%s\\n"}' % A, "its deployment_id is '%s\\n', not a deployment ID" % A),
    ('{"deployment_id": ["%s"]}' % A, "its deployment_id is a list, not a deployment ID"),
    ('{"deployment_id": "%s", "previous_deployment_id": 7}' % A, "its previous_deployment_id is a number, not a deployment ID"),
    ('{"deployment_id": "%s", "rolled_back_from": "../x"}' % A, "its rolled_back_from is '../x', not a deployment ID"),
    ('{"deployment_id": "%s", "inputs": []}' % A, "its inputs are a list, not an object"),
    ('{"deployment_id": "%s", "archive": {}}' % A, "its archive is an object, not text"),
    ('{"deployment_id": "%s", "instance": 1}' % A, "its instance is a number, not text"),
])
def test_a_record_that_is_not_one_is_refused_naming_what_was_found(text, why):
    with pytest.raises(layout.RecordError, match="the deployment record /s/q/deployment.json ") as info:
        layout.parse_record(text, "/s/q/deployment.json")
    assert why in str(info.value)


@pytest.mark.parametrize("text, ok", [(A, True), (A.upper(), False), (A + "\n", False), (A[:-1], False), ("g" * 64, False)])
def test_a_deployment_id_is_64_lowercase_hex_digits_whole(text, ok):
    assert bool(layout.DEPLOYMENT_ID_RE.match(text)) is ok


def test_record_text_is_sorted_indented_json_with_a_final_newline():
    text = layout.record_text({"b": 1, "a": None})
    assert text == '{\n  "a": null,\n  "b": 1\n}\n'


def test_utc_timestamp_is_utc_to_the_second():
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert layout.utc_timestamp(datetime.datetime(2026, 11, 29, 21, 45, 1, 999, tzinfo=plus_two)) == "2026-11-29T19:45:01Z"
    assert layout.utc_timestamp().endswith("Z")


# -- the manifest ---------------------------------------------------------------------------------


def test_manifest_entries_name_each_copy_by_position_and_keep_secrets_0600():
    entries = layout.manifest_entries(["/etc/u.service", "/lib/launch"], ["/etc/q/server.env"],
                                      {"/etc/u.service": 0o644, "/lib/launch": 0o750})
    assert entries == [
        {"path": "/etc/u.service", "archived": "00-u.service", "mode": 0o644, "secret": False},
        {"path": "/lib/launch", "archived": "01-launch", "mode": 0o750, "secret": False},
        {"path": "/etc/q/server.env", "archived": "02-server.env", "mode": 0o600, "secret": True},
    ]


def test_a_written_manifest_reads_back_as_written():
    entries = layout.manifest_entries(["/etc/u.service"], ["/etc/q/server.env"], {"/etc/u.service": 0o644})
    text = layout.manifest_text(A, {"model_path": "/m"}, entries)
    assert json.loads(text)["files"][0]["mode"] == "0644"
    assert parse_manifest(text, A) == {"deployment_id": A, "inputs": {"model_path": "/m"}, "has_inputs": True, "files": entries}


def test_parse_manifest_reads_id_inputs_and_files_and_forces_0600_on_secrets():
    text = manifest_json()
    data = json.loads(text)
    data["files"][2]["mode"] = "0644"
    parsed = parse_manifest(json.dumps(data), A)
    assert parsed["has_inputs"] and parsed["inputs"] == {"model_path": "/models/Qwen3.6-27B"}
    assert [f["mode"] for f in parsed["files"]] == [0o644, 0o755, 0o600]
    assert [f["secret"] for f in parsed["files"]] == [False, False, True]


def test_an_old_manifest_without_id_and_inputs_still_parses_with_empty_inputs():
    data = json.loads(manifest_json())
    del data["deployment_id"], data["inputs"]
    parsed = parse_manifest(json.dumps(data), A)
    assert parsed["inputs"] == {} and not parsed["has_inputs"]
    assert len(parsed["files"]) == 3


@pytest.mark.parametrize("text, why", [
    (None, "does not exist or cannot be read"),
    ("{not json", "not JSON"),
    ("[]", "no list of files"),
    (manifest_json(deployment_id=B), f"belongs to deployment {B}"),
    (manifest_json(files=[]), "lists no files"),
    (manifest_json(inputs=[1]), "inputs are not an object"),
    (manifest_json(files=["00-x"]), "a file entry is not an object"),
    (manifest_json(files=[{"path": "relative", "archived": "00-x", "mode": "0644"}]), "no absolute path"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "../../etc/shadow", "mode": "0644"}]), "invalid archived file"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "manifest.json", "mode": "0644"}]), "invalid archived file"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "00-x", "mode": "rw-r--r--"}]), "invalid mode"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "00-x", "mode": "17777"}]), "invalid mode"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "00-x", "mode": "0644", "secret": "yes"}]), "non-boolean secret"),
    (manifest_json(files=[{"path": "/etc/x", "archived": "00-x", "mode": "0644"}, {"path": "/etc/x", "archived": "01-x", "mode": "0644"}]),
     "listed twice"),
])
def test_an_unusable_manifest_is_unreadable_with_the_reason(text, why):
    with pytest.raises(ManifestError, match="the manifest /a/manifest.json is unreadable") as info:
        parse_manifest(text, A, "/a/manifest.json")
    assert why in str(info.value)


# -- the log header -------------------------------------------------------------------------------


def test_a_formatted_header_is_what_log_header_parses():
    values = {"unit": "sglang-q.service", "pid": 42, "instance": "q", "deployment_id": A,
              "invocation_id": "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10", "started_at": "2026-11-29T19:45:01Z"}
    line = layout.format_header_line(values)
    assert line == ("# llmops-serving instance=q deployment_id=%s invocation_id=6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10 pid=42 "
                    "started_at=2026-11-29T19:45:01Z unit=sglang-q.service" % A)
    assert log_header.parse_header_line(line) == values


@pytest.mark.parametrize("values, why", [
    (dict.fromkeys(layout.HEADER_KEYS[:-1], "x"), "missing: unit; unknown: none"),
    (dict(dict.fromkeys(layout.HEADER_KEYS, "x"), format="2"), "missing: none; unknown: format"),
])
def test_a_header_has_exactly_the_header_keys(values, why):
    with pytest.raises(ValueError, match=why):
        layout.format_header_line(values)
