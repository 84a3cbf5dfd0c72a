# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-file reads and crash-safe replacement of files, shared by deployment_record, deployment_restore and the
file back end of lxc_gpu_passthrough (container configs under /etc/pve); for the first two also a lock file that keeps
two runs apart and a way to set a bad file aside without overwriting anything."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time

MAX_BACKUP_ATTEMPTS = 100
# How often a run waiting for a lock tries again.
LOCK_POLL_SECONDS = 0.1


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


def file_type(mode):
    """What a file of ``mode`` is, in words: "a regular file", "a directory", "a symbolic link", "a FIFO", ..."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a file of unknown type"


class NotARegularFile(OSError):
    """A path where a regular file was expected holds something else; ``found`` says what ("a directory", ...)."""

    def __init__(self, path, found):
        super().__init__(errno.EINVAL, "%s is %s, not a regular file" % (path, found), path)
        self.found = found


def read_regular(path, max_bytes=None):
    """The content of the regular file ``path`` (its first ``max_bytes`` when given); raises NotARegularFile naming
    what is there instead.

    Nothing else is ever opened: a symlink is not followed, a FIFO or device not opened (lstat first, then open with
    O_NOFOLLOW and O_NONBLOCK, and fstat that it is still a regular file). FileNotFoundError when there is nothing.
    """
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotARegularFile(path, file_type(mode))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile(path, "a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, file_type(mode))
        return handle.read() if max_bytes is None else handle.read(max_bytes)


def set_aside(path, label, stamp=None):
    """Rename the regular file ``path`` to ``<path>.<label>-<stamp>`` (``-<stamp>.<n>`` when taken); return the new name.

    The stamp is the UTC time, ``YYYYmmddTHHMMSSZ``. An existing file is never overwritten: the new name is made with
    link(2), which fails when it exists, and only then is ``path`` unlinked.
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for attempt in range(MAX_BACKUP_ATTEMPTS):
        candidate = "%s.%s-%s%s" % (path, label, stamp, "" if attempt == 0 else ".%d" % attempt)
        try:
            os.link(path, candidate, follow_symlinks=False)
        except FileExistsError:
            continue
        os.unlink(path)
        return candidate
    raise FileExistsError("no free name to set %s aside: %s.%s-%s to .%d all exist" % (
        path, path, label, stamp, MAX_BACKUP_ATTEMPTS - 1))


class LockTimeout(Exception):
    """Another process held the lock for longer than the wait allowed; ``holder`` is its PID when it said (else None)."""

    def __init__(self, message, holder=None):
        super().__init__(message)
        self.holder = holder


def _lock_holder(fd):
    """The PID an exclusive holder wrote into the lock file, or None."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None


@contextlib.contextmanager
def file_lock(path, timeout, shared=False):
    """Hold an flock on the file ``path`` for the ``with`` block; wait at most ``timeout`` seconds for it.

    Exclusive: the file is created (mode 0600, not through a symlink) and the holder's PID written into it, for the
    message of a run that waits in vain. Shared (for runs that only read, such as check mode): an existing file is
    locked as it is, and where there is none nothing is locked (yields False; True when a lock is held). The kernel
    drops an flock when its holder exits, however it exits, so a crashed run never leaves a stale lock.
    Raises LockTimeout naming the holder's PID when it is known.
    """
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | (os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT), 0o600)
    except FileNotFoundError:
        if not shared:
            raise
        yield False
        return
    try:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            if time.monotonic() >= deadline:
                holder = _lock_holder(fd)
                raise LockTimeout("%s is locked by another run (%s), still after %g s" % (
                    path, "PID %d" % holder if holder else "a PID it did not write", timeout), holder)
            time.sleep(LOCK_POLL_SECONDS)
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"%d\n" % os.getpid(), 0)
        try:
            yield True
        finally:
            if not shared:
                # The PID names the holder only while it holds the lock.
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)
