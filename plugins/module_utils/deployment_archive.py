# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Restoring an archived deployment: which one, which files, and the record to write afterwards.

Pure functions; the caller reads and writes the files. deployment_record archives every deployment under
``<state_dir>/<instance>/deployments/<id>/`` with a ``manifest.json``; deployment_restore puts one back.
File contents are compared here but never copied into anything returned, because the archive holds the
secret environment file.
"""

from __future__ import annotations

import json
import os
import re

DEPLOYMENT_ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")
HISTORY_SETTING = "sglang_service_deployment_history"
SECRET_FILE_MODE = 0o600


class ArchiveError(Exception):
    """A restore cannot go ahead; the message says why in the operator's terms."""


def archive_dir_for(state_dir, instance, deployment_id):
    """Directory that holds the archived files of ``deployment_id``."""
    return os.path.join(state_dir, instance, "deployments", deployment_id)


def choose_restore_target(record, requested_id=None, record_path="deployment.json"):
    """The deployment ID to restore, given the stored record (or None) and an optional requested ID.

    Without a requested ID the target is the record's previous deployment, unless the record was itself
    written by a restore (it has ``rolled_back_from``): then the last deployment is already undone and the
    target is the record's own ID, so running the same restore twice does not flip back and forth.
    """
    if requested_id is not None and not DEPLOYMENT_ID_PATTERN.match(requested_id):
        raise ArchiveError(f"deployment_id {requested_id!r} is not a deployment ID (64 lowercase hexadecimal digits)")
    if not record:
        raise ArchiveError(f"no deployment record at {record_path}: no deployment was recorded for this instance, so there is nothing to restore")
    current = record.get("deployment_id")
    if not isinstance(current, str) or not DEPLOYMENT_ID_PATTERN.match(current):
        raise ArchiveError(f"the deployment record {record_path} holds no valid deployment_id ({current!r})")
    if requested_id is not None:
        return requested_id
    if record.get("rolled_back_from"):
        return current
    previous = record.get("previous_deployment_id")
    if not previous:
        raise ArchiveError(
            f"the current deployment {current} is the first recorded one (the record {record_path} has no previous_deployment_id): "
            "there is nothing to roll back to"
        )
    if not isinstance(previous, str) or not DEPLOYMENT_ID_PATTERN.match(previous):
        raise ArchiveError(f"the deployment record {record_path} names an invalid previous_deployment_id ({previous!r})")
    return previous


def archive_missing_message(deployment_id, archive_dir):
    """Why a restore target has no archive, and what setting decides how many are kept."""
    return (
        f"the archive of deployment {deployment_id} is missing: {archive_dir} does not exist. It was probably pruned: "
        f"deployment_record keeps only the newest `keep` archives per instance (the role's {HISTORY_SETTING}); "
        f"raise {HISTORY_SETTING} to keep more deployments restorable"
    )


def _manifest_error(manifest_path, why):
    return ArchiveError(f"the manifest {manifest_path} is unreadable: {why}")


def _parse_entry(raw, manifest_path):
    if not isinstance(raw, dict):
        raise _manifest_error(manifest_path, f"a file entry is not an object: {raw!r}")
    path, archived, mode_text, secret = raw.get("path"), raw.get("archived"), raw.get("mode"), raw.get("secret", False)
    if not isinstance(path, str) or not os.path.isabs(path):
        raise _manifest_error(manifest_path, f"a file entry has no absolute path: {path!r}")
    # The archived name is joined to the archive directory: it must not climb out of it.
    if not isinstance(archived, str) or archived in ("", ".", "..", "manifest.json") or "/" in archived or "\0" in archived:
        raise _manifest_error(manifest_path, f"the entry for {path} names an invalid archived file: {archived!r}")
    try:
        mode = int(mode_text, 8)
    except (TypeError, ValueError):
        raise _manifest_error(manifest_path, f"the entry for {path} has an invalid mode: {mode_text!r}") from None
    if not 0 <= mode <= 0o7777:
        raise _manifest_error(manifest_path, f"the entry for {path} has an invalid mode: {mode_text!r}")
    if not isinstance(secret, bool):
        raise _manifest_error(manifest_path, f"the entry for {path} has a non-boolean secret flag: {secret!r}")
    # Environment files may hold secrets: whatever the manifest says, they are restored readable by root only.
    return {"path": path, "archived": archived, "mode": SECRET_FILE_MODE if secret else mode, "secret": secret}


