# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read an llmops-serving log file's header line and its tail, never the middle.

The launcher writes one header line before it execs the server:
``# llmops-serving instance=<i> deployment_id=<id> invocation_id=<32 hex> pid=<pid> started_at=<ISO> unit=<unit>``;
its marker and keys are deployment_layout's (the launcher's printf is rendered from them too).
SGLang prefixes its lines with ``[YYYY-MM-DD HH:MM:SS(.mmm)?( DPn)?( TPn)?]`` (other rank tags too). Reading costs two bounded reads
whatever the file's size.
"""

from __future__ import annotations

import datetime
import os
import re

from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import HEADER_KEYS, HEADER_MARKER

HEADER_REQUIRED_KEYS = HEADER_KEYS
# The header is one short line; a first line longer than this is not a header.
HEADER_MAX_BYTES = 4096
# Enough for many SGLang lines (a decode line is ~250 bytes) even after a long traceback.
TAIL_BYTES = 64 * 1024
# The kernel's PID_MAX_LIMIT on 64-bit: no process ID is larger.
PID_MAX = 4194304

# Rank tags follow the time in the order SGLang's run_scheduler_process builds them: DP, PP, ATTN_CP, MOE_DP, TP, EP
# (only those that apply), so any sequence of " <TAG><n>" is accepted, not just DP and TP.
SGLANG_PREFIX_RE = re.compile(
    r"^\[(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\]"
)

# What the launcher writes for each key (sglang-launch.j2): ASCII only, so that int() and datetime never see the other
# digits Unicode has. The pid is "$$", decimal without sign or leading zero; invocation_id systemd's $INVOCATION_ID;
# deployment_id a SHA-256 in hex; started_at `date -u +%Y-%m-%dT%H:%M:%SZ`; instance and unit are names.
_PID_RE = re.compile(r"\A[1-9][0-9]{0,6}\Z")
_INVOCATION_ID_RE = re.compile(r"\A[0-9a-f]{32}\Z")
_DEPLOYMENT_ID_RE = re.compile(r"\A[0-9a-f]{64}\Z")
_STARTED_AT_RE = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")
_NAME_RE = re.compile(r"\A[\x21-\x7e]+\Z")
_VALUE_FORMS = {
    "instance": (_NAME_RE, "a name (printable ASCII, no spaces)"),
    "deployment_id": (_DEPLOYMENT_ID_RE, "a deployment ID (64 lowercase hexadecimal digits)"),
    "invocation_id": (_INVOCATION_ID_RE, "a systemd invocation ID (32 lowercase hexadecimal digits)"),
    "pid": (_PID_RE, "a process ID (ASCII decimal digits, no sign or leading zero, 1 to %d)" % PID_MAX),
    "started_at": (_STARTED_AT_RE, "a UTC time (YYYY-mm-ddTHH:MM:SSZ)"),
    "unit": (_NAME_RE, "a unit name (printable ASCII, no spaces)"),
}


class HeaderError(ValueError):
    """The first line is not a valid llmops-serving header; the message says why.

    ``malformed`` is True when the line starts with the header's marker, so it claims to be the launcher's header but
    breaks its format (a key missing, unknown or repeated, or a value not of its form); False when the line is not a
    header at all (the file was not written by the launcher). ``key`` names the header key at fault, when one is.
    """

    def __init__(self, message, malformed=False, key=None):
        super().__init__(message)
        self.malformed = malformed
        self.key = key


def _malformed(why, key=None):
    return HeaderError("malformed llmops-serving header: %s" % why, malformed=True, key=key)


def _check_value(key, value):
    pattern, form = _VALUE_FORMS[key]
    if not pattern.match(value):
        raise _malformed("%s=%s is not %s" % (key, redact.shortened(ascii(value)[1:-1], 80), form), key)
    if key == "pid":
        if int(value) > PID_MAX:
            raise _malformed("pid=%s is not %s" % (value, form), key)
        return int(value)
    if key == "started_at":
        try:
            datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            raise _malformed("started_at=%s is not a valid time" % value, key) from None
    return value


def parse_header_line(line):
    """Parse the launcher's header line into {key: value} with exactly the keys of HEADER_KEYS (``pid`` as int).

    The format is the launcher's, strictly: the marker, then ``key=value`` for each key of HEADER_KEYS exactly once (in
    any order), one space between tokens, each value of its form. Raises HeaderError (``malformed`` and ``key`` say
    what is wrong, for a failure that names it).
    """
    if line.endswith("\n"):
        line = line[:-1]
    if not line.startswith(HEADER_MARKER + " "):
        raise HeaderError("the first line does not start with %r: %r" % (HEADER_MARKER, redact.shortened(line, 120)))
    header = {}
    for token in line[len(HEADER_MARKER) + 1:].split(" "):
        key, separator, value = token.partition("=")
        if not token:
            raise _malformed("tokens are separated by more than one space, or the line ends with one")
        if not separator or not key:
            raise _malformed("token %s is not key=value" % redact.shortened(ascii(token), 80))
        if key not in HEADER_KEYS:
            raise _malformed("unknown key %s (a header has exactly %s)" % (redact.shortened(ascii(key), 40), ", ".join(HEADER_KEYS)), key)
        if key in header:
            raise _malformed("key %s appears more than once" % key, key)
        header[key] = value
    missing = [key for key in HEADER_KEYS if key not in header]
    if missing:
        raise _malformed("it lacks %s: %r" % (", ".join(missing), redact.shortened(line, 200)), missing[0])
    return {key: _check_value(key, header[key]) for key in HEADER_KEYS}


def parse_sglang_timestamp(line):
    """The timestamp of an SGLang log line as ISO text (``2026-11-29T19:45:01`` or with ``.123``), else None.

    SGLang logs local time without a zone; the text is returned as logged, not converted.
    """
    match = SGLANG_PREFIX_RE.match(line)
    if not match:
        return None
    return match.group("date") + "T" + match.group("time")


def last_timestamp(lines):
    """(timestamp, line) of the last line carrying an SGLang prefix in ``lines``, else (None, None)."""
    for line in reversed(lines):
        found = parse_sglang_timestamp(line)
        if found is not None:
            return found, line
    return None, None


def _read_at(fd, offset, length):
    """pread that tolerates short reads."""
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def split_header(first_bytes):
    """(header line text or None, offset after it) from the first bytes of a file.

    Without a newline in the first HEADER_MAX_BYTES there is no complete header: offset 0.
    """
    newline = first_bytes.find(b"\n")
    if newline < 0:
        return None, 0
    return first_bytes[:newline].decode("utf-8", errors="replace"), newline + 1


def tail_lines(tail_bytes, starts_at_line_boundary):
    """Complete lines of a tail chunk; a partial first line is dropped unless the chunk starts a line."""
    lines = tail_bytes.decode("utf-8", errors="replace").splitlines()
    if lines and not starts_at_line_boundary:
        lines = lines[1:]
    return lines


def read_log_summary(path, tail_bytes=TAIL_BYTES):
    """Open ``path`` once and read its header and tail.

    Returns dict: ``inode``, ``device``, ``size``, ``mtime`` (epoch), ``header_line`` (text or None),
    ``header`` (dict or None), ``header_error`` (text or None), ``header_malformed`` (True when the first line claims
    to be the launcher's header but breaks its format: a failure, not a file without a header), ``header_error_key``
    (the header key at fault, or None), ``offset`` (byte after the header line; 0 without a valid header),
    ``last_timestamp``, ``last_line`` (masked by redact, then shortened to 500 characters). Identity and size come
    from fstat of the same open file.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        size = info.st_size
        first = _read_at(fd, 0, min(size, HEADER_MAX_BYTES))
        header_line, offset = split_header(first)
        header = None
        header_error = None
        header_malformed = False
        header_error_key = None
        if header_line is None:
            header_error = "no complete first line in the first %d bytes" % HEADER_MAX_BYTES
        else:
            try:
                header = parse_header_line(header_line)
            except HeaderError as exc:
                header_error, header_malformed, header_error_key = str(exc), exc.malformed, exc.key
                # Not a header: the first line is output like any other.
                offset = 0
        tail_start = max(offset, size - tail_bytes)
        tail = _read_at(fd, tail_start, size - tail_start) if size > tail_start else b""
        boundary = tail_start == offset or _read_at(fd, tail_start - 1, 1) == b"\n"
    finally:
        os.close(fd)
    found, line = last_timestamp(tail_lines(tail, boundary))
    return {
        "inode": info.st_ino,
        "device": info.st_dev,
        "size": size,
        "mtime": info.st_mtime,
        "header_line": header_line,
        "header": header,
        "header_error": header_error,
        "header_malformed": header_malformed,
        "header_error_key": header_error_key,
        "offset": offset,
        "last_timestamp": found,
        "last_line": redact.shortened(line, 500),
    }
