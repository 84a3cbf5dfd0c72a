# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Open, as root, files in a directory the service user can write, without letting that user choose what root reads.

The log directory /var/log/llmops-serving/<instance>/ belongs to the service account, which can repoint current.log
anywhere, replace it or a log with a FIFO, a device node, a directory or a link, and rename files while root looks.
Every module that reads there as root opens files only through open_log(), which:

- opens the directory once and every name relative to it (openat), never a name with a '/';
- reads current.log with readlink, never lets the kernel follow it: the target must be a log file name the launcher
  writes (deployment_layout.LOG_FILE_NAME_PATTERN) in the same directory;
- lstats the name and opens it only when it is a regular file, with O_NOFOLLOW (a link swapped in is not followed)
  and O_NONBLOCK (a FIFO swapped in cannot block the open or a read), then fstats what it opened: the same inode,
  a regular file on the directory's device, with one link (a hard link can give a file outside the directory a
  name inside it).

A refusal (RefusedFile) names what was found there and never carries a byte of the file. Reads go through the
returned descriptor (pread, or its /proc/self/fd name), so the file cannot be swapped between the check and the read.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    CURRENT_LOG_NAME,
    LOG_FILE_NAME_PATTERN,
    LOG_FILE_NAME_RE,
)

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)

_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class RefusedFile(Exception):
    """root will not read this path; the message says what was found there, never what it holds.

    ``resolved`` is the file current.log points at (directory and name) when the refusal is about that file, else None.
    """

    resolved = None


class MissingFile(RefusedFile):
    """The path (or what current.log points at) does not exist: it may appear later, unlike a refused one."""


def kind_of(mode):
    """``a FIFO``, ``a symlink``, ... for a stat mode."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "a file of unknown type %o" % stat.S_IFMT(mode)


def shown(name):
    """A name as a message may show it: as is when printable, else quoted with escapes (a newline in a name cannot
    forge a line of the message)."""
    if name.isprintable():
        return name
    return ascii(name)


class ServiceFile:
    """A regular file opened by open_log(): ``fd``, ``path`` (the directory and the name it was opened by), ``stat``
    (fstat of the descriptor). Close it, or use it as a context manager."""

    def __init__(self, fd, path, info):
        self.fd = fd
        self.path = path
        self.stat = info

    @property
    def identity(self):
        """(``file``, st_dev, st_ino), as procfs.file_identity() gives for a regular file."""
        return ("file", self.stat.st_dev, self.stat.st_ino)

    @property
    def proc_path(self):
        """/proc/self/fd/<fd>: a name for exactly this open file, for code that takes a path (it reopens this inode,
        wherever the directory's names point by now)."""
        return "/proc/self/fd/%d" % self.fd

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _open_directory(directory):
    try:
        return os.open(directory, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        raise MissingFile("%s does not exist" % shown(directory)) from None
    except NotADirectoryError:
        raise RefusedFile("%s is not a directory" % shown(directory)) from None


def _current_target(dir_fd, link_path):
    """The name current.log points at, when it is a launcher's log name in the same directory."""
    try:
        info = os.stat(CURRENT_LOG_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise MissingFile("%s does not exist" % shown(link_path)) from None
    if not stat.S_ISLNK(info.st_mode):
        raise RefusedFile("%s is %s, not the symlink the launcher makes; it is not read" % (shown(link_path), kind_of(info.st_mode)))
    try:
        target = os.readlink(CURRENT_LOG_NAME, dir_fd=dir_fd)
    except FileNotFoundError:
        raise MissingFile("%s does not exist" % shown(link_path)) from None
    except OSError as exc:
        raise RefusedFile("%s changed while it was read (%s); it is not followed" % (shown(link_path), exc.strerror or exc)) from None
    if "/" in target:
        raise RefusedFile("%s points outside the log directory to %s; it is not followed" % (shown(link_path), shown(target)))
    if not LOG_FILE_NAME_RE.match(target):
        raise RefusedFile("%s points at %s, which is not a log file name the launcher writes (%s); it is not followed" % (
            shown(link_path), shown(target), LOG_FILE_NAME_PATTERN))
    return target


def _open_child(dir_fd, directory, name, described):
    """Open ``name`` in the directory ``dir_fd`` when it is a regular file with one link; ``described`` is how
    messages name it."""
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise MissingFile("%s does not exist" % described) from None
    if not stat.S_ISREG(before.st_mode):
        raise RefusedFile("%s is %s, not a log file; it is not read" % (described, kind_of(before.st_mode)))
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise MissingFile("%s does not exist" % described) from None
    except OSError as exc:
        # ELOOP: a symlink was swapped in after the lstat; anything else is no more readable.
        raise RefusedFile("%s changed while it was opened (%s); it is not read" % (described, exc.strerror or exc)) from None
    try:
        info = os.fstat(fd)
        directory_info = os.fstat(dir_fd)
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(info.st_mode):
            raise RefusedFile("%s changed while it was opened (now %s); it is not read" % (described, kind_of(info.st_mode)))
        if info.st_dev != directory_info.st_dev:
            raise RefusedFile("%s is on another device than its directory %s; it is not read" % (described, shown(directory)))
        if info.st_nlink != 1:
            raise RefusedFile(
                "%s has %d hard links, where a log the launcher writes has one: another name for the same file may lie "
                "outside the log directory; it is not read" % (described, info.st_nlink))
    except BaseException:
        os.close(fd)
        raise
    return ServiceFile(fd, os.path.join(directory, name), info)


def open_log(path):
    """Open a log file that the service user can write, safely (see the module's docstring); a ServiceFile.

    ``path`` is the directory's ``current.log`` (what it points at is opened) or a file in the directory. Raises
    MissingFile when it (or current.log's target) does not exist, RefusedFile for anything else that is not a
    regular file of the directory.
    """
    directory, name = os.path.split(os.path.normpath(path))
    if not name or name in (".", ".."):
        raise RefusedFile("%s names no file in a directory" % shown(path))
    directory = directory or "."
    dir_fd = _open_directory(directory)
    try:
        # The directory's own path is root's to choose (its parents belong to root), so it is shown resolved.
        directory = os.path.realpath(directory)
        if name != CURRENT_LOG_NAME:
            return _open_child(dir_fd, directory, name, shown(path))
        target = _current_target(dir_fd, path)
        try:
            return _open_child(dir_fd, directory, target, "%s points at %s, which" % (shown(path), shown(target)))
        except RefusedFile as exc:
            exc.resolved = os.path.join(directory, target)
            raise
    finally:
        os.close(dir_fd)
