# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse SGLang server log lines and aggregate speculative-decoding statistics.

Pure functions: nothing here touches a process or the network, nor opens a file. ``LogLineReader``
reads a descriptor (service_files.open_log() opens the log safely) forward from a byte offset in
bounded chunks, complete lines only.

Numbers are read as SGLang prints them (``%d`` and ``%.2f``): a field whose value is anything else
(``inf``, ``nan``, ``1e309``, ``-1``, a value too long to be real) makes the line malformed; it is left
out of the statistics and reported, so no non-finite number ever reaches a result.

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

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils.redact import shortened

DEFAULT_CHUNK_SIZE = 65536
DEFAULT_MAX_LINE_BYTES = 1048576
DEFAULT_MAX_ERRORS = 20
MAX_QUOTED_LINE_CHARS = 500

READY_MESSAGE = "The server is fired up and ready to roll!"
# A node above rank 0 of a multi-node model serves no API and never prints READY_MESSAGE: SGLang (0.5.23,
# utils/common.py: launch_dummy_health_check_server) logs this once every scheduler of the node is up, that is after
# the ranks met at --dist-init-addr, and its /health answers 200 from then on.
FOLLOWER_READY_MESSAGE = "Dummy health check server started in background thread at "

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
# A field's value is everything up to the next comma or blank; _integer/_decimal decide whether it is a number.
_VALUE = r"([^\s,]*)"
_INTEGER_RE = re.compile(r"\A[0-9]{1,18}\Z")
_DECIMAL_RE = re.compile(r"\A[0-9]{1,15}(?:\.[0-9]{1,6})?\Z")


def _integer(text):
    """An int from a %d field; ValueError for anything SGLang does not print there (signs, exponents, huge)."""
    if not _INTEGER_RE.match(text):
        raise ValueError(text)
    return int(text)


def _decimal(text):
    """A float from a %.2f field, always finite; ValueError for inf, nan, exponents, signs and absurd lengths."""
    if not _DECIMAL_RE.match(text):
        raise ValueError(text)
    return float(text)


_FIELD_PATTERNS = {
    "running_req": (re.compile(r"#running-req:\s*" + _VALUE), _integer),
    "num_tokens": (re.compile(r"(?<!full )#token:\s*" + _VALUE), _integer),
    "token_usage": (re.compile(r"(?<!full )(?<!swa )token usage:\s*" + _VALUE), _decimal),
    "full_tokens": (re.compile(r"#full token:\s*" + _VALUE), _integer),
    "full_token_usage": (re.compile(r"full token usage:\s*" + _VALUE), _decimal),
    "mamba_num": (re.compile(r"mamba num:\s*" + _VALUE), _integer),
    "mamba_usage": (re.compile(r"mamba usage:\s*" + _VALUE), _decimal),
    # 0.5.23 may add "block accept len:" and "cap len:" after "accept len:"; they are other measures.
    "accept_length": (re.compile(r"(?<!block )accept len:\s*" + _VALUE), _decimal),
    "logged_accept_rate": (re.compile(r"accept rate:\s*" + _VALUE), _decimal),
    "gen_throughput": (re.compile(r"gen throughput \(token/s\):\s*" + _VALUE), _decimal),
    "queue_req": (re.compile(r"#queue-req:\s*" + _VALUE), _integer),
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
    ``npu graph`` on Ascend builds fills it too), graph_backend (cuda/npu), malformed. A field the
    line does not carry is None; so is one whose value is not a number as SGLang prints it, and
    ``malformed`` maps each such field to the text found (empty for a sound line).
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
        "malformed": {},
    }
    for key, (pattern, convert) in _FIELD_PATTERNS.items():
        found = pattern.search(body)
        record[key] = None
        if found is None:
            continue
        try:
            record[key] = convert(found.group(1))
        except ValueError:
            record["malformed"][key] = found.group(1)[:40]
    if record["running_req"] is None:
        # "Decode batch" inside some other message (a comment, a traceback's source line): not a stats line.
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


