# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The archive of deployments: which archives to keep, and which deployment and files a restore puts back.

Pure functions; the caller reads and writes the files. deployment_record archives every deployment under
``<state_dir>/<instance>/deployments/<id>/`` with a ``manifest.json`` (both named and formatted by
deployment_layout); deployment_restore puts one back. File contents are compared here but never copied into
anything returned, because the archive holds the secret environment file.
"""

from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import DEPLOYMENT_ID_RE, RECORD_NAME

# Matched whole: a requested ID with a trailing newline is refused, not joined into a path.
DEPLOYMENT_ID_PATTERN = DEPLOYMENT_ID_RE
HISTORY_SETTING = "sglang_service_deployment_history"


class ArchiveError(Exception):
    """A restore cannot go ahead; the message says why in the operator's terms."""


def choose_restore_target(record, requested_id=None, record_path=RECORD_NAME):
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


def archives_to_prune(archives, keep, protected):
    """Names of the archives to remove: all but the ``keep`` newest, never one in ``protected``.

    archives: (name, mtime) of each archive directory. The current and the previous deployment are protected, so
    a rollback stays possible whatever ``keep`` says.
    """
    newest_first = sorted(archives, key=lambda archive: archive[1], reverse=True)
    return [name for name, _mtime in newest_first[max(keep, 0):] if name not in protected]


def archive_missing_message(deployment_id, archive_dir):
    """Why a restore target has no archive, and what setting decides how many are kept."""
    return (
        f"the archive of deployment {deployment_id} is missing: {archive_dir} does not exist. It was probably pruned: "
        f"deployment_record keeps only the newest `keep` archives per instance (the role's {HISTORY_SETTING}); "
        f"raise {HISTORY_SETTING} to keep more deployments restorable"
    )


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
