# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""log_header: the launcher's header line, SGLang's line prefix, bounded reads of header and tail."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import HEADER_KEYS
from ansible_collections.llmops.serving.tests.unit.fakes import key_windows_shown, random_key

HEADER = ("# llmops-serving instance=qwen36 deployment_id=" + "3f" * 32 + " invocation_id=6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
          " pid=4711 started_at=2026-11-29T19:45:01Z unit=sglang-qwen36.service")

# Verbatim SGLang lines from public threads:
# https://github.com/sgl-project/sglang/pull/22331 (TP-tagged decode line)
DECODE_TP0 = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
              "gen throughput (token/s): 144.95, #queue-req: 0")
# https://github.com/sgl-project/sglang/pull/22166 (main-process lines carry no rank tag)
HTTP_LINE = '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
# https://github.com/sgl-project/sglang/issues/1270 (SGLang of 2024 logged the time without the date)
OLD_TIME_ONLY = ("[04:40:55 TP0] Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s): 447.31, "
                 "#queue-req: 0")


def test_parse_header_line():
    header = log_header.parse_header_line(HEADER + "\n")
    assert header == {
        "instance": "qwen36", "deployment_id": "3f" * 32, "invocation_id": "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10", "pid": 4711,
        "started_at": "2026-11-29T19:45:01Z", "unit": "sglang-qwen36.service"}


def test_parse_header_line_takes_the_keys_in_any_order_and_returns_them_in_header_order():
    tokens = HEADER.split(" ")[2:]
    line = "# llmops-serving " + " ".join(reversed(tokens))
    header = log_header.parse_header_line(line)
    assert list(header) == list(HEADER_KEYS) and header == log_header.parse_header_line(HEADER)


@pytest.mark.parametrize("line, reason", [
    ("[2026-04-08 14:05:21 TP0] Decode batch", "does not start with"),
    ("# llmops-servingX instance=a", "does not start with"),
    ("", "does not start with"),
])
def test_a_line_that_is_no_header_is_refused_as_not_one(line, reason):
    with pytest.raises(log_header.HeaderError, match=reason) as info:
        log_header.parse_header_line(line)
    assert not info.value.malformed and info.value.key is None


def with_value(key, value):
    """HEADER with the value of ``key`` replaced."""
    return " ".join("%s=%s" % (key, value) if token.startswith(key + "=") else token for token in HEADER.split(" "))


@pytest.mark.parametrize("line, key, reason", [
    # The PID: ASCII decimal digits, no sign, no leading zero, at most the kernel's PID_MAX_LIMIT. int() accepts
    # most of these (Arabic-Indic and fullwidth digits, signs, spaces, underscores): the header must not.
    (with_value("pid", "12a"), "pid", r"pid=12a is not a process ID"),
    (with_value("pid", "-1"), "pid", r"pid=-1 is not a process ID"),
    (with_value("pid", "+7"), "pid", r"pid=\+7 is not a process ID"),
    (with_value("pid", "0"), "pid", r"pid=0 is not a process ID"),
    (with_value("pid", "007"), "pid", r"pid=007 is not a process ID"),
    (with_value("pid", "\u0663"), "pid", r"pid=\\u0663 is not a process ID"),
    (with_value("pid", "\uff17"), "pid", r"pid=\\uff17 is not a process ID"),
    (with_value("pid", "4_711"), "pid", "is not a process ID"),
    (with_value("pid", "4194305"), "pid", "pid=4194305 is not a process ID"),
    (with_value("pid", "99999999999999999999"), "pid", "is not a process ID"),
    (with_value("pid", ""), "pid", "pid= is not a process ID"),
    # The IDs: systemd's invocation ID and the deployment's SHA-256, lowercase hex of their length.
    (with_value("invocation_id", "6F1C3E0B9A8D4C2E8F7A6B5C4D3E2F10"), "invocation_id", "not a systemd invocation ID"),
    (with_value("invocation_id", "6f1c3e0b"), "invocation_id", "not a systemd invocation ID"),
    (with_value("invocation_id", "6f1c3e0b-9a8d-4c2e-8f7a-6b5c4d3e2f10"), "invocation_id", "not a systemd invocation ID"),
    (with_value("deployment_id", "3f" * 31), "deployment_id", "not a deployment ID"),
    (with_value("deployment_id", "3g" * 32), "deployment_id", "not a deployment ID"),
    # The start: `date -u +%Y-%m-%dT%H:%M:%SZ`, a real time in UTC.
    (with_value("started_at", "2026-11-29T19:45:01+01:00"), "started_at", "not a UTC time"),
    (with_value("started_at", "2026-11-29 19:45:01Z"), None, "token '19:45:01Z' is not key=value"),
    (with_value("started_at", "2026-13-29T19:45:01Z"), "started_at", "not a valid time"),
    (with_value("started_at", "\u0662\u0660\u0662\u0666-11-29T19:45:01Z"), "started_at", "not a UTC time"),
    # Names: printable ASCII (a control character would let a header forge more than it says).
    (with_value("unit", "sglang-q.service\r"), "unit", r"unit=sglang-q.service\\r is not a unit name"),
    (with_value("instance", "q\x1b[2J"), "instance", "is not a name"),
    (with_value("instance", ""), "instance", "instance= is not a name"),
    # Each key of the header exactly once, and no other: a second value would silently win otherwise.
    (HEADER + " pid=4712", "pid", "key pid appears more than once"),
    (HEADER.replace(" unit=", " instance=evil unit="), "instance", "key instance appears more than once"),
    (HEADER + " format=2", "format", "unknown key 'format'"),
    (HEADER.replace(" pid=4711", ""), "pid", "it lacks pid"),
    (HEADER.replace(" pid=4711", " pid"), None, "token 'pid' is not key=value"),
    (HEADER + " stray", None, "token 'stray' is not key=value"),
    (HEADER.replace(" pid=", "  pid="), None, "more than one space"),
    (HEADER + " ", None, "more than one space, or the line ends with one"),
])
def test_a_header_that_breaks_the_format_is_malformed_naming_the_key(line, key, reason):
    with pytest.raises(log_header.HeaderError, match=reason) as info:
        log_header.parse_header_line(line)
    assert info.value.malformed and info.value.key == key
    assert str(info.value).startswith("malformed llmops-serving header: ")


