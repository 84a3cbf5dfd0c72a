# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Another process that holds a lock file, as a run in progress does (deployment_record, deployment_restore)."""

from __future__ import annotations

import subprocess
import sys

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX)
if sys.argv[2] != "shared":
    os.write(fd, b"%d\\n" % os.getpid())
print("locked", flush=True)
sys.stdin.read()
"""


def hold_lock(path, shared=False):
    """A process holding an flock on ``path`` (exclusive with its PID written in, as atomic_file.file_lock does, or
    shared); returned once it holds the lock, which it keeps until release()."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), "shared" if shared else "exclusive"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline()
    if line != "locked\n":
        holder.kill()
        raise AssertionError("the lock holder did not take the lock: %r" % line)
    return holder


def release(holder):
    """Let the holder exit (closing its stdin) and wait for it: the kernel drops its lock."""
    holder.communicate(timeout=60)