def is_ready_line(line, node_rank=0):
    """True for SGLang's readiness line: ``The server is fired up and ready to roll!`` on the node that serves the API
    (node rank 0), the dummy health server's start on a node above rank 0 of a multi-node model."""
    return (READY_MESSAGE if node_rank == 0 else FOLLOWER_READY_MESSAGE) in line


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
    """Iterate ``(line_number, byte_offset, text)`` over the complete lines of an open file from byte ``offset`` on.

    ``fd`` is a file descriptor (a ServiceFile's, from service_files.open_log()); it is read with pread
    in ``chunk_size`` chunks, never before ``offset`` and never beyond the size the file had when the
    iteration began, so a writer that keeps appending cannot keep the reader going. ``line_number``
    counts from 1 at ``offset``; ``byte_offset`` is the absolute position of the line's first byte. A
    last line without its newline is not yielded: the server may be in the middle of writing it. A
    line longer than ``max_line_bytes`` is yielded cut to that length (once it is complete), so memory
    stays bounded whatever the file holds. Bytes that are not UTF-8 are replaced.

    After iteration, ``resume_offset`` is the position just after the last newline read: the
    ``offset`` for the next read, which then reads a half-written last line whole.
    """

    def __init__(self, fd, offset=0, chunk_size=DEFAULT_CHUNK_SIZE, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
        self.fd = fd
        self.offset = offset
        self.chunk_size = max(1, chunk_size)
        self.max_line_bytes = max(1, max_line_bytes)
        self.resume_offset = offset

    def __iter__(self):
        end = os.fstat(self.fd).st_size
        line_number = 0
        position = self.offset
        line = b""
        line_start = self.offset
        while position < end:
            chunk = os.pread(self.fd, min(self.chunk_size, end - position), position)
            if not chunk:
                break
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                piece = chunk[start:] if newline < 0 else chunk[start:newline]
                line += piece[:max(0, self.max_line_bytes - len(line))]
                if newline < 0:
                    break
                line_number += 1
                yield line_number, line_start, _decode(line)
                line = b""
                start = newline + 1
                line_start = position + start
                self.resume_offset = line_start
            position += len(chunk)


def read_lines_from(fd, offset=0, chunk_size=DEFAULT_CHUNK_SIZE, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
    """Generator form of ``LogLineReader`` (same items, same bounds)."""
    return iter(LogLineReader(fd, offset=offset, chunk_size=chunk_size, max_line_bytes=max_line_bytes))


def _decode(data):
    return data.decode("utf-8", errors="replace").rstrip("\r")


def quoted(line):
    """A log line as results and messages quote it: secrets masked (redact), then shortened to MAX_QUOTED_LINE_CHARS."""
    return shortened(line, MAX_QUOTED_LINE_CHARS)


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
        self.malformed_lines = 0
        self.malformed = []
        # (accept length, line_number, offset) of the largest accept length, for the bound check in result().
        self.largest_accept = None

    def add(self, line, line_number=None, byte_offset=None):
        """Account for one line; unknown lines are counted as read and otherwise ignored; a decode line with a value
        SGLang does not print is counted as malformed and left out of the statistics."""
        self.lines_read += 1
        decode = parse_decode_line(line)
        if decode is not None and decode["malformed"]:
            self.malformed_lines += 1
            if len(self.malformed) < self.max_errors:
                self.malformed.append({"line_number": line_number, "offset": byte_offset, "fields": dict(decode["malformed"]),
                                       "line": quoted(line)})
            return
        if decode is not None:
            self._add_decode(decode, line_number, byte_offset)
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
                    "line": quoted(line),
                })

    def _add_decode(self, decode, line_number=None, byte_offset=None):
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
            if self.largest_accept is None or decode["accept_length"] > self.largest_accept[0]:
                self.largest_accept = (decode["accept_length"], line_number, byte_offset)
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
            "malformed_lines": self.malformed_lines,
            "malformed": list(self.malformed),
            "impossible_accept_length": self._impossible_accept_length(num_draft_tokens),
        }

    def _impossible_accept_length(self, num_draft_tokens):
        """The largest accept length when it exceeds ``num_draft_tokens`` (a verify pass emits at most that many
        tokens, the bonus token included), with its line and how many lines exceed the bound; else None."""
        if self.largest_accept is None or self.largest_accept[0] <= num_draft_tokens:
            return None
        value, line_number, byte_offset = self.largest_accept
        return {"value": value, "line_number": line_number, "offset": byte_offset, "bound": num_draft_tokens,
                "lines": sum(1 for length in self.accept_lengths if length > num_draft_tokens)}


