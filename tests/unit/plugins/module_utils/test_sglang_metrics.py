# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_metrics on the /metrics samples in data/sglang_metrics (verbatim; see its README.md) and on hostile text."""

from __future__ import annotations

import math
import pathlib
import time

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import sglang_metrics

DATA = pathlib.Path(__file__).parent / "data" / "sglang_metrics"
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"


def read(name):
    # newline="" keeps the bytes' line endings as they are.
    with open(DATA / name, encoding="utf-8", newline="") as handle:
        return handle.read()


# --------------------------------------------------------------------------- the fixtures

def test_pr4444_an_idle_server():
    text = read("pr4444-metrics-result.txt")
    assert sglang_metrics.gauge_values(text, RUNNING) == [0.0]
    assert sglang_metrics.gauge_values(text, QUEUED) == []
    assert sglang_metrics.gauge_values(text, "sglang:num_used_tokens") == [0.0]
    assert sglang_metrics.in_flight(text) == {"running": 0, "queued": 0}


def test_pr7944_counters_with_other_names_are_not_counted():
    text = read("pr7944-metrics.txt")
    assert sglang_metrics.gauge_values(text, RUNNING) == [0.0]
    assert sglang_metrics.gauge_values(text, "sglang:num_requests_total") == [217.0]
    assert sglang_metrics.gauge_values(text, "sglang:num_aborted_requests_total") == [157.0]
    assert sglang_metrics.in_flight(text) == {"running": 0, "queued": 0}


def test_simulator_output_with_hostile_extra_labels():
    text = read("simulator-busy-extra-labels.txt")
    assert sglang_metrics.gauge_values(text, RUNNING) == [3.0]
    assert sglang_metrics.gauge_values(text, QUEUED) == [5.0]
    assert sglang_metrics.gauge_values(text, "sglang:token_usage") == [0.23]
    assert sglang_metrics.in_flight(text) == {"running": 3, "queued": 5}


@pytest.mark.parametrize("name", ["pr4444-metrics-result.txt", "pr7944-metrics.txt", "simulator-busy-extra-labels.txt"])
def test_every_fixture_is_plain_lf_text_with_the_running_gauge(name):
    text = read(name)
    assert "\r" not in text and text.endswith("\n")
    assert "# TYPE %s gauge" % RUNNING in text


# --------------------------------------------------------------------------- several series

def test_series_are_summed():
    text = "\n".join([
        '# TYPE sglang:num_running_reqs gauge',
        'sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 2.0',
        'sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="1"} 2.0',
        'sglang:num_running_reqs{engine_type="prefill",model_name="m",tp_rank="0"} 1',
        'sglang:num_queue_reqs{tp_rank="0"} 7.0',
        'sglang:num_queue_reqs{tp_rank="1"} 0.0',
    ])
    assert sglang_metrics.gauge_values(text, RUNNING) == [2.0, 2.0, 1.0]
    assert sglang_metrics.in_flight(text) == {"running": 5, "queued": 7}


def test_queue_high_while_nothing_runs_is_reported_as_it_is():
    # sgl-project/sglang issue #24140: running 0 while the queue is long. Not idle.
    text = "sglang:num_running_reqs{a=\"b\"} 0.0\nsglang:num_queue_reqs{a=\"b\"} 128.0\n"
    assert sglang_metrics.in_flight(text) == {"running": 0, "queued": 128}


def test_no_labels_blanks_timestamp_and_trailing_comma():
    text = ("sglang:num_running_reqs 1\n"
            "sglang:num_running_reqs\t{ a = \"x\" , b=\"y\", }\t2.0  1712345678901\n"
            "  sglang:num_running_reqs{} 3e0\n"
            "sglang:num_running_reqs {a=\"z\"} 4\n")
    assert sglang_metrics.gauge_values(text, RUNNING) == [1.0, 2.0, 3.0, 4.0]


def test_nan_and_infinities_are_floats():
    text = ("sglang:token_usage{a=\"1\"} NaN\nsglang:token_usage{a=\"2\"} +Inf\nsglang:token_usage{a=\"3\"} -Inf\n"
            "sglang:token_usage{a=\"4\"} 1.5e-3\n")
    values = sglang_metrics.gauge_values(text, "sglang:token_usage")
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 0.0015]


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-1", "0.5"])
def test_a_value_that_is_not_a_count_of_requests_is_refused(value):
    with pytest.raises(ValueError, match="not a count of requests"):
        sglang_metrics.in_flight("sglang:num_running_reqs %s\nsglang:num_queue_reqs 0\n" % value)


# --------------------------------------------------------------------------- hostile label values

@pytest.mark.parametrize("value", [
    r'}',
    r'a,b',
    r'} 99',
    r'x\"} 99',
    r'\\',
    r'\\\"',
    r'line1\nline2',
    r'sglang:num_running_reqs{a=\"b\"} 99',
    r'={,}=',
    r'# not a comment',
    '\u2028 \x0b \x1c \u0085 (what str.splitlines() would split at)',
])
def test_label_values_with_special_characters(value):
    text = ("# HELP sglang:num_running_reqs The number of running requests.\n"
            "sglang:num_running_reqs{engine_type=\"unified\",model_name=\"%s\",tp_rank=\"0\"} 1.0\n"
            "sglang:num_queue_reqs{model_name=\"%s\"} 2.0\n" % (value, value))
    assert sglang_metrics.gauge_values(text, RUNNING) == [1.0]
    assert sglang_metrics.in_flight(text) == {"running": 1, "queued": 2}


def test_an_other_metrics_label_value_that_looks_like_a_sample_is_not_one():
    text = 'sglang:token_usage{note="\\nsglang:num_running_reqs 50"} 0.1\nsglang:num_running_reqs 0\n'
    assert sglang_metrics.gauge_values(text, RUNNING) == [0.0]