@pytest.mark.parametrize("line, expected", [
    (DECODE_TP0, "2026-04-08T14:05:21"),
    (HTTP_LINE, "2026-04-05T20:02:51"),
    ("[2026-11-29 19:45:01.123 DP1 TP3] Prefill batch", "2026-11-29T19:45:01.123"),   # SGLANG_LOG_MS=1, DP attention
    ("[2026-11-29 19:45:01 DP0 PP1 TP2 EP0] x", "2026-11-29T19:45:01"),               # every rank tag SGLang knows
    (OLD_TIME_ONLY, None),
    ("Traceback (most recent call last):", None),
    ("  [2026-11-29 19:45:01] indented", None),
    ("[2026-11-29 19:45:01 tp0] lowercase tag", None),
])
def test_parse_sglang_timestamp(line, expected):
    assert log_header.parse_sglang_timestamp(line) == expected


def test_last_timestamp_skips_untagged_trailing_lines():
    lines = [DECODE_TP0, HTTP_LINE, "Traceback (most recent call last):", '  File "x.py", line 1']
    assert log_header.last_timestamp(lines) == ("2026-04-05T20:02:51", HTTP_LINE)
    assert log_header.last_timestamp([]) == (None, None)


def test_split_header_and_tail_lines():
    assert log_header.split_header(b"# h\nrest") == ("# h", 4)
    assert log_header.split_header(b"no newline yet") == (None, 0)
    assert log_header.tail_lines(b"tial line\nfull\n", False) == ["full"]
    assert log_header.tail_lines(b"full line\nnext\n", True) == ["full line", "next"]


def write_log(path, body_lines, header=HEADER):
    with open(str(path), "w") as handle:
        if header is not None:
            handle.write(header + "\n")
        for line in body_lines:
            handle.write(line + "\n")


def test_read_log_summary_small_file(tmp_path):
    path = tmp_path / "run.log"
    write_log(path, [HTTP_LINE, DECODE_TP0, "Traceback (most recent call last):"])
    summary = log_header.read_log_summary(str(path))
    info = os.stat(str(path))
    assert summary["header"]["pid"] == 4711
    assert summary["header_error"] is None
    assert summary["offset"] == len(HEADER) + 1
    assert (summary["size"], summary["inode"], summary["device"]) == (info.st_size, info.st_ino, info.st_dev)
    assert summary["last_timestamp"] == "2026-04-08T14:05:21"
    assert summary["last_line"] == DECODE_TP0


def test_read_log_summary_header_only_and_empty(tmp_path):
    path = tmp_path / "run.log"
    write_log(path, [])
    summary = log_header.read_log_summary(str(path))
    assert (summary["offset"], summary["size"], summary["last_timestamp"]) == (len(HEADER) + 1, len(HEADER) + 1, None)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    summary = log_header.read_log_summary(str(empty))
    assert (summary["header"], summary["offset"], summary["size"]) == (None, 0, 0)
    assert "no complete first line" in summary["header_error"]


