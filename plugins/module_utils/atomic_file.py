# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-file reads and crash-safe replacement of files, shared by deployment_record, deployment_restore and the
file back end of lxc_gpu_passthrough (container configs under /etc/pve)."""

from __future__ import annotations

import os
import stat
import tempfile
import time

MAX_BACKUP_ATTEMPTS = 100


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def _replace(path, data, prepare, prefix, suffix=""):
    """Write data to a temporary file beside path, call ``prepare(fd)`` before the content goes in, fsync, rename."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=os.path.dirname(path) or ".")
    try:
        prepare(fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write(path, data, mode):
    """Replace path with data: a temporary file in the same directory, fsync, rename, then fsync the directory.

    Mode (and, as root, owner root:root) are set before the content goes in, so a secret is never readable by others,
    not even briefly.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)

    def set_mode(fd):
        os.fchmod(fd, mode)
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)

    _replace(path, data, set_mode, ".tmp-")
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_replace(path, data, warnings):
    """Replace the existing file path with data, keeping its mode and owner.

    For files of a filesystem that manages modes itself, such as /etc/pve (pmxcfs), which refuses chmod and chown:
    they are only tried where the new file differs from the old one, and a refusal is appended to ``warnings``
    instead of failing. The directory is not fsynced, as in PVE's own PVE::Tools::file_set_contents.
    """
    original = os.stat(path)

    def keep_mode_and_owner(fd):
        written = os.fstat(fd)
        if stat.S_IMODE(written.st_mode) != stat.S_IMODE(original.st_mode):
            try:
                os.fchmod(fd, stat.S_IMODE(original.st_mode))
            except OSError as exc:
                warnings.append("could not keep the mode of %s: %s" % (path, exc))
        if (written.st_uid, written.st_gid) != (original.st_uid, original.st_gid):
            try:
                os.fchown(fd, original.st_uid, original.st_gid)
            except OSError as exc:
                warnings.append("could not keep the owner of %s: %s" % (path, exc))

    _replace(path, data, keep_mode_and_owner, ".%s." % os.path.basename(path), ".tmp")


def write_backup(path, data, mode, stamp=None):
    """Write data to a new file ``<path>.<stamp>.bak`` (``.<stamp>.<n>.bak`` when taken) with mode; return its name.

    The stamp is the local time, ``YYYYmmddTHHMMSS``. An existing file is never overwritten (O_EXCL).
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%S")
    for attempt in range(MAX_BACKUP_ATTEMPTS):
        candidate = "%s.%s%s.bak" % (path, stamp, "" if attempt == 0 else ".%d" % attempt)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(mode))
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return candidate
    raise FileExistsError("no free backup name for %s: %s.%s.bak to .%d.bak all exist" % (path, path, stamp, MAX_BACKUP_ATTEMPTS - 1))