@pytest.mark.parametrize("line", [
    'sglang:num_running_reqs{a="unterminated} 1',
    'sglang:num_running_reqs{a="x"} 1"} 2',
    'sglang:num_running_reqs{a="bad \\t escape"} 1',
    'sglang:num_running_reqs{a="x" b="y"} 1',
    'sglang:num_running_reqs{a=x} 1',
    'sglang:num_running_reqs{="x"} 1',
])
def test_malformed_label_sets_raise_with_the_line_number(line):
    text = "# TYPE sglang:num_running_reqs gauge\n\n%s\n" % line
    with pytest.raises(ValueError, match="^line 3, a sample of sglang:num_running_reqs: "):
        sglang_metrics.gauge_values(text, RUNNING)


# --------------------------------------------------------------------------- names

def test_a_name_that_starts_with_the_name_asked_for_is_another_metric():
    text = ("sglang:num_running_reqs_total{a=\"b\"} 50.0\n"
            "sglang:num_running_reqs:sum 7\n"
            "sglang:num_running_reqsX 8\n"
            "xsglang:num_running_reqs 9\n"
            "sglang:num_running_reqs{a=\"b\"} 1.0\n")
    assert sglang_metrics.gauge_values(text, RUNNING) == [1.0]
    assert sglang_metrics.gauge_values(text, "sglang:num_running_reqs_total") == [50.0]


def test_comments_and_blank_lines_are_skipped_even_when_they_name_the_metric():
    text = ("# HELP sglang:num_running_reqs The number of running requests.\n"
            "#sglang:num_running_reqs 99\n"
            "   # sglang:num_running_reqs 98\n"
            "\n   \n\t\n"
            "sglang:num_running_reqs 1\n")
    assert sglang_metrics.gauge_values(text, RUNNING) == [1.0]


def test_a_malformed_line_of_another_metric_does_not_matter():
    text = "sglang:token_usage{a=\"b 0.0\ngarbage }{ \"\nsglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"
    assert sglang_metrics.in_flight(text) == {"running": 0, "queued": 0}


# --------------------------------------------------------------------------- line endings, truncation, garbage

def test_crlf_line_endings():
    text = read("simulator-busy-extra-labels.txt").replace("\n", "\r\n")
    assert sglang_metrics.in_flight(text) == {"running": 3, "queued": 5}
    assert sglang_metrics.gauge_values(read("pr7944-metrics.txt").replace("\n", "\r\n"), RUNNING) == [0.0]


def test_no_final_line_break():
    assert sglang_metrics.gauge_values("sglang:num_running_reqs{a=\"b\"} 4.0", RUNNING) == [4.0]


@pytest.mark.parametrize("cut", [
    'sglang:num_running_reqs{engine_type="unified",model_na',
    'sglang:num_running_reqs{engine_type="unified",model_name="/m"',
    'sglang:num_running_reqs{engine_type="unified",model_name="/m"}',
    'sglang:num_running_reqs{engine_type="unified",model_name="/m"} ',
    'sglang:num_running_reqs{engine_type="unified",model_name="/m"} 0.0e',
    'sglang:num_running_reqs',
])
def test_a_truncated_last_line_raises_with_its_number(cut):
    text = read("pr4444-metrics-result.txt") + cut
    with pytest.raises(ValueError, match="^line 10, a sample of sglang:num_running_reqs: "):
        sglang_metrics.in_flight(text)


@pytest.mark.parametrize("line", [
    "sglang:num_running_reqs one",
    "sglang:num_running_reqs 1_000",
    "sglang:num_running_reqs 0x10",
    "sglang:num_running_reqs 1 2 3",
    "sglang:num_running_reqs 1 12.5",
    "sglang:num_running_reqs\u00a01",
    "sglang:num_running_reqs 1\u20282",
    "sglang:num_running_reqs\"x\" 1",
])
def test_malformed_values_raise(line):
    with pytest.raises(ValueError, match="^line 2, "):
        sglang_metrics.gauge_values("sglang:num_queue_reqs 0\n" + line + "\n", RUNNING)


@pytest.mark.parametrize("text", [
    "",
    "\n\n",
    "<html><body>404 Not Found</body></html>",
    '{"detail": "Not Found"}',
    "\x00\xff\ufffd binary garbage \x1b[31m",
    "# TYPE sglang:num_running_reqs gauge\n# TYPE sglang:num_queue_reqs gauge\n",
    read("pr7944-metrics.txt").replace("sglang:num_running_reqs", "vllm:num_requests_running"),
])
def test_neither_gauge_says_to_enable_metrics(text):
    with pytest.raises(ValueError, match="--enable-metrics") as info:
        sglang_metrics.in_flight(text)
    assert "sglang_service_enable_metrics" in str(info.value)


def test_one_megabyte_of_unrelated_metrics_is_fast():
    filler = "".join('vllm:some_histogram_bucket{le="%d",model_name="m,}\\"x"} %d.0\n' % (i, i) for i in range(20000))
    assert len(filler) > 1_000_000
    text = filler + "sglang:num_running_reqs{a=\"b\"} 2\n" + filler + "sglang:num_queue_reqs 1\n"
    started = time.monotonic()
    assert sglang_metrics.in_flight(text) == {"running": 2, "queued": 1}
    assert time.monotonic() - started < 1.0


def test_one_megabyte_of_the_metric_itself_is_fast_too():
    text = "".join('sglang:num_running_reqs{tp_rank="%d",note="a\\"},b"} 0.0\n' % i for i in range(25000))
    assert len(text) > 1_000_000
    started = time.monotonic()
    assert sglang_metrics.in_flight(text) == {"running": 0, "queued": 0}
    assert time.monotonic() - started < 2.0