def test_read_log_summary_without_header(tmp_path):
    path = tmp_path / "recreated.log"
    write_log(path, [DECODE_TP0], header=None)
    summary = log_header.read_log_summary(str(path))
    assert (summary["header"], summary["offset"]) == (None, 0)
    assert "does not start with" in summary["header_error"]
    assert (summary["header_malformed"], summary["header_error_key"]) == (False, None)
    # The first line is not a header, so it is output too: the tail still sees it.
    assert summary["last_timestamp"] == "2026-04-08T14:05:21"


def test_read_log_summary_says_a_malformed_header_is_malformed_and_names_the_key(tmp_path):
    path = tmp_path / "run.log"
    write_log(path, [DECODE_TP0], header=with_value("pid", "\u0663"))
    summary = log_header.read_log_summary(str(path))
    assert summary["header"] is None and summary["offset"] == 0
    assert (summary["header_malformed"], summary["header_error_key"]) == (True, "pid")
    assert summary["header_error"] == ("malformed llmops-serving header: pid=\\u0663 is not a process ID (ASCII decimal digits, "
                                       "no sign or leading zero, 1 to 4194304)")
    valid = tmp_path / "valid.log"
    write_log(valid, [DECODE_TP0])
    summary = log_header.read_log_summary(str(valid))
    assert (summary["header_malformed"], summary["header_error_key"], summary["header_error"]) == (False, None, None)


def test_read_log_summary_drops_a_partial_line_at_the_tail_start(tmp_path):
    path = tmp_path / "run.log"
    # A line whose end falls in the tail window but whose start (with the timestamp) does not.
    long_line = "[2026-01-01 00:00:00 TP0] " + "x" * 200
    write_log(path, [DECODE_TP0, long_line[:-50] + " [2026-12-31 23:59:59 TP1] not a prefix here"])
    summary = log_header.read_log_summary(str(path), tail_bytes=120)
    assert summary["last_timestamp"] is None
    summary = log_header.read_log_summary(str(path), tail_bytes=10000)
    assert summary["last_timestamp"] == "2026-01-01T00:00:00"


def test_read_log_summary_tail_starting_exactly_at_a_line(tmp_path):
    path = tmp_path / "run.log"
    write_log(path, [DECODE_TP0, HTTP_LINE])
    summary = log_header.read_log_summary(str(path), tail_bytes=len(HTTP_LINE) + 1)
    assert summary["last_line"] == HTTP_LINE


def test_read_log_summary_reads_a_bounded_amount_of_a_huge_sparse_file(tmp_path, monkeypatch):
    path = tmp_path / "huge.log"
    write_log(path, [])
    with open(str(path), "r+b") as handle:
        handle.truncate(8 * 1024 ** 3)  # 8 GiB of holes in the middle
        handle.seek(0, os.SEEK_END)
        handle.write(("\n" + DECODE_TP0 + "\n").encode())
    read_bytes = []
    real_pread = os.pread

    def counting_pread(fd, length, offset):
        data = real_pread(fd, length, offset)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(log_header.os, "pread", counting_pread)
    summary = log_header.read_log_summary(str(path))
    assert summary["last_timestamp"] == "2026-04-08T14:05:21"
    assert summary["header"]["invocation_id"] == "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
    assert sum(read_bytes) <= log_header.HEADER_MAX_BYTES + log_header.TAIL_BYTES + 1


@pytest.mark.parametrize("before_cut", [5, 13, 30])
def test_a_secret_across_the_last_lines_cut_and_in_a_line_that_is_no_header_is_masked_first(tmp_path, before_cut):
    # Cut first, the password would lose the "@" after it and no longer look like one.
    password = quote(random_key(8), safe="")
    line = "x" * (500 - len("[2026-04-08 14:05:21] GET https://admin:") - before_cut)
    line = "[2026-04-08 14:05:21] GET https://admin:%s%s@10.0.0.5/v1 failed" % (line, password)
    path = tmp_path / "run.log"
    write_log(path, [DECODE_TP0, line])
    summary = log_header.read_log_summary(str(path))
    assert summary["last_line"].startswith("[2026-04-08 14:05:21] GET https://admin:") and len(summary["last_line"]) <= 500
    assert not key_windows_shown(password, summary["last_line"]), summary["last_line"]
    first = "api_key='%s' %s" % (password, "y" * 300)
    with pytest.raises(log_header.HeaderError) as refused:
        log_header.parse_header_line(first)
    assert "does not start with" in str(refused.value) and not key_windows_shown(password, str(refused.value))
