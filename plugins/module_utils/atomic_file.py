# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-file reads and crash-safe replacement of files, shared by deployment_record and deployment_restore."""

from __future__ import annotations

import os
import tempfile


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def atomic_write(path, data, mode):
    """Replace path with data: a temporary file in the same directory, fsync, rename, then fsync the directory.

    Mode (and, as root, owner root:root) are set before the content goes in, so a secret is never readable by others,
    not even briefly.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
