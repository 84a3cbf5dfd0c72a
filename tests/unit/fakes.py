# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-ins for the kernel and systemd that the unit checks read: a /proc tree in the kernel's formats and a
``systemctl show`` that answers from a script; what a hostile service user leaves in its log directory (a root-only
secret to point at, a time limit for code that could block); and how a hostile peer echoes the key it was sent (the
forms, a text that puts one across a module's cut, the check that no part of the key came back). Shared by the procfs,
systemd_show, unit_check, service_files, redact and module tests."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import string
from unittest import mock
from urllib.parse import quote

from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

# --------------------------------------------------------------------------- /proc

# Header lines as this machine's kernel prints them (Linux, observed with cat /proc/net/tcp{,6}).
TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
              "                                                     ")
TCP6_HEADER = ("  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when"
               " retrnsmt   uid  timeout inode")

# Addresses as the kernel prints them on a little-endian machine (each 32-bit word byte-reversed).
HEX_V4_ANY = "00000000"
HEX_V4_LOOPBACK = "0100007F"
HEX_V6_ANY = "0" * 32
HEX_V6_LOOPBACK = "00000000000000000000000001000000"
HEX_V6_MAPPED_LOOPBACK = "0000000000000000FFFF00000100007F"


def tcp_row(slot, local_hex, port, inode, state="0A", uid=0, remote_hex=None, remote_port=0):
    """One line laid out like tcp4_seq_show/tcp6_seq_show's seq_printf (widths as the kernel prints them)."""
    remote_hex = remote_hex or "0" * len(local_hex)
    return ("%4d: %s:%04X %s:%04X %s 00000000:00000000 00:00000000 00000000 %5d        0 %d 1 0000000000000000 100 0 0 10 0"
            % (slot, local_hex, port, remote_hex, remote_port, state, uid, inode))


def stat_line(pid, comm, starttime, ppid=1, state="S"):
    """A /proc/<pid>/stat line: fields 1-2, then 3..52 with starttime as field 22."""
    fields = [state, str(ppid), str(pid), str(pid), "0", "-1", "4194560", "1000", "0", "0", "0", "50", "10", "0", "0",
              "20", "0", "1", "0", str(starttime), "123456789", "2000"] + ["0"] * 30
    return "%d (%s) %s\n" % (pid, comm, " ".join(fields))


