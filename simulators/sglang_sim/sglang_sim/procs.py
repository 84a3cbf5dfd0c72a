# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Child processes titled like SGLang's (`sglang::scheduler_TP0`, `sglang::detokenizer`).

Titles: prctl(PR_SET_NAME) sets /proc/PID/comm (the kernel keeps 15 bytes: `sglang::schedul`, `sglang::detoken`,
the same truncation SGLang's setproctitle gets), and the argv area is overwritten through /proc/self/mem so
/proc/PID/cmdline, `ps -ef` and `ps aux` show the full title, as setproctitle does. setproctitle is used instead
when it is importable. Children get PR_SET_PDEATHSIG(SIGKILL), as SGLang's children do, so they die with the launcher.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _overwrite_cmdline(title: str) -> bool:
    """Write the title over this process's argv block, NUL-padded, so /proc/self/cmdline reads as the title."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        # Fields after the parenthesised comm; arg_start and arg_end are fields 48 and 49 (1-based).
        fields = stat[stat.rindex(b")") + 2:].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])
        size = arg_end - arg_start
        if size <= 1:
            return False
        data = title.encode("utf-8")[:size - 1]
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(arg_start)
            memory.write(data + b"\0" * (size - len(data)))
        return True
    except (OSError, ValueError, IndexError):
        return False


def set_process_title(title: str) -> None:
    try:
        import setproctitle  # pylint: disable=import-outside-toplevel
        setproctitle.setproctitle(title)
        return
    except ImportError:
        pass
    try:
        _libc().prctl(PR_SET_NAME, ctypes.c_char_p(title.encode("utf-8")[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    _overwrite_cmdline(title)


def die_with_parent(parent_pid: int) -> None:
    try:
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        # The parent died between fork and prctl.
        os._exit(1)


def spawn(title: str, body, ignore_sigterm: bool) -> int:
    """Fork a child titled `title` that runs body() and exits; returns its pid. Call before starting threads."""
    parent_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        for signum in (signal.SIGQUIT, signal.SIGCHLD, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_sigterm else signal.SIG_DFL)
        die_with_parent(parent_pid)
        set_process_title(title)
        code = body(parent_pid) or 0
    except BaseException:  # pylint: disable=broad-except
        code = 1
    finally:
        os._exit(code)


def idle_until_parent_dies(parent_pid: int) -> int:
    """What a child does between requests here: nothing, until the launcher goes (PDEATHSIG is the fast path)."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    return 0
