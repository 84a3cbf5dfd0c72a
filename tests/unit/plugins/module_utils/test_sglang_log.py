# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests for the SGLang log parser, on verbatim lines from public SGLang issues and pull requests."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import sglang_log
from ansible_collections.llmops.serving.tests.unit.fakes import within

# ---------------------------------------------------------------------------------------------
# Verbatim decode lines. Each is copied exactly from the public page named next to it.
# ---------------------------------------------------------------------------------------------

# Old era: "Decode batch." with a period, DP+TP tags, accept len, no accept rate, no trailing comma.
# Source: https://github.com/sgl-project/sglang/pull/6081 (comment by GaoYusong, 2025-05-31)
OLD_DP_TP = ("[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, "
             "accept len: 2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0")
# Same source, another DP rank.
OLD_DP6_TP6 = ("[2025-05-31 18:31:21 DP6 TP6] Decode batch. #running-req: 8, #token: 36267, token usage: 0.12, "
               "accept len: 2.86, cuda graph: True, gen throughput (token/s): 168.28, #queue-req: 0")

# Old era with largest-len and a trailing ", " (no cuda graph field).
# Source: https://github.com/sgl-project/sglang/issues/4759
OLD_LARGEST_LEN = ("[2025-03-24 02:56:41 TP0] Decode batch. #running-req: 32, #token: 7352, token usage: 0.01, "
                   "accept len: 2.54, gen throughput (token/s): 39.33, largest-len: 0, #queue-req: 68, ")

# Old era, trailing "," without a space, first decode line after idle (throughput 0.59).
# Source: https://github.com/sgl-project/sglang/issues/4417
OLD_IDLE = ("[2025-03-14 08:30:05 TP0] Decode batch. #running-req: 1, #token: 66, token usage: 0.00, "
            "accept len: 1.80, gen throughput (token/s): 0.59, largest-len: 0, #queue-req: 0,")

# Old era without the bracketed prefix and without speculative decoding.
# Source: https://github.com/sgl-project/sglang/issues/938
OLD_NO_PREFIX = ("Decode batch. #running-req: 1010, #token: 55006, token usage: 0.93, "
                 "gen throughput (token/s): 1397.13, #queue-req: 12279")

# A period after "batch" but already with an accept rate (len / draft tokens: 2.17 / 4 = 0.54).
# Source: https://github.com/sgl-project/sglang/issues/11948
OLD_WITH_RATE = ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, "
                 "accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, ")

# Mid era: comma after "batch", trailing ", " after #queue-req, no rank tag.
# Source: https://github.com/sgl-project/sglang/pull/13023
MID_TRAILING_COMMA = ("[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, "
                      "cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, ")
MID_TRAILING_COMMA_GRAPH = ("[2025-11-11 04:06:30] Decode batch, #running-req: 28, #token: 22920, token usage: 0.13, "
                            "cuda graph: True, gen throughput (token/s): 1086.59, #queue-req: 0, ")

# Current era, hybrid model (#full token, mamba num, mamba usage) with accept len and accept rate
# ((3.13 - 1) / 3 = 0.71). This Ascend build prints "npu graph" where CUDA builds print "cuda graph".
# Source: https://github.com/sgl-project/sglang/pull/30047
CURRENT_HYBRID = ("[2026-07-04 05:01:33 TP0] Decode batch, #running-req: 40, #full token: 350592, full token usage: 0.74, "
                  "mamba num: 160, mamba usage: 0.80, accept len: 3.13, accept rate: 0.71, npu graph: True, "
                  "gen throughput (token/s): 155.34, #queue-req: 0")
# A prefill line from the same source: not a decode line.
PREFILL_HYBRID = ("[2026-07-04 05:01:20 TP0] Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 70016, "
                  "full token usage: 0.28, mamba usage: 0.20, #running-req: 1, #queue-req: 0, #pending-token: 0, "
                  "npu graph: False, input throughput (token/s): 16.23")