class FakeProc:
    """A /proc tree in a temporary directory, in the kernel's formats."""

    def __init__(self, root, btime=1795980000):
        self.root = root
        (root / "net").mkdir(parents=True)
        self.btime = btime
        (root / "stat").write_text("cpu  10 0 10 100 0 0 0 0 0 0\nintr 1 2\nctxt 100\nbtime %d\nprocesses 50\n" % btime)

    def set_net(self, tcp_rows=(), tcp6_rows=None):
        (self.root / "net" / "tcp").write_text("\n".join([TCP_HEADER] + list(tcp_rows)) + "\n")
        if tcp6_rows is not None:
            (self.root / "net" / "tcp6").write_text("\n".join([TCP6_HEADER] + list(tcp6_rows)) + "\n")

    def add_process(self, pid, argv, cgroup_path="/user.slice/user-0.slice/session-1.scope", starttime=500, comm=None,
                    environ=None, fds=None, cgroup_text=None):
        """fds: {fd: target} where target is a link text ("socket:[N]", a path) or (path, octal flags text)."""
        base = self.root / str(pid)
        (base / "fd").mkdir(parents=True)
        (base / "fdinfo").mkdir()
        (base / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in argv))
        (base / "stat").write_text(stat_line(pid, comm or os.path.basename(argv[0])[:15] if argv else comm or "kworker", starttime))
        if cgroup_text is None:
            cgroup_text = ("12:pids:/\n5:devices:%s\n1:name=systemd:%s\n0::%s\n" % (cgroup_path, cgroup_path, cgroup_path))
        (base / "cgroup").write_text(cgroup_text)
        environ = environ or {}
        (base / "environ").write_bytes(b"".join(("%s=%s" % item).encode() + b"\0" for item in environ.items()))
        for fd, target in (fds or {}).items():
            flags = "0100002"
            if isinstance(target, tuple):
                target, flags = target
            os.symlink(str(target), str(base / "fd" / str(fd)))
            (base / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t%s\nmnt_id:\t24\nino:\t1\n" % flags)
        return base

    def start_iso(self, starttime):
        return procfs.iso_utc(self.btime + starttime / float(os.sysconf("SC_CLK_TCK")))


_ERRNO_OF = {
    FileNotFoundError: (2, "No such file or directory"),
    PermissionError: (13, "Permission denied"),
    ProcessLookupError: (3, "No such process"),
}


def vanish_mid_scan(monkeypatch, listdir=None, readlink=None):
    """Let procfs's os.listdir and os.readlink fail, as the kernel does when a process exits, closes an fd or is not ours
    while a scan reads it: ``listdir``/``readlink`` map the end of a path ("/101/fd", "/102/fd/4") to the error class."""
    real_listdir, real_readlink = os.listdir, os.readlink

    def fail_for(path, errors):
        for suffix, error in (errors or {}).items():
            if str(path).endswith(suffix):
                raise error(*_ERRNO_OF[error], str(path))

    def fake_listdir(path):
        fail_for(path, listdir)
        return real_listdir(path)

    def fake_readlink(path, *args, **kwargs):
        fail_for(path, readlink)
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(procfs.os, "listdir", fake_listdir)
    monkeypatch.setattr(procfs.os, "readlink", fake_readlink)


# --------------------------------------------------------------------------- systemctl show

UNIT = "sglang-qwen36.service"
CONTROL_GROUP = "/system.slice/sglang-qwen36.service"
INVOCATION = "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
MAIN_PID = 4711


def show_text(**overrides):
    """`systemctl show --property=...` text for an active unit, in the order systemctl prints the asked properties."""
    values = {
        "Id": UNIT, "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success",
        "MainPID": str(MAIN_PID), "InvocationID": INVOCATION, "ExecMainStartTimestamp": "Sun 2026-11-29 19:45:01 UTC",
        "ControlGroup": CONTROL_GROUP, "NRestarts": "0",
    }
    values.update(overrides)
    return "".join("%s=%s\n" % item for item in values.items())


class FakeSystemctl:
    """Answers `systemctl show` from a script and records each call; any other command fails the test.

    ``replies`` holds one answer per call, the last one repeating: a show text (rc 0) or an (rc, stdout, stderr) tuple.
    It is a run_command callable itself (for systemd_show.show_unit) and can stand in for AnsibleModule.run_command.
    """

    def __init__(self, *replies):
        self.replies = list(replies) or [show_text()]
        self.calls = []

    def __call__(self, args, environ_update=None, **kwargs):
        if list(args[:2]) != ["systemctl", "show"]:
            raise AssertionError("unexpected command %r" % (args,))
        reply = self.replies[min(len(self.calls), len(self.replies) - 1)]
        self.calls.append((list(args), dict(environ_update or {})))
        return reply if isinstance(reply, tuple) else (0, reply, "")

    @property
    def commands(self):
        return [args for args, dummy_environ in self.calls]

    @contextlib.contextmanager
    def patched(self):
        """Make every AnsibleModule's run_command this fake."""
        def run_command(module, args, **kwargs):
            del module
            return self(args, **kwargs)

        with mock.patch.object(basic.AnsibleModule, "run_command", run_command):
            yield self

    def run_module(self, main, args, check_mode=False):
        """Run a module's main() with this fake as systemctl; (result, failed) as module_runner.run_module gives them.

        An option whose value is None is left out, as a playbook's ``omit`` would.
        """
        args = dict((key, value) for key, value in args.items() if value is not None)
        with self.patched():
            return run_module(main, args, check_mode=check_mode)


# --------------------------------------------------------------------------- a hostile service user

# What the secret file holds: no line of it may appear in any result, message or exception.
SECRET_LINES = ("root:$y$j9T$4Fq0Hc1mVxoZ9P2n$uM8TfQe1zq3l0VdS7kWcXr5yBgHa6NtJpL2oE9iKw.D:19700:0:99999:7:::",
                "llmops-secret-api-key=sk-0a1b2c3d4e5f")


def launcher_log_name(invocation, stamp="20261129T194501Z"):
    """A log name as sglang-launch writes it: <YYYYmmddTHHMMSSZ>-<InvocationID>.log."""
    return "%s-%s.log" % (stamp, invocation)


def root_only_secret(directory):
    """A 0600 file (like /etc/shadow) with SECRET_LINES in ``directory``; its path."""
    path = os.path.join(str(directory), "shadow")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("\n".join(SECRET_LINES) + "\n")
    return path


def secret_shown(*texts):
    """The SECRET_LINES (or a telling part of one) that appear in ``texts``."""
    return [line for line in SECRET_LINES for text in texts if line[:16] in str(text) or line in str(text)]


class Hung(AssertionError):
    """Raised by within() when the code under test is still blocked at its deadline."""


@contextlib.contextmanager
def within(seconds):
    """Fail with Hung when the block runs longer than ``seconds``: SIGALRM interrupts a blocking open() or read() (of a
    FIFO, say) in this very thread, so the code under test needs no thread and a hang is a test failure, not a hung run."""
    def expire(signum, frame):
        del signum, frame
        raise Hung("still blocked after %s s" % seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- a peer that echoes the key

KEY_WINDOW_CHARS = 6


def random_key(seed, prefix="sk-", length=32):
    """A real-looking key, the same for the same ``seed``: ``prefix`` and ``length`` URL-safe characters, with ``+``,
    ``/`` and ``=`` among them (the characters whose URL-encoded and JSON-escaped forms differ from themselves)."""
    chooser = random.Random(seed)
    body = [chooser.choice(string.ascii_letters + string.digits + "-_") for _index in range(length)]
    for index, char in ((2, "+"), (7, "/"), (13, "="), (19, "+"), (26, "/"), (length - 1, "=")):
        body[index] = char
    return prefix + "".join(body)


def echoed_forms(key):
    """{name: text}: ``key`` as a peer's answer may carry it, byte for byte: as sent, URL-encoded (upper- and
    lower-case hex), JSON-escaped (with an escaped solidus, or \\uXXXX for all but letters and digits), and split
    across lines (raw line breaks as an error page wraps a long line, and ``\\n`` escaped inside a JSON string)."""
    url = quote(key, safe="")
    return {
        "plain": key,
        "url_encoded": url,
        "url_encoded_lower_hex": re.sub(r"%[0-9A-F]{2}", lambda escape: escape.group().lower(), url),
        "json_escaped": json.dumps(key)[1:-1].replace("/", "\\/"),
        "json_unicode_escaped": "".join(char if char.isalnum() else "\\u%04x" % ord(char) for char in key),
        "split_across_lines": key[:11] + "\r\n  " + key[11:23] + "\n" + key[23:],
        "split_across_lines_json": key[:11] + "\\n" + key[11:23] + "\\r\\n" + key[23:],
    }


def across_cut(form, cut, before_cut, prefix="", suffix=" (refused)"):
    """A text in which ``form`` starts ``before_cut`` characters before character ``cut`` (None: well before it, whole
    within the first ``cut`` characters), after ``prefix`` and filler, and followed by ``suffix``."""
    if before_cut is None:
        return prefix + "x" * 10 + form + suffix
    return prefix + "x" * (cut - before_cut - len(prefix)) + form + suffix + "y" * cut


def key_windows_shown(key, *values):
    """The KEY_WINDOW_CHARS-character windows of ``key`` and of its URL-encoded form that appear in any of ``values``
    (texts as they are, anything else as JSON): empty when no part of the key came back."""
    text = "\n".join(value if isinstance(value, str) else json.dumps(value, default=str) for value in values)
    windows = set()
    for form in (key, quote(key, safe="")):
        windows.update(form[start:start + KEY_WINDOW_CHARS] for start in range(len(form) - KEY_WINDOW_CHARS + 1))
    return sorted(window for window in windows if window in text)
