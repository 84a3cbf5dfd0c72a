# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests for the spec_decode_stats module, run in-process on log files written by the test."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.modules import spec_decode_stats
from ansible_collections.llmops.serving.tests.unit.fakes import launcher_log_name, root_only_secret, secret_shown, within
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

# Verbatim decode lines; sources are named in tests/unit/plugins/module_utils/test_sglang_log.py.
# https://github.com/sgl-project/sglang/pull/30047
HYBRID_LINE = ("[2026-07-04 05:01:33 TP0] Decode batch, #running-req: 40, #full token: 350592, full token usage: 0.74, "
               "mamba num: 160, mamba usage: 0.80, accept len: 3.13, accept rate: 0.71, npu graph: True, "
               "gen throughput (token/s): 155.34, #queue-req: 0")
# https://github.com/sgl-project/sglang/issues/4417 (a low accept length, first line after idle)
LOW_ACCEPT_LINE = ("[2025-03-14 08:30:05 TP0] Decode batch. #running-req: 1, #token: 66, token usage: 0.00, "
                   "accept len: 1.80, gen throughput (token/s): 0.59, largest-len: 0, #queue-req: 0,")
# https://github.com/sgl-project/sglang/pull/30393
LOW_ACCEPT_DENSE = ("[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, "
                    "accept len: 1.67, accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, #transfer-req: 1, "
                    "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 183.10, #queue-req: 0")
# https://github.com/sgl-project/sglang/pull/22331 (no speculative decoding)
NO_SPEC_LINE = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
                "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0")
# https://github.com/sgl-project/sglang/issues/4289
NCCL_LINE = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
READY_LINE = "[2026-07-30 13:34:58] The server is fired up and ready to roll!"


def _log(tmp_path, lines):
    path = tmp_path / "sglang.log"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_reports_stats_without_thresholds(tmp_path):
    path = _log(tmp_path, [READY_LINE, HYBRID_LINE, HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path)})
    assert not failed
    assert result["changed"] is False
    assert result["decode_lines"] == 2
    assert result["accept_length"] == {"mean": 3.13, "min": 3.13, "max": 3.13, "last": 3.13}
    assert result["acceptance_rate"]["mean"] == pytest.approx(0.71, abs=0.001)
    assert result["logged_accept_rate"]["current"]["mean"] == pytest.approx(0.71)
    assert result["ready_seen"] is True
    assert result["diagnosis"] is None
    assert result["file_size"] == path.stat().st_size
    assert result["resume_offset"] == path.stat().st_size


def test_same_in_check_mode(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    normal, normal_failed = run_module(spec_decode_stats.main, {"path": str(path)})
    checked, failed = run_module(spec_decode_stats.main, {"path": str(path)}, check_mode=True)
    assert not failed and not normal_failed and checked == normal


def test_thresholds_pass(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5, "min_throughput": 100})
    assert not failed, result.get("msg")


def test_low_accept_length_names_the_draft_path(tmp_path):
    path = _log(tmp_path, [LOW_ACCEPT_DENSE, LOW_ACCEPT_DENSE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5})
    assert failed
    assert result["msg"].startswith("accept length 1.67 (of 4 draft tokens) is below 2.5: speculative drafts are being rejected")
    assert "the draft path (MTP head, --speculative-* flags, long context) is the suspect, not sampling" in result["msg"]
    assert result["diagnosis"] in result["msg"]
    assert result["decode_lines"] == 2


def test_no_decode_lines_after_offset(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE, READY_LINE])
    offset = len(HYBRID_LINE) + 1
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "offset": offset, "min_accept_length": 2.5})
    assert failed
    assert result["msg"].startswith("no decode lines after offset %d: the server has not generated anything yet (run a request first)" % offset)
    assert result["decode_lines"] == 0


def test_no_decode_lines_before_ready(tmp_path):
    path = _log(tmp_path, ["[2026-07-30 13:34:01] server_args={'model_path': 'Qwen/Qwen3.6-27B'}"])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5})
    assert failed and "the server is not ready yet" in result["msg"]


def test_no_decode_lines_in_an_empty_tail(tmp_path):
    path = _log(tmp_path, [READY_LINE])
    size = path.stat().st_size
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "offset": size, "min_accept_length": 2.5})
    assert failed and "nothing was logged after it" in result["msg"]


def test_no_decode_lines_with_errors_points_at_the_errors(tmp_path):
    # https://github.com/sgl-project/sglang/issues/4547 (traceback header and its last line)
    path = _log(tmp_path, ["Traceback (most recent call last):", "RuntimeError: CUDA error: out of memory"])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5})
    assert failed
    assert "the server logged errors and generated nothing" in result["msg"]
    # The exception line is quoted before the traceback header.
    assert result["msg"].index("line 2: RuntimeError: CUDA error: out of memory") < result["msg"].index("line 1: Traceback")


def test_no_decode_lines_reported_without_thresholds(tmp_path):
    path = _log(tmp_path, [READY_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path)})
    assert not failed and result["decode_lines"] == 0


def test_min_decode_lines(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_decode_lines": 3})
    assert failed and "only 1 decode lines after offset 0 (need 3)" in result["msg"]


def test_errors_are_quoted(tmp_path):
    path = _log(tmp_path, [READY_LINE, NCCL_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5})
    assert failed
    assert "Errors in the log after the offset: line 2: " + NCCL_LINE in result["msg"]
    assert result["error_counts"] == {"nccl": 1}
    assert result["errors"][0]["line_number"] == 2


def test_fail_on_errors(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE, NCCL_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path)})
    assert not failed and result["error_total"] == 1
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "fail_on_errors": True})
    assert failed and "1 error lines after offset 0" in result["msg"]