# Current era, dense model with accept len/rate, cuda graph and extra fields between them.
# Source: https://github.com/sgl-project/sglang/pull/30393
CURRENT_DENSE = ("[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, "
                 "accept len: 1.67, accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, #transfer-req: 1, "
                 "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 183.10, #queue-req: 0")
# Same source, an access-log line between decode lines.
ACCESS_LINE = '[2026-08-14 14:02:50] INFO:     127.0.0.1:52024 - "GET /metrics HTTP/1.1" 200 OK'

# Current era, TP and EP tags.
# Source: https://github.com/sgl-project/sgl-kernel-npu/pull/608
CURRENT_TP_EP = ("[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, "
                 "accept len: 3.05, accept rate: 0.68, npu graph: True, gen throughput (token/s): 239.06, #queue-req: 2")

# Current era, dense, no speculative decoding.
# Source: https://github.com/sgl-project/sglang/pull/22331
CURRENT_NO_SPEC = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
                   "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0")

# Milliseconds (SGLANG_LOG_MS=1): no public decode line with milliseconds was found. SYNTHETIC: CURRENT_HYBRID
# with ".123" added to its timestamp and "TP1" as rank, to exercise the prefix grammar only.
SYNTHETIC_MS = CURRENT_HYBRID.replace("05:01:33 TP0]", "05:01:33.123 TP1]")

# ---------------------------------------------------------------------------------------------
# Verbatim error lines.
# ---------------------------------------------------------------------------------------------
# Source: https://github.com/sgl-project/sglang/issues/4547
TRACEBACK_LINE = "Traceback (most recent call last):"
RUNTIME_OOM_LINE = "RuntimeError: CUDA error: out of memory"
# Source: https://github.com/kvcache-ai/ktransformers/issues/1969 (SGLang scheduler log)
SCHEDULER_EXCEPTION = "[2026-05-01 15:16:15 TP2] Scheduler hit an exception: Traceback (most recent call last):"
SIGQUIT_LINE = "[2026-05-01 15:16:15] Received sigquit from a child process. It usually means the child failed."
# Source: https://github.com/sgl-project/sglang/issues/1087
EXCEPTION_IN = "Exception in ControllerSingle:"
# Source: https://github.com/sgl-project/sglang/issues/4289
NCCL_LINE = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
# Source: https://github.com/vllm-project/vllm/issues/9290 (PyTorch's CUDA OOM text inside another engine's log;
# the first part of the line)
TORCH_OOM = ("ERROR 10-11 12:27:29 engine.py:157] OutOfMemoryError('CUDA out of memory. Tried to allocate 138.00 MiB. "
             "GPU 0 has a total capacity of 79.15 GiB of which 2.19 MiB is free.")
# The hybrid-cache OOM text as given in /work/shared/reference/sglang.md (read from the sglang 0.5.23 wheel;
# the "..." is the reference's elision). Not a captured log line: no public capture was found.
HYBRID_OOM_TEXT = ("Not enough GPU memory for hybrid (mamba/linear-attention) state cache ... Try: (1) reduce "
                   "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens")

READY_LINE = "[2026-07-30 13:34:58] The server is fired up and ready to roll!"
# A node above rank 0 of a multi-node model. The message is SGLang 0.5.23's own (utils/common.py:
# launch_dummy_health_check_server, f"Dummy health check server started in background thread at {host}:{port}"),
# here with the timestamp prefix of the current era and the simulator's address.
FOLLOWER_READY_LINE = "[2026-11-30 10:02:11] Dummy health check server started in background thread at 0.0.0.0:30000"