def parse_manifest(text, deployment_id, manifest_path="manifest.json"):
    """The manifest of an archived deployment as {deployment_id, inputs, has_inputs, files: [entry, ...]}.

    ``text`` is the manifest's content, or None when it could not be read. Manifests written before
    deployment_record stored the ID and inputs have neither: ``inputs`` is then {} and ``has_inputs`` False.
    """
    if text is None:
        raise _manifest_error(manifest_path, "it does not exist or cannot be read")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _manifest_error(manifest_path, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise _manifest_error(manifest_path, "it has no list of files")
    recorded_id = data.get("deployment_id")
    if recorded_id is not None and recorded_id != deployment_id:
        raise _manifest_error(manifest_path, f"it belongs to deployment {recorded_id}, not {deployment_id}")
    has_inputs = "inputs" in data
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict):
        raise _manifest_error(manifest_path, f"its inputs are not an object: {type(inputs).__name__}")
    files = [_parse_entry(raw, manifest_path) for raw in data["files"]]
    seen = set()
    for entry in files:
        if entry["path"] in seen:
            raise _manifest_error(manifest_path, f"{entry['path']} is listed twice")
        seen.add(entry["path"])
    if not files:
        raise _manifest_error(manifest_path, "it lists no files")
    return {"deployment_id": deployment_id, "inputs": inputs, "has_inputs": has_inputs, "files": files}


def plan_restore(entries, archived_contents, on_disk):
    """The manifest entries whose file on disk differs from the archive, each with the reasons.

    entries: parsed manifest entries. archived_contents: {archived name: bytes}.
    on_disk: {path: (bytes, mode)} for files that exist; a path that is absent (or None) is missing.
    Every entry's archived name must be in archived_contents (the caller fails earlier when one cannot be read).
    Returns copies of the entries with ``reasons``: ["missing"], or any of "content" and "mode".
    """
    plan = []
    for entry in entries:
        wanted = archived_contents[entry["archived"]]
        current = on_disk.get(entry["path"])
        if current is None:
            reasons = ["missing"]
        else:
            content, mode = current
            reasons = [reason for reason, differs in (("content", content != wanted), ("mode", mode != entry["mode"])) if differs]
        if reasons:
            plan.append(dict(entry, reasons=reasons))
    return plan


def describe_plan(plan):
    """One line per file to restore, naming the reasons but never the content."""
    lines = []
    for entry in plan:
        reasons = ", ".join("mode -> %04o" % entry["mode"] if reason == "mode" else reason for reason in entry["reasons"])
        lines.append(f"{entry['path']} ({reasons})\n")
    return "".join(lines)


def restored_record(current, instance, target_id, now_iso, target_inputs, archive_dir):
    """The record to store after restoring ``target_id`` over the ``current`` record.

    Restoring the deployment the record already names keeps the record as it is (a rerun writes nothing).
    ``archive`` is part of the record because deployment_record stores it: a later deployment_record run with
    the restored files then finds the record it would write and changes nothing.
    """
    if current.get("deployment_id") == target_id:
        return current
    return {
        "instance": instance,
        "deployment_id": target_id,
        "deployed_at": now_iso,
        "previous_deployment_id": current.get("deployment_id"),
        "rolled_back_from": current.get("deployment_id"),
        "inputs": target_inputs,
        "archive": archive_dir,
    }
