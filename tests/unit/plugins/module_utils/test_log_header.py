# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""log_header: the launcher's header line, SGLang's line prefix, bounded reads of header and tail."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import log_header

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


def test_parse_header_line_keeps_unknown_keys_in_any_order():
    header = log_header.parse_header_line(
        "# llmops-serving unit=u.service pid=1 format=2 started_at=x invocation_id=i deployment_id=d instance=q\r\n")
    assert (header["format"], header["pid"], header["unit"]) == ("2", 1, "u.service")


@pytest.mark.parametrize("line, reason", [
    ("[2026-04-08 14:05:21 TP0] Decode batch", "does not start with"),
    ("# llmops-servingX instance=a", "does not start with"),
    (HEADER.replace(" pid=4711", ""), "lacks pid"),
    (HEADER.replace("pid=4711", "pid=47x1"), "not a number"),
    (HEADER.replace("instance=qwen36", "instance="), "lacks instance"),
    (HEADER + " stray", "not key=value"),
])
def test_parse_header_line_refuses(line, reason):
    with pytest.raises(log_header.HeaderError, match=reason):
        log_header.parse_header_line(line)


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
    # The first line is not a header, so it is output too: the tail still sees it.
    assert summary["last_timestamp"] == "2026-04-08T14:05:21"


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