class TestSplitPrefix:
    def test_dp_and_tp_tags(self):
        timestamp, tags, message = sglang_log.split_prefix(OLD_DP_TP)
        assert timestamp == "2025-05-31 18:31:21"
        assert tags == {"DP": 0, "TP": 0}
        assert message.startswith("Decode batch. #running-req: 8")

    def test_no_tag(self):
        timestamp, tags, message = sglang_log.split_prefix(MID_TRAILING_COMMA)
        assert timestamp == "2025-11-11 04:06:27"
        assert tags == {}
        assert message.startswith("Decode batch,")

    def test_milliseconds_and_rank(self):
        timestamp, tags, message = sglang_log.split_prefix(SYNTHETIC_MS)
        assert timestamp == "2026-07-04 05:01:33.123"
        assert tags == {"TP": 1}
        assert message.startswith("Decode batch, #running-req: 40")

    def test_without_prefix(self):
        timestamp, tags, message = sglang_log.split_prefix(OLD_NO_PREFIX)
        assert timestamp is None and tags == {}
        assert message == OLD_NO_PREFIX


class TestParseDecodeLine:
    def test_old_dp_tp(self):
        record = sglang_log.parse_decode_line(OLD_DP_TP)
        assert record["era"] == sglang_log.ERA_OLD
        assert (record["rank"], record["dp_rank"]) == (0, 0)
        assert record["running_req"] == 8
        assert record["num_tokens"] == 37217
        assert record["token_usage"] == pytest.approx(0.13)
        assert record["accept_length"] == pytest.approx(2.90)
        assert record["logged_accept_rate"] is None
        assert record["cuda_graph"] is True
        assert record["gen_throughput"] == pytest.approx(171.01)
        assert record["queue_req"] == 0
        assert record["hybrid"] is False

    def test_old_dp6_rank(self):
        record = sglang_log.parse_decode_line(OLD_DP6_TP6)
        assert (record["rank"], record["dp_rank"]) == (6, 6)
        assert record["accept_length"] == pytest.approx(2.86)

    def test_old_largest_len_trailing_comma(self):
        record = sglang_log.parse_decode_line(OLD_LARGEST_LEN)
        assert record["era"] == sglang_log.ERA_OLD
        assert record["accept_length"] == pytest.approx(2.54)
        assert record["queue_req"] == 68
        assert record["cuda_graph"] is None

    def test_old_without_prefix_or_spec(self):
        record = sglang_log.parse_decode_line(OLD_NO_PREFIX)
        assert record["timestamp"] is None and record["rank"] is None
        assert record["running_req"] == 1010
        assert record["accept_length"] is None
        assert record["gen_throughput"] == pytest.approx(1397.13)

    def test_period_with_logged_rate(self):
        record = sglang_log.parse_decode_line(OLD_WITH_RATE)
        assert record["era"] == sglang_log.ERA_OLD
        assert record["logged_accept_rate"] == pytest.approx(0.54)
        assert record["accept_length"] == pytest.approx(2.17)

    def test_mid_trailing_comma(self):
        record = sglang_log.parse_decode_line(MID_TRAILING_COMMA)
        assert record["era"] == sglang_log.ERA_MID
        assert record["cuda_graph"] is False
        assert record["running_req"] == 46
        assert record["rank"] is None

    def test_current_hybrid(self):
        record = sglang_log.parse_decode_line(CURRENT_HYBRID)
        assert record["era"] == sglang_log.ERA_CURRENT
        assert record["hybrid"] is True
        assert record["full_tokens"] == 350592
        assert record["full_token_usage"] == pytest.approx(0.74)
        assert record["token_usage"] is None
        assert record["num_tokens"] is None
        assert record["mamba_num"] == 160
        assert record["mamba_usage"] == pytest.approx(0.80)
        assert record["accept_length"] == pytest.approx(3.13)
        assert record["logged_accept_rate"] == pytest.approx(0.71)
        assert record["cuda_graph"] is True
        assert record["graph_backend"] == "npu"
        assert record["gen_throughput"] == pytest.approx(155.34)

    def test_current_dense_with_extra_fields(self):
        record = sglang_log.parse_decode_line(CURRENT_DENSE)
        assert record["era"] == sglang_log.ERA_CURRENT
        assert record["hybrid"] is False
        assert record["num_tokens"] == 266624
        assert record["token_usage"] == pytest.approx(0.43)
        assert record["accept_length"] == pytest.approx(1.67)
        assert record["graph_backend"] == "cuda"
        assert record["gen_throughput"] == pytest.approx(183.10)

    def test_current_tp_ep(self):
        record = sglang_log.parse_decode_line(CURRENT_TP_EP)
        assert record["tags"] == {"TP": 0, "EP": 0}
        assert record["queue_req"] == 2

    def test_current_without_spec(self):
        record = sglang_log.parse_decode_line(CURRENT_NO_SPEC)
        assert record["accept_length"] is None
        assert record["logged_accept_rate"] is None
        assert record["gen_throughput"] == pytest.approx(144.95)

    def test_milliseconds(self):
        record = sglang_log.parse_decode_line(SYNTHETIC_MS)
        assert record["timestamp"] == "2026-07-04 05:01:33.123"
        assert record["rank"] == 1
        assert record["accept_length"] == pytest.approx(3.13)

    @pytest.mark.parametrize("line", [
        PREFILL_HYBRID, ACCESS_LINE, READY_LINE, "", "   ", "Decode batch", "Decode batch, no fields here",
        "[2026-01-01 00:00:00] Decode batch, #running-req: x", "\x00\xff garbage", TRACEBACK_LINE,
    ])
    def test_other_lines_are_not_decode(self, line):
        assert sglang_log.parse_decode_line(line) is None