def test_speculative_decoding_off(tmp_path):
    path = _log(tmp_path, [NO_SPEC_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.0})
    assert failed
    assert "speculative decoding is not active" in result["msg"]


def test_low_throughput_uses_median(tmp_path):
    # One idle-artifact line (0.59 token/s) among healthy ones must not fail a 100 token/s floor.
    path = _log(tmp_path, [LOW_ACCEPT_LINE, HYBRID_LINE, HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_throughput": 100})
    assert not failed, result.get("msg")
    assert result["gen_throughput"]["median"] == pytest.approx(155.34)
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_throughput": 200})
    assert failed and "gen throughput 155.34 token/s (median of 3 decode lines) is below 200" in result["msg"]


def test_offset_beyond_end_means_recreated_log(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "offset": 10 ** 6})
    assert failed
    assert "truncated or re-created" in result["msg"]
    assert result["file_size"] == path.stat().st_size


def test_missing_file(tmp_path):
    result, failed = run_module(spec_decode_stats.main, {"path": str(tmp_path / "absent.log")})
    assert failed and "cannot read the log" in result["msg"]


def test_num_draft_tokens_option(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "num_steps": 5, "num_draft_tokens": 6})
    assert not failed
    assert result["acceptance_rate"]["mean"] == pytest.approx(2.13 / 5, abs=0.001)
    assert result["num_draft_tokens"] == 6


def test_bad_arguments(tmp_path):
    path = _log(tmp_path, [HYBRID_LINE])
    for args in ({"offset": -1}, {"num_steps": 0}, {"num_draft_tokens": 1}):
        args = dict(args, path=str(path))
        result, failed = run_module(spec_decode_stats.main, args)
        assert failed and result["msg"], args


def test_an_accept_length_above_the_draft_tokens_fails_naming_the_bound(tmp_path):
    # The verbatim 3.13 read for a server with 2 steps (3 draft tokens): impossible, even though it clears the threshold.
    path = _log(tmp_path, [HYBRID_LINE, LOW_ACCEPT_DENSE])
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "num_steps": 2, "min_accept_length": 1.5})
    assert failed
    assert result["msg"].startswith(
        "accept length 3.13 on line 1 (offset 0) is larger than num_draft_tokens=3, the most tokens one verify pass can emit")
    assert result["impossible_accept_length"] == {"value": 3.13, "line_number": 1, "offset": 0, "bound": 3, "lines": 1}
    # Without thresholds too: the numbers cannot be reported as this server's.
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "num_steps": 2})
    assert failed and "larger than num_draft_tokens=3" in result["msg"]
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "num_steps": 3, "min_accept_length": 1.5})
    assert not failed, result.get("msg")


ABSURD = ["inf", "nan", "1e309", "-1.00", "9" * 400]


def test_absurd_values_are_refused_as_malformed_and_never_become_infinity(tmp_path):
    lines = [HYBRID_LINE] + [HYBRID_LINE.replace("accept len: 3.13", "accept len: %s" % value) for value in ABSURD]
    path = _log(tmp_path, lines)
    with mock.patch.object(basic.AnsibleModule, "warn") as warn:
        result, failed = run_module(spec_decode_stats.main, {"path": str(path)})
    assert not failed, result.get("msg")
    json.dumps(result, allow_nan=False)  # strict JSON: no Infinity, no NaN anywhere
    assert result["decode_lines"] == 1 and result["accept_length"]["max"] == 3.13
    assert result["malformed_lines"] == len(ABSURD)
    assert [item["fields"]["accept_length"] for item in result["malformed"]] == [value[:40] for value in ABSURD]
    assert [call.args[0][:50] for call in warn.call_args_list] == ["5 decode lines carry values SGLang does not print "]
    # A gate does not pass on them.
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "min_accept_length": 2.5})
    assert failed
    assert "5 decode lines carry values SGLang does not print" in result["msg"]
    assert "(first: line 2: accept_length='inf')" in result["msg"]
    json.dumps(result, allow_nan=False)


def test_a_half_written_last_line_is_not_counted_until_it_is_complete(tmp_path):
    path = tmp_path / "sglang.log"
    path.write_text(HYBRID_LINE + "\n" + LOW_ACCEPT_DENSE[:70], encoding="utf-8")
    result, failed = run_module(spec_decode_stats.main, {"path": str(path)})
    assert not failed
    assert result["decode_lines"] == 1 and result["resume_offset"] == len(HYBRID_LINE) + 1
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(LOW_ACCEPT_DENSE[70:] + "\n")
    result, failed = run_module(spec_decode_stats.main, {"path": str(path), "offset": result["resume_offset"]})
    assert not failed and result["decode_lines"] == 1 and result["accept_length"]["last"] == 1.67


def test_a_fifo_or_a_link_out_of_the_directory_is_refused_without_blocking(tmp_path):
    logs = tmp_path / "log"
    logs.mkdir()
    fifo = logs / launcher_log_name("5" * 32)
    os.mkfifo(str(fifo))
    with within(10):
        result, failed = run_module(spec_decode_stats.main, {"path": str(fifo)})
    assert failed and result["msg"] == "cannot read the log: %s is a FIFO, not a log file; it is not read" % fifo
    secret = root_only_secret(tmp_path)
    os.symlink(secret, str(logs / "current.log"))
    result, failed = run_module(spec_decode_stats.main, {"path": str(logs / "current.log")})
    assert failed and "points outside the log directory to %s" % secret in result["msg"]
    assert not secret_shown(json.dumps(result))
