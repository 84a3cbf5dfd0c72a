# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An instance's state directory as deployment_record and deployment_restore use it.

- One run at a time per instance: both hold an flock on ``<state_dir>/<instance>/deployment.lock`` from before they
  read the record until after they wrote it (shared in check mode, which writes nothing), with a bounded wait.
- The record is read only when it is one: a deployment.json that is not JSON or not of the record's schema is set
  aside as ``deployment.json.corrupt-<UTC time>`` and the run fails saying what was lost and how to go on; something
  other than a regular file at that path fails naming what it is. A corrupt record is never replaced in silence,
  because it holds the rollback history (the previous deployment ID), which nothing else records for certain: the
  archive knows which deployments existed, not in which order they were current (a restore makes an older one current).
- The staging directories (``<id>.partial``) of archive writes that were interrupted are removed by the next run that
  writes, under the lock, so never one that a run in progress is still writing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time

from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import (
    LockTimeout,
    NotARegularFile,
    file_lock,
    read_regular,
    set_aside,
)
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    CORRUPT_LABEL,
    DEPLOYMENT_ID_RE,
    PARTIAL_SUFFIX,
    RecordError,
    parse_record,
)

DEFAULT_LOCK_TIMEOUT = 60
# How many archived deployments a corrupt-record message lists.
LISTED_ARCHIVES = 10


class StateError(Exception):
    """The instance's state cannot be used as it is; the message says what was found and how to go on."""


@contextlib.contextmanager
def instance_lock(paths, timeout, check_mode, create=True):
    """Hold the instance's lock (record_paths' ``lock_path``) for the ``with`` block; StateError when it cannot be had.

    A run that writes takes the lock exclusively, creating the state directory unless ``create`` is False (a restore:
    without the directory there is nothing to restore, and nothing to lock). Check mode takes the lock shared if it
    exists: two dry runs may read side by side, never while a real run writes.
    """
    with contextlib.ExitStack() as stack:
        try:
            if not check_mode and create:
                os.makedirs(paths["state_dir"], mode=0o755, exist_ok=True)
            if check_mode or create or os.path.isdir(paths["state_dir"]):
                stack.enter_context(file_lock(paths["lock_path"], timeout, shared=check_mode))
        except LockTimeout as exc:
            raise StateError(
                "another run is recording or restoring a deployment of instance %s: %s. Two runs at once would "
                "interleave their writes to the record and the archive; let the other run finish (or raise "
                "lock_timeout), then run again." % (paths["instance"], exc)) from None
        except OSError as exc:
            raise StateError("cannot lock %s: %s" % (paths["lock_path"], exc.strerror or exc)) from None
        yield


def _entries(directory):
    """The entries of ``directory``; none when it does not exist (yet)."""
    try:
        return list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


def archived_deployments(archive_root):
    """(deployment ID, UTC time of the archive) of each complete archive, newest first."""
    found = []
    for entry in _entries(archive_root):
        if DEPLOYMENT_ID_RE.match(entry.name) and entry.is_dir(follow_symlinks=False):
            found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
    found.sort(reverse=True)
    return [(name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))) for mtime, name in found]


def corrupt_record_message(problem, record_path, aside, archive_root):
    """What happened to the corrupt record ``record_path`` (set aside as ``aside``; None in check mode), what was lost
    and how to go on."""
    archives = archived_deployments(archive_root)
    if archives:
        listed = ", ".join("%s (archived %s)" % archive for archive in archives[:LISTED_ARCHIVES])
        more = " and %d more" % (len(archives) - LISTED_ARCHIVES) if len(archives) > LISTED_ARCHIVES else ""
        archived = "The archive %s still holds, newest first: %s%s." % (archive_root, listed, more)
    else:
        archived = "The archive %s holds no deployment." % archive_root
    if aside:
        kept = "It was moved aside to %s; nothing else was changed." % aside
    else:
        kept = "Check mode changes nothing: a real run moves it aside to %s.%s-<UTC time> and fails like this." % (
            record_path, CORRUPT_LABEL)
    return (
        "%s. %s The record held the rollback history of this instance (which deployment came before the current one), "
        "which is not guessed from the archive. %s To go on: run the deployment again (deployment_record records the "
        "current deployment afresh, with no previous deployment); to go back to an archived deployment after that, "
        "restore it by its ID (deployment_restore's deployment_id, the role's sglang_service_rollback_to)."
        % (problem, kept, archived))


def load_record(record_path, archive_root, check_mode):
    """The stored record, or None when there is none. Raises StateError for a path that holds no usable record.

    A corrupt record (not JSON, or not of the record's schema) is set aside outside check mode; anything but a regular
    file (a directory, a symlink, a FIFO) is left where it is and named.
    """
    try:
        data = read_regular(record_path)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise StateError("%s is %s, not a deployment record (a regular file): move it out of the way, then run again"
                         % (record_path, exc.found)) from None
    except OSError as exc:
        raise StateError("cannot read the deployment record %s: %s" % (record_path, exc.strerror or exc)) from None
    try:
        return parse_record(data, record_path)
    except RecordError as exc:
        problem = str(exc)
    aside = None
    if not check_mode:
        try:
            aside = set_aside(record_path, CORRUPT_LABEL)
        except OSError as exc:
            raise StateError("%s, and it could not be moved aside: %s" % (problem, exc)) from None
    raise StateError(corrupt_record_message(problem, record_path, aside, archive_root))


def prune_partials(archive_root):
    """Remove the staging directories that interrupted archive writes left; the names removed.

    Only while holding the instance's lock exclusively: then no run that could still be writing one is in progress.
    """
    removed = []
    for entry in _entries(archive_root):
        if entry.name.endswith(PARTIAL_SUFFIX) and stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
            shutil.rmtree(entry.path)
            removed.append(entry.name)
    return sorted(removed)