class TestErrorsAndReady:
    @pytest.mark.parametrize("line, kind", [
        (TRACEBACK_LINE, "traceback"),
        (SCHEDULER_EXCEPTION, "traceback"),
        (RUNTIME_OOM_LINE, "cuda_oom"),
        (EXCEPTION_IN, "exception"),
        (TORCH_OOM, "cuda_oom"),
        (HYBRID_OOM_TEXT, "oom_hybrid"),
        ("[2026-07-30 13:34:01 TP0] " + HYBRID_OOM_TEXT, "oom_hybrid"),
        (NCCL_LINE, "nccl"),
    ])
    def test_error_kinds(self, line, kind):
        assert sglang_log.classify_error(line) == kind

    @pytest.mark.parametrize("line", [
        OLD_DP_TP, CURRENT_HYBRID, PREFILL_HYBRID, ACCESS_LINE, READY_LINE, SIGQUIT_LINE,
        '  File "/root/sglang/python/sglang/srt/managers/scheduler.py", line 3118, in run_scheduler_process',
        "    raise RuntimeError(",
        '[2026-08-14 14:02:50] INFO:     127.0.0.1:52024 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
    ])
    def test_not_errors(self, line):
        assert sglang_log.classify_error(line) is None

    def test_ready(self):
        assert sglang_log.is_ready_line(READY_LINE)
        assert not sglang_log.is_ready_line(ACCESS_LINE)

    def test_ready_on_a_node_above_rank_0(self):
        # Each node waits for its own line: rank 0's dummy server line would not mean its API is up, and a node above
        # rank 0 never prints the API's ready line.
        assert sglang_log.is_ready_line(FOLLOWER_READY_LINE, node_rank=1)
        assert not sglang_log.is_ready_line(FOLLOWER_READY_LINE)
        assert not sglang_log.is_ready_line(READY_LINE, node_rank=1)
        assert not sglang_log.is_ready_line("[2026-11-30 10:09:41] Dummy health check server stopped at 0.0.0.0:30000",
                                            node_rank=1)


