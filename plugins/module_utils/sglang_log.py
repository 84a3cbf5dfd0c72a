# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse SGLang server log lines and aggregate speculative-decoding statistics.

Pure functions: nothing here touches a process or the network. ``read_lines_from`` is the only
function that opens a file, and it reads forward from a byte offset in bounded chunks.

Line prefix: ``[YYYY-MM-DD HH:MM:SS(.mmm)( DPn)( TPn)( EPn)] message``; lines without a prefix are
accepted too (the message is then the whole line).

Decode lines, three eras (field order and punctuation differ, the field names do not):

* old:     ``Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: 2.90, ...``
           (a period after "batch"; usually no accept rate; some builds end with ``#queue-req: 0, ``)
* mid:     ``Decode batch, #running-req: ..., #queue-req: 0, `` (comma after "batch", trailing ", ")
* current: ``Decode batch, #running-req: 1, #full token: 257, full token usage: 0.00, mamba num: 3,
           mamba usage: 0.03, accept len: 2.83, accept rate: 0.61, cuda graph: True,
           gen throughput (token/s): 93.65, #queue-req: 0`` (0.5.23; dense models print
           ``#token``/``token usage`` instead of the full-token and mamba parts)

The logged ``accept rate`` changed meaning between eras (old/mid: accepted tokens including the
bonus token divided by forward passes x draft tokens, i.e. ``len / (steps + 1)`` with topk 1;
current: correct drafts divided by forward passes x (draft tokens - 1), i.e. ``(len - 1) / steps``
with topk 1). It is kept, labelled with its era, but never trusted: ``recompute_acceptance_rate``
derives the rate from ``accept len``, which means the same thing in every era.
"""

from __future__ import annotations

import re

DEFAULT_CHUNK_SIZE = 65536
DEFAULT_MAX_LINE_BYTES = 1048576
DEFAULT_MAX_ERRORS = 20
MAX_QUOTED_LINE_CHARS = 500

READY_MESSAGE = "The server is fired up and ready to roll!"

ERA_OLD = "old"
ERA_MID = "mid"
ERA_CURRENT = "current"

LOGGED_RATE_DEFINITIONS = {
    ERA_OLD: "accepted tokens incl. bonus / (forward passes x draft tokens) = len / (steps + 1) with topk 1",
    ERA_MID: "accepted tokens incl. bonus / (forward passes x draft tokens) = len / (steps + 1) with topk 1",
    ERA_CURRENT: "correct drafts / (forward passes x (draft tokens - 1)) = (len - 1) / steps with topk 1",
}

RECOMPUTED_RATE_FORMULA = "(accept_length - 1) / (num_draft_tokens - 1); with topk 1 this is (accept_length - 1) / num_steps"

_PREFIX_RE = re.compile(
    r"^\[(?P<timestamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
    r"(?P<tags>(?: [A-Z]{2,4}\d+)*)\]\s?(?P<message>.*)$"
)
_TAG_RE = re.compile(r"([A-Z]{2,4})(\d+)")

_DECODE_RE = re.compile(r"Decode batch(?P<punct>[.,])\s*(?P<body>.*)$")
_FIELD_PATTERNS = {
    "running_req": (re.compile(r"#running-req:\s*(\d+)"), int),
    "num_tokens": (re.compile(r"(?<!full )#token:\s*(\d+)"), int),
    "token_usage": (re.compile(r"(?<!full )(?<!swa )token usage:\s*([\d.]+)"), float),
    "full_tokens": (re.compile(r"#full token:\s*(\d+)"), int),
    "full_token_usage": (re.compile(r"full token usage:\s*([\d.]+)"), float),
    "mamba_num": (re.compile(r"mamba num:\s*(\d+)"), int),
    "mamba_usage": (re.compile(r"mamba usage:\s*([\d.]+)"), float),
    "accept_length": (re.compile(r"accept len:\s*([\d.]+)"), float),
    "logged_accept_rate": (re.compile(r"accept rate:\s*([\d.]+)"), float),
    "gen_throughput": (re.compile(r"gen throughput \(token/s\):\s*([\d.]+)"), float),
    "queue_req": (re.compile(r"#queue-req:\s*(\d+)"), int),
}
_GRAPH_RE = re.compile(r"(cuda|npu) graph:\s*(True|False)")
_TRAILING_COMMA_RE = re.compile(r",\s*$")

# Ordered: the first kind that matches names the line. Tuned to avoid HTTP access lines such as
# '"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error', which carry no colon after "Error".
_ERROR_PATTERNS = (
    ("oom_hybrid", re.compile(r"Not enough GPU memory for hybrid")),
    ("cuda_oom", re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError")),
    ("nccl", re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|NCCL WARN|DistBackendError")),
    ("traceback", re.compile(r"^Traceback \(most recent call last\)|hit an exception: Traceback")),
    ("cuda_error", re.compile(r"CUDA error:")),
    ("exception", re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)(?::|$)|\bRuntimeError:|^Exception\b|Scheduler hit an exception")),
)


def split_prefix(line):
    """Split a log line into (timestamp, tags, message).

    ``timestamp`` is the text inside the brackets (``2026-07-30 13:35:13`` or with ``.123``), ``tags``
    a dict such as ``{"TP": 0, "DP": 1}``; both are None/{} for a line without the prefix.
    """
    text = line.rstrip("\r\n")
    match = _PREFIX_RE.match(text)
    if not match:
        return None, {}, text
    tags = {}
    for name, number in _TAG_RE.findall(match.group("tags") or ""):
        tags[name] = int(number)
    return match.group("timestamp"), tags, match.group("message")


def parse_decode_line(line):
    """Return a dict for an SGLang ``Decode batch`` line, or None for any other line.

    Keys: era (old/mid/current), hybrid (bool), timestamp, tags, rank (TP rank or None), dp_rank,
    running_req, num_tokens, token_usage, full_tokens, full_token_usage, mamba_num, mamba_usage,
    accept_length, logged_accept_rate, gen_throughput, queue_req, cuda_graph (bool or None;
    ``npu graph`` on Ascend builds fills it too), graph_backend (cuda/npu). A field the line does
    not carry is None.
    """
    timestamp, tags, message = split_prefix(line)
    match = _DECODE_RE.search(message)
    if not match:
        return None
    body = match.group("body")
    record = {
        "timestamp": timestamp,
        "tags": tags,
        "rank": tags.get("TP"),
        "dp_rank": tags.get("DP"),
    }
    for key, (pattern, convert) in _FIELD_PATTERNS.items():
        found = pattern.search(body)
        value = found.group(1) if found else None
        try:
            record[key] = convert(value) if value is not None else None
        except ValueError:
            record[key] = None
    if record["running_req"] is None:
        # "Decode batch" inside some other message (a comment, a traceback): not a stats line.
        return None
    graph = _GRAPH_RE.search(body)
    record["cuda_graph"] = (graph.group(2) == "True") if graph else None
    record["graph_backend"] = graph.group(1) if graph else None
    record["hybrid"] = record["full_tokens"] is not None or record["mamba_num"] is not None
    if match.group("punct") == ".":
        record["era"] = ERA_OLD
    elif _TRAILING_COMMA_RE.search(body):
        record["era"] = ERA_MID
    else:
        record["era"] = ERA_CURRENT
    return record


def is_ready_line(line):
    """True for SGLang's readiness line ``The server is fired up and ready to roll!``."""
    return READY_MESSAGE in line


def classify_error(line):
    """Return the error kind of a log line (oom_hybrid, cuda_oom, nccl, traceback, cuda_error,
    exception) or None. Decode/prefill statistics lines are never errors."""
    stripped = split_prefix(line)[2].strip()
    if not stripped or stripped.startswith("File \""):
        return None
    for kind, pattern in _ERROR_PATTERNS:
        if pattern.search(stripped):
            return kind
    return None


def recompute_acceptance_rate(accept_length, num_draft_tokens):
    """Acceptance rate from an accept length: ``(len - 1) / (num_draft_tokens - 1)``.

    ``accept len`` counts the tokens a verify pass emits, the bonus token included, so ``len - 1``
    drafts were correct out of ``num_draft_tokens - 1`` proposed (SGLang 0.5.23's definition; with
    topk 1 SGLang forces num_draft_tokens = num_steps + 1, so this is ``(len - 1) / num_steps``).
    Clamped to [0, 1]; None when it cannot be computed.
    """
    if accept_length is None or num_draft_tokens is None or num_draft_tokens < 2:
        return None
    rate = (float(accept_length) - 1.0) / (num_draft_tokens - 1)
    return round(min(1.0, max(0.0, rate)), 4)


class LogLineReader:
    """Iterate ``(line_number, byte_offset, text)`` over the lines of ``path`` from byte ``offset`` on.

    Reads forward in ``chunk_size`` chunks and never before ``offset``; ``line_number`` counts from 1
    at ``offset``; ``byte_offset`` is the absolute position of the line's first byte. A final line
    without a newline is yielded too (a writer may be in the middle of it). A line longer than
    ``max_line_bytes`` is cut there and the rest of it skipped, so memory stays bounded whatever the
    file holds. Bytes that are not UTF-8 are replaced.

    After iteration, ``resume_offset`` is the position just after the last newline read: a safe
    ``offset`` for the next read (a partial last line is read again then, complete).
    """

    def __init__(self, path, offset=0, chunk_size=DEFAULT_CHUNK_SIZE, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
        self.path = path
        self.offset = offset
        self.chunk_size = max(1, chunk_size)
        self.max_line_bytes = max(1, max_line_bytes)
        self.resume_offset = offset

    def __iter__(self):
        line_number = 0
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            position = self.offset
            pending = b""
            pending_start = self.offset
            skipping = False
            while True:
                chunk = handle.read(self.chunk_size)
                if not chunk:
                    break
                start = 0
                while True:
                    newline = chunk.find(b"\n", start)
                    if newline < 0:
                        break
                    if skipping:
                        skipping = False
                    else:
                        line_number += 1
                        yield line_number, pending_start, _decode(pending + chunk[start:newline])
                    pending = b""
                    start = newline + 1
                    pending_start = position + start
                    self.resume_offset = pending_start
                if not skipping:
                    pending += chunk[start:]
                    if len(pending) > self.max_line_bytes:
                        line_number += 1
                        yield line_number, pending_start, _decode(pending[:self.max_line_bytes])
                        pending = b""
                        skipping = True
                position += len(chunk)
            if pending and not skipping:
                line_number += 1
                yield line_number, pending_start, _decode(pending)


def read_lines_from(path, offset=0, chunk_size=DEFAULT_CHUNK_SIZE, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
    """Generator form of ``LogLineReader`` (same items, same bounds)."""
    return iter(LogLineReader(path, offset=offset, chunk_size=chunk_size, max_line_bytes=max_line_bytes))


def _decode(data):
    return data.decode("utf-8", errors="replace").rstrip("\r\n")


def _summary(values, keys):
    if not values:
        return None
    result = {}
    if "mean" in keys:
        result["mean"] = round(sum(values) / len(values), 4)
    if "median" in keys:
        ordered = sorted(values)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
        result["median"] = round(median, 4)
    if "min" in keys:
        result["min"] = min(values)
    if "max" in keys:
        result["max"] = max(values)
    if "last" in keys:
        result["last"] = values[-1]
    return result


class LogStatsAccumulator:
    """Feed lines with ``add``; ``result`` returns the aggregate.

    Memory is bounded except for the per-line accept lengths and throughputs (two floats per
    decode line, one decode line per ``--decode-log-interval`` iterations).
    """

    def __init__(self, max_errors=DEFAULT_MAX_ERRORS):
        self.max_errors = max_errors
        self.lines_read = 0
        self.decode_lines = 0
        self.accept_lengths = []
        self.throughputs = []
        self.logged_rates = {}
        self.era_counts = {}
        self.ranks = set()
        self.hybrid_lines = 0
        self.cuda_graph_counts = {"true": 0, "false": 0}
        self.running_req_max = None
        self.last_decode = None
        self.first_decode_timestamp = None
        self.ready_seen = False
        self.ready = None
        self.errors = []
        self.error_counts = {}

    def add(self, line, line_number=None, byte_offset=None):
        """Account for one line; unknown lines are counted as read and otherwise ignored."""
        self.lines_read += 1
        decode = parse_decode_line(line)
        if decode is not None:
            self._add_decode(decode)
            return
        if is_ready_line(line):
            if not self.ready_seen:
                timestamp = split_prefix(line)[0]
                self.ready = {"line_number": line_number, "offset": byte_offset, "timestamp": timestamp}
            self.ready_seen = True
            return
        kind = classify_error(line)
        if kind is not None:
            self.error_counts[kind] = self.error_counts.get(kind, 0) + 1
            if len(self.errors) < self.max_errors:
                self.errors.append({
                    "kind": kind,
                    "line_number": line_number,
                    "offset": byte_offset,
                    "line": line[:MAX_QUOTED_LINE_CHARS],
                })

    def _add_decode(self, decode):
        self.decode_lines += 1
        self.era_counts[decode["era"]] = self.era_counts.get(decode["era"], 0) + 1
        if decode["rank"] is not None:
            self.ranks.add(decode["rank"])
        if decode["hybrid"]:
            self.hybrid_lines += 1
        if decode["cuda_graph"] is not None:
            self.cuda_graph_counts["true" if decode["cuda_graph"] else "false"] += 1
        if decode["running_req"] is not None:
            self.running_req_max = max(self.running_req_max or 0, decode["running_req"])
        if decode["accept_length"] is not None:
            self.accept_lengths.append(decode["accept_length"])
        if decode["gen_throughput"] is not None:
            self.throughputs.append(decode["gen_throughput"])
        if decode["logged_accept_rate"] is not None:
            self.logged_rates.setdefault(decode["era"], []).append(decode["logged_accept_rate"])
        if self.first_decode_timestamp is None:
            self.first_decode_timestamp = decode["timestamp"]
        self.last_decode = decode

    def result(self, num_steps=3, num_draft_tokens=None):
        """Aggregate dict; see the spec_decode_stats module's RETURN for each key."""
        if num_draft_tokens is None:
            num_draft_tokens = num_steps + 1
        accept_length = _summary(self.accept_lengths, ("mean", "min", "max", "last"))
        acceptance_rate = None
        if accept_length is not None:
            acceptance_rate = {
                key: recompute_acceptance_rate(value, num_draft_tokens) for key, value in accept_length.items()
            }
            acceptance_rate.update({
                "formula": RECOMPUTED_RATE_FORMULA,
                "num_steps": num_steps,
                "num_draft_tokens": num_draft_tokens,
            })
        logged = {}
        for era, rates in self.logged_rates.items():
            logged[era] = dict(_summary(rates, ("mean", "min", "max", "last")), count=len(rates),
                               definition=LOGGED_RATE_DEFINITIONS[era])
        last = self.last_decode or {}
        return {
            "lines_read": self.lines_read,
            "decode_lines": self.decode_lines,
            "decode_lines_with_accept_length": len(self.accept_lengths),
            "accept_length": accept_length,
            "acceptance_rate": acceptance_rate,
            "logged_accept_rate": logged,
            "gen_throughput": _summary(self.throughputs, ("mean", "median", "max", "last")),
            "eras": dict(self.era_counts),
            "hybrid_lines": self.hybrid_lines,
            "ranks": sorted(self.ranks),
            "cuda_graph": dict(self.cuda_graph_counts),
            "running_req": {"max": self.running_req_max, "last": last.get("running_req")} if self.decode_lines else None,
            "first_decode_timestamp": self.first_decode_timestamp,
            "last_decode_timestamp": last.get("timestamp"),
            "ready_seen": self.ready_seen,
            "ready": self.ready,
            "errors": list(self.errors),
            "error_counts": dict(self.error_counts),
            "error_total": sum(self.error_counts.values()),
        }


def collect_stats(path, offset=0, num_steps=3, num_draft_tokens=None, max_errors=DEFAULT_MAX_ERRORS,
                  chunk_size=DEFAULT_CHUNK_SIZE):
    """Read ``path`` from ``offset`` and return ``LogStatsAccumulator.result`` plus ``offset`` and
    ``resume_offset`` (where a later read can continue)."""
    accumulator = LogStatsAccumulator(max_errors=max_errors)
    reader = LogLineReader(path, offset=offset, chunk_size=chunk_size)
    for line_number, byte_offset, text in reader:
        accumulator.add(text, line_number=line_number, byte_offset=byte_offset)
    result = accumulator.result(num_steps=num_steps, num_draft_tokens=num_draft_tokens)
    result["offset"] = offset
    result["resume_offset"] = reader.resume_offset
    return result