def collect_stats(fd, offset=0, num_steps=3, num_draft_tokens=None, max_errors=DEFAULT_MAX_ERRORS,
                  chunk_size=DEFAULT_CHUNK_SIZE):
    """Read the open file ``fd`` from ``offset`` (complete lines only) and return ``LogStatsAccumulator.result``
    plus ``offset`` and ``resume_offset`` (where a later read can continue)."""
    accumulator = LogStatsAccumulator(max_errors=max_errors)
    reader = LogLineReader(fd, offset=offset, chunk_size=chunk_size)
    for line_number, byte_offset, text in reader:
        accumulator.add(text, line_number=line_number, byte_offset=byte_offset)
    result = accumulator.result(num_steps=num_steps, num_draft_tokens=num_draft_tokens)
    result["offset"] = offset
    result["resume_offset"] = reader.resume_offset
    return result


# ---- startup pool lines (memory plan vs actual) ----------------------------------------------------------------------
# Shapes as SGLang 0.5.23 prints them (mem_cache/memory_pool.py, mem_cache/kv_cache_configurator.py,
# managers/scheduler.py, model_executor/model_runner.py) and as public logs of earlier releases show them:
#   Load weight begin. avail mem=47.43 GB
#   Load weight end. elapsed=..., type=..., avail mem=21.30 GB, mem usage=26.13 GB.
#   Mamba Cache is allocated. max_mamba_cache_size: 124, conv_state size: 0.34GB, ssm_state size: 17.58GB
#   KV Cache is allocated. #tokens: 580364, K size: 4.15 GB, V size: 4.15 GB   (or "dtype: ..., #tokens: N, KV size: X GB")
#   Memory pool end. avail mem=4.02 GB
#   max_total_num_tokens=580364, ..., max_running_requests=1, context_len=8192, available_gpu_mem=3.63 GB
#   max_running_requests is capped to 24 by the mamba state cache (...)
#   Not enough GPU memory for hybrid ... Computed max_mamba_cache_size=-28 (total_rest_memory=-7.96 GB, ...)
#   Using default chat sampling params from model generation config: {'temperature': 0.6, 'top_k': 20, ...}
_GB = r"(-?[0-9]{1,7}(?:\.[0-9]{1,4})?)\s*GB"
_POOL_PATTERNS = (
    ("load_begin_avail_gib", re.compile(r"Load weight begin\. avail mem=" + _GB), float),
    ("load_end_avail_gib", re.compile(r"Load weight end\..*?avail mem=" + _GB), float),
    ("weights_gib", re.compile(r"Load weight end\..*?mem usage=" + _GB), float),
    ("max_mamba_cache_size", re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (-?[0-9]{1,9})"), int),
    ("conv_state_gib", re.compile(r"Mamba Cache is allocated\..*?conv_state size: " + _GB), float),
    ("ssm_state_gib", re.compile(r"Mamba Cache is allocated\..*?ssm_state size: " + _GB), float),
    ("kv_tokens", re.compile(r"KV Cache is allocated\..*?#tokens: ([0-9]{1,12})"), int),
    ("k_size_gib", re.compile(r"KV Cache is allocated\..*?\bK size: " + _GB), float),
    ("v_size_gib", re.compile(r"KV Cache is allocated\..*?\bV size: " + _GB), float),
    ("kv_size_gib", re.compile(r"KV Cache is allocated\..*?\bKV size: " + _GB), float),
    ("pool_end_avail_gib", re.compile(r"Memory pool end\. avail mem=" + _GB), float),
    ("max_total_num_tokens", re.compile(r"\bmax_total_num_tokens=([0-9]{1,12})"), int),
    ("max_running_requests", re.compile(r"\bmax_total_num_tokens=.*?\bmax_running_requests=([0-9]{1,9})"), int),
    ("context_len", re.compile(r"\bmax_total_num_tokens=.*?\bcontext_len=([0-9]{1,9})"), int),
    ("available_gpu_mem_gib", re.compile(r"\bmax_total_num_tokens=.*?available_gpu_mem=" + _GB), float),
    ("capped_running_requests", re.compile(r"max_running_requests is capped to ([0-9]{1,9}) by the mamba state cache"), int),
    ("oom_mamba_cache_size", re.compile(r"Not enough GPU memory for hybrid.*?max_mamba_cache_size=(-?[0-9]{1,9})"), int),
    ("oom_total_rest_gib", re.compile(r"Not enough GPU memory for hybrid.*?total_rest_memory=" + _GB), float),
)
# Every CUDA graph capture (decode, prefill, piecewise, the draft's) prints its own end line; their memory adds up.
_GRAPH_END_RE = re.compile(r"Capture .{0,60}?graph end\..*?mem usage=" + _GB, re.IGNORECASE)
_SAMPLING_DEFAULTS_RE = re.compile(r"Using default chat sampling params from model generation config: (\{.*\})\s*$")
_SAMPLING_ITEM_RE = re.compile(r"'([a-z_]{1,40})':\s*(-?[0-9]{1,9}(?:\.[0-9]{1,9})?)")


def parse_pool_line(line):
    """The startup pool figures one log line carries, as a dict (empty for any other line).

    Only rank 0's lines count (a line tagged TP1 or higher returns {}), so a TP run reports one rank's pools.
    """
    _timestamp, tags, message = split_prefix(line)
    if tags.get("TP", 0) != 0:
        return {}
    found = {}
    for key, pattern, convert in _POOL_PATTERNS:
        match = pattern.search(message)
        if match:
            found[key] = convert(match.group(1))
    return found


def parse_sampling_defaults_line(line):
    """The keys SGLang took from generation_config.json for chat requests, from its startup line; None otherwise."""
    match = _SAMPLING_DEFAULTS_RE.search(split_prefix(line)[2])
    if not match:
        return None
    return {key: float(value) if "." in value else int(value) for key, value in _SAMPLING_ITEM_RE.findall(match.group(1))}


def parse_pool_lines(lines):
    """The pool sizes of one start from its log lines (the current run's part of the log).

    Returns a dict with whichever of these the lines carried: ``load_begin_avail_gib``, ``load_end_avail_gib``,
    ``weights_gib`` (the first model loaded: the target), ``max_mamba_cache_size``, ``conv_state_gib``,
    ``ssm_state_gib``, ``kv_tokens``, ``k_size_gib``/``v_size_gib``/``kv_size_gib``, ``pool_end_avail_gib``,
    ``max_total_num_tokens``, ``max_running_requests``, ``context_len``, ``available_gpu_mem_gib``,
    ``capped_running_requests``, ``oom_mamba_cache_size``, ``oom_total_rest_gib``, ``cuda_graph_gib`` (the memory of
    every CUDA graph capture of rank 0 together: decode, prefill, piecewise, the draft's) and ``sampling_defaults``
    (the chat defaults taken from generation_config.json; ``{}`` when SGLang printed none). The first value of each
    wins, so the draft model's later ``Load weight end`` and ``KV Cache`` lines do not replace the target's.
    """
    result = {}
    for line in lines:
        for key, value in parse_pool_line(line).items():
            result.setdefault(key, value)
        _timestamp, tags, message = split_prefix(line)
        graph = _GRAPH_END_RE.search(message) if tags.get("TP", 0) == 0 else None
        if graph:
            result["cuda_graph_gib"] = round(result.get("cuda_graph_gib", 0.0) + float(graph.group(1)), 2)
        if "sampling_defaults" not in result:
            sampling = parse_sampling_defaults_line(line)
            if sampling is not None:
                result["sampling_defaults"] = sampling
    return result