class TestRecomputedRate:
    def test_topk1_definition(self):
        # (len - 1) / steps with 4 draft tokens (3 steps).
        assert sglang_log.recompute_acceptance_rate(3.13, 4) == pytest.approx(0.71, abs=0.001)
        assert sglang_log.recompute_acceptance_rate(4.0, 4) == 1.0
        assert sglang_log.recompute_acceptance_rate(1.0, 4) == 0.0

    def test_matches_the_current_era_logged_rate(self):
        # SGLang 0.5.23's own number for the verbatim hybrid line: 0.71.
        record = sglang_log.parse_decode_line(CURRENT_HYBRID)
        assert sglang_log.recompute_acceptance_rate(record["accept_length"], 4) == pytest.approx(record["logged_accept_rate"], abs=0.005)

    def test_differs_from_the_old_logged_rate(self):
        # The old definition (len / draft tokens) logged 0.54 for accept len 2.17; the recomputed rate is 0.39.
        record = sglang_log.parse_decode_line(OLD_WITH_RATE)
        recomputed = sglang_log.recompute_acceptance_rate(record["accept_length"], 4)
        assert recomputed == pytest.approx(0.39, abs=0.001)
        assert record["accept_length"] / 4 == pytest.approx(record["logged_accept_rate"], abs=0.005)

    def test_clamped_and_undefined(self):
        assert sglang_log.recompute_acceptance_rate(5.0, 4) == 1.0
        assert sglang_log.recompute_acceptance_rate(0.5, 4) == 0.0
        assert sglang_log.recompute_acceptance_rate(None, 4) is None
        assert sglang_log.recompute_acceptance_rate(2.0, 1) is None


def _write(tmp_path, lines, newline_at_end=True, name="sglang.log"):
    path = tmp_path / name
    text = "\n".join(lines) + ("\n" if newline_at_end else "")
    path.write_bytes(text.encode("utf-8"))
    return path


@contextlib.contextmanager
def _opened(path):
    """A read-only descriptor of ``path``, as service_files.open_log() hands one to the reader."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def _read(path, **options):
    with _opened(path) as fd:
        return list(sglang_log.read_lines_from(fd, **options))


def _stats(path, **options):
    with _opened(path) as fd:
        return sglang_log.collect_stats(fd, **options)


class TestReader:
    def test_reads_from_offset_only(self, tmp_path):
        first_run = [OLD_DP_TP, READY_LINE]
        path = _write(tmp_path, first_run + [CURRENT_HYBRID, CURRENT_DENSE])
        offset = len(("\n".join(first_run) + "\n").encode("utf-8"))
        lines = _read(path, offset=offset)
        assert [item[2] for item in lines] == [CURRENT_HYBRID, CURRENT_DENSE]
        assert lines[0][0] == 1 and lines[0][1] == offset
        assert lines[1][1] == offset + len(CURRENT_HYBRID) + 1

    def test_a_half_written_last_line_is_left_for_the_next_read(self, tmp_path):
        # The server is in the middle of a decode line: it is not read until its newline is there, then read whole.
        partial = CURRENT_DENSE[:60]
        path = _write(tmp_path, [CURRENT_HYBRID, ACCESS_LINE, partial], newline_at_end=False)
        with _opened(path) as fd:
            reader = sglang_log.LogLineReader(fd, offset=0, chunk_size=7)
            assert [item[2] for item in reader] == [CURRENT_HYBRID, ACCESS_LINE]
            assert reader.resume_offset == len(CURRENT_HYBRID) + 1 + len(ACCESS_LINE) + 1
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(CURRENT_DENSE[60:] + "\n")
            again = sglang_log.LogLineReader(fd, offset=reader.resume_offset, chunk_size=7)
            assert [(item[1], item[2]) for item in again] == [(reader.resume_offset, CURRENT_DENSE)]

    def test_bytes_appended_during_a_read_wait_for_the_next_one(self, tmp_path):
        # A read stops at the size the file had when it began, so a writer that keeps appending cannot keep it going.
        path = _write(tmp_path, [CURRENT_HYBRID, CURRENT_DENSE])
        with _opened(path) as fd, within(10):
            seen = []
            for _number, _offset, text in sglang_log.LogLineReader(fd, chunk_size=16):
                seen.append(text)
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(ACCESS_LINE + "\n")
        assert seen == [CURRENT_HYBRID, CURRENT_DENSE]

    @pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 64, 137, 65536])
    def test_any_chunk_size_gives_the_same_lines(self, tmp_path, chunk_size):
        lines = [CURRENT_HYBRID, "", ACCESS_LINE, "ünïcödé line", OLD_DP_TP]
        path = _write(tmp_path, lines)
        items = _read(path, offset=0, chunk_size=chunk_size)
        assert [item[2] for item in items] == lines
        assert [item[0] for item in items] == [1, 2, 3, 4, 5]
        data = path.read_bytes()
        for _number, byte_offset, text in items:
            assert data[byte_offset:].decode("utf-8").startswith(text)

    def test_long_line_is_cut_and_rest_skipped(self, tmp_path):
        path = _write(tmp_path, ["x" * 5000, CURRENT_NO_SPEC])
        items = _read(path, chunk_size=64, max_line_bytes=200)
        assert len(items) == 2
        assert items[0][2] == "x" * 200
        assert items[1][2] == CURRENT_NO_SPEC
        assert items[1][1] == 5001

    def test_invalid_utf8_and_crlf(self, tmp_path):
        path = tmp_path / "bad.log"
        path.write_bytes(b"\xff\xfe junk\r\n" + CURRENT_NO_SPEC.encode() + b"\r\n")
        texts = [item[2] for item in _read(path)]
        assert texts[1] == CURRENT_NO_SPEC
        assert "\ufffd" in texts[0]

    def test_offset_at_end(self, tmp_path):
        path = _write(tmp_path, [CURRENT_NO_SPEC])
        size = path.stat().st_size
        assert _read(path, offset=size) == []


class TestCollectStats:
    def test_mixed_eras_and_unknown_lines(self, tmp_path):
        previous_run = [OLD_LARGEST_LEN, OLD_IDLE, TRACEBACK_LINE]
        current_run = [
            "server_args={'model_path': 'Qwen/Qwen3.6-27B'}",
            READY_LINE,
            PREFILL_HYBRID,
            CURRENT_HYBRID,
            ACCESS_LINE,
            SYNTHETIC_MS,
            "\x1b[31mcolour codes and ünïcödé\x1b[0m",
            CURRENT_DENSE,
            MID_TRAILING_COMMA,
        ]
        path = _write(tmp_path, previous_run + current_run)
        offset = len(("\n".join(previous_run) + "\n").encode("utf-8"))
        stats = _stats(path, offset=offset, num_steps=3)
        assert stats["decode_lines"] == 4
        assert stats["decode_lines_with_accept_length"] == 3
        assert stats["accept_length"] == {"mean": pytest.approx((3.13 + 3.13 + 1.67) / 3, abs=1e-4),
                                          "min": 1.67, "max": 3.13, "last": 1.67}
        rate = stats["acceptance_rate"]
        assert rate["mean"] == pytest.approx(((3.13 + 3.13 + 1.67) / 3 - 1) / 3, abs=1e-3)
        assert rate["last"] == pytest.approx(0.67 / 3, abs=1e-3)
        assert rate["num_draft_tokens"] == 4 and "(accept_length - 1)" in rate["formula"]
        assert stats["logged_accept_rate"]["current"]["count"] == 3
        assert stats["logged_accept_rate"]["current"]["last"] == pytest.approx(0.13)
        assert "definition" in stats["logged_accept_rate"]["current"]
        assert stats["gen_throughput"]["max"] == pytest.approx(1447.08)
        assert stats["gen_throughput"]["last"] == pytest.approx(1447.08)
        assert stats["gen_throughput"]["median"] == pytest.approx((155.34 + 183.10) / 2)
        assert stats["eras"] == {"current": 3, "mid": 1}
        assert stats["hybrid_lines"] == 2
        assert stats["ranks"] == [0, 1]
        assert stats["cuda_graph"] == {"true": 3, "false": 1}
        assert stats["ready_seen"] is True
        assert stats["ready"]["line_number"] == 2
        assert stats["ready"]["timestamp"] == "2026-07-30 13:34:58"
        # The previous run's traceback lies before the offset and must not be counted.
        assert stats["error_total"] == 0
        assert stats["lines_read"] == len(current_run)
        assert stats["offset"] == offset
        assert stats["resume_offset"] == path.stat().st_size

    def test_errors_bounded_with_line_numbers(self, tmp_path):
        lines = [CURRENT_NO_SPEC] + [SCHEDULER_EXCEPTION, RUNTIME_OOM_LINE] * 15 + [HYBRID_OOM_TEXT]
        path = _write(tmp_path, lines)
        stats = _stats(path, max_errors=5)
        assert len(stats["errors"]) == 5
        assert stats["error_total"] == 31
        assert stats["error_counts"] == {"traceback": 15, "cuda_oom": 15, "oom_hybrid": 1}
        first = stats["errors"][0]
        assert first["line_number"] == 2 and first["kind"] == "traceback"
        assert first["offset"] == len(CURRENT_NO_SPEC) + 1
        assert first["line"] == SCHEDULER_EXCEPTION

    def test_no_decode_lines(self, tmp_path):
        path = _write(tmp_path, [READY_LINE, ACCESS_LINE])
        stats = _stats(path)
        assert stats["decode_lines"] == 0
        assert stats["accept_length"] is None
        assert stats["acceptance_rate"] is None
        assert stats["gen_throughput"] is None
        assert stats["running_req"] is None
        assert stats["ready_seen"] is True

    def test_explicit_draft_tokens(self, tmp_path):
        path = _write(tmp_path, [CURRENT_HYBRID])
        stats = _stats(path, num_steps=5, num_draft_tokens=6)
        assert stats["acceptance_rate"]["mean"] == pytest.approx(2.13 / 5, abs=1e-3)


# Absurd values in an otherwise verbatim line: CURRENT_HYBRID (pull/30047) with its "accept len: 3.13" replaced. SGLang
# prints %.2f, so none of these comes from SGLang; a float() of the old parser made "1e309" and a long digit string
# Infinity and read "1e309" as 1.0.
ABSURD_ACCEPT_LENGTHS = ["inf", "nan", "1e309", "-1.00", "9" * 400, "2.83e0", "", "0x10"]


def _with_accept_length(value):
    return CURRENT_HYBRID.replace("accept len: 3.13", "accept len: %s" % value)


class TestStrictNumbers:
    @pytest.mark.parametrize("value", ABSURD_ACCEPT_LENGTHS)
    def test_a_value_sglang_does_not_print_makes_the_line_malformed(self, value):
        record = sglang_log.parse_decode_line(_with_accept_length(value))
        assert record["accept_length"] is None
        assert record["malformed"] == {"accept_length": value[:40]}

    @pytest.mark.parametrize("line", [OLD_DP_TP, OLD_LARGEST_LEN, OLD_IDLE, OLD_WITH_RATE, MID_TRAILING_COMMA, CURRENT_HYBRID,
                                      CURRENT_DENSE, CURRENT_TP_EP, CURRENT_NO_SPEC, SYNTHETIC_MS, OLD_NO_PREFIX])
    def test_every_verbatim_line_is_sound(self, line):
        assert sglang_log.parse_decode_line(line)["malformed"] == {}

    def test_absurd_throughput_and_counts_too(self):
        assert sglang_log.parse_decode_line(CURRENT_HYBRID.replace("155.34", "inf"))["malformed"] == {"gen_throughput": "inf"}
        assert sglang_log.parse_decode_line(CURRENT_HYBRID.replace("#queue-req: 0", "#queue-req: -3"))["malformed"] == {
            "queue_req": "-3"}

    def test_block_accept_len_is_not_the_accept_length(self):
        # 0.5.23's metrics_reporter may print "block accept len:" after "accept len:" (DSpark cap-accept mode).
        record = sglang_log.parse_decode_line(CURRENT_HYBRID.replace("accept rate: 0.71, ", "accept rate: 0.71, block accept len: 9.50, "))
        assert record["accept_length"] == pytest.approx(3.13) and record["malformed"] == {}

    def test_malformed_lines_are_counted_reported_and_kept_out_of_the_stats(self, tmp_path):
        lines = [CURRENT_HYBRID] + [_with_accept_length(value) for value in ABSURD_ACCEPT_LENGTHS] + [CURRENT_DENSE]
        path = _write(tmp_path, lines)
        stats = _stats(path, max_errors=3)
        assert stats["decode_lines"] == 2
        assert stats["accept_length"] == {"mean": pytest.approx((3.13 + 1.67) / 2), "min": 1.67, "max": 3.13, "last": 1.67}
        assert stats["malformed_lines"] == len(ABSURD_ACCEPT_LENGTHS)
        assert [item["line_number"] for item in stats["malformed"]] == [2, 3, 4]
        assert stats["malformed"][0]["fields"] == {"accept_length": "inf"}
        assert stats["malformed"][0]["offset"] == len(CURRENT_HYBRID) + 1
        # Nothing non-finite anywhere: strict JSON (no Infinity, no NaN) accepts the whole result.
        json.dumps(stats, allow_nan=False)

    def test_a_half_written_decode_line_is_not_counted(self, tmp_path):
        path = _write(tmp_path, [CURRENT_HYBRID, CURRENT_DENSE[:80]], newline_at_end=False)
        stats = _stats(path)
        assert stats["decode_lines"] == 1 and stats["lines_read"] == 1
        assert stats["resume_offset"] == len(CURRENT_HYBRID) + 1


class TestImpossibleAcceptLength:
    def test_an_accept_length_above_the_draft_tokens_is_reported_with_its_line(self, tmp_path):
        # Verbatim lines (accept len 2.90 and 2.86) read with 1 step, so 2 draft tokens: more than 2 tokens per verify pass
        # cannot be accepted, so these lines cannot come from a server with these settings.
        path = _write(tmp_path, [CURRENT_NO_SPEC, OLD_DP_TP, OLD_DP6_TP6, OLD_IDLE])
        stats = _stats(path, num_steps=1)
        assert stats["impossible_accept_length"] == {"value": 2.90, "line_number": 2, "offset": len(CURRENT_NO_SPEC) + 1,
                                                     "bound": 2, "lines": 2}
        assert _stats(path, num_steps=3)["impossible_accept_length"] is None

    def test_the_bound_itself_is_possible(self, tmp_path):
        path = _write(tmp_path, [CURRENT_HYBRID.replace("accept len: 3.13", "accept len: 4.00")])
        assert _stats(path, num_steps=3)["impossible_accept_length"] is None
        assert _stats(path, num_steps=2)["impossible_accept_length"]["bound"] == 3


class TestQuotedLines:
    def test_an_error_line_is_quoted_with_its_secrets_masked(self, tmp_path):
        # An exception whose text carries the server's arguments (SGLang's repr prints api_key in clear).
        line = "ValueError: bad arguments ServerArgs(model_path='/models/q', api_key='sk-9f8e7d6c5b4a', port=30000)"
        path = _write(tmp_path, [line])
        stats = _stats(path)
        assert stats["errors"][0]["line"] == line.replace("sk-9f8e7d6c5b4a", "********")
        assert "sk-9f8e7d6c5b4a" not in json.dumps(stats)
