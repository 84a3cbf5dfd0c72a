# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verdict as exposition text: escaping, no NaN for unknown values, one HELP/TYPE per family, and promtool's
own check of what the renderer writes."""

from __future__ import annotations

import math
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.verdict_metrics import (
    Family,
    escape_help,
    escape_label_value,
    format_value,
    render_families,
    render_verdict,
    textfile_name,
    verdict_families,
)
from ansible_collections.llmops.serving.tests.support.promtool import check_metrics

DEPLOYMENT_ID = "3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5"
WRITTEN_AT = 1764620000.25

# The keys summary.json.j2 renders, with values of the types the modules return.
PASSED = {
    "host": "ct-101",
    "instance": "qwen36",
    "unit": "sglang-qwen36.service",
    "status": "passed",
    "failed_step": None,
    "message": None,
    "deployment_id": DEPLOYMENT_ID,
    "invocation_id": "0123456789abcdef0123456789abcdef",
    "main_pid": 4242,
    "log_file": "/var/log/llmops-serving/qwen36/current.log",
    "log_offset": 1520,
    "ready_after_seconds": 41.5,
    "ready_noticed_after_line_seconds": 0.12,
    "decode_lines": 12,
    "accept_length": {"mean": 2.83, "min": 2.4, "max": 3.1, "last": 2.83},
    "acceptance_rate": {"mean": 0.61, "min": 0.4667, "max": 0.7, "last": 0.61,
                        "formula": "(accept_length - 1) / (num_draft_tokens - 1)", "num_steps": 3, "num_draft_tokens": 4},
    "gen_throughput": {"mean": 90.1, "median": 93.6, "max": 95.0, "last": 93.65},
    "probe_verdict": "healthy",
    "probe_diagnosis": "the output is healthy and acceptance is 0.61 (accept length 2.83 of 4 draft tokens)",
    "degenerate_samples": 0,
    "sampling": {"temperature": 1.0},
    "sampling_mode": "thinking_general",
}

FAILED_EARLY = dict(
    PASSED, status="failed", failed_step="Wait for the current invocation to be ready",
    message="the unit exited during startup", ready_after_seconds=None, ready_noticed_after_line_seconds=None,
    decode_lines=None, accept_length=None, acceptance_rate=None, gen_throughput=None, probe_verdict=None,
    probe_diagnosis=None, degenerate_samples=None, invocation_id=None,
)


def samples(text):
    """{(name, frozenset of label pairs): value} of the sample lines (label values without escapes only)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r'^([a-z_:]+)(?:\{(.*)\})? (\S+)$', line)
        assert match, line
        labels = frozenset(re.findall(r'([a-z_]+)="([^"\\]*)"', match.group(2) or ""))
        found[(match.group(1), labels)] = match.group(3)
    return found


def value(text, name, **labels):
    wanted = dict({"sglang_instance": "qwen36", "deployment_id": DEPLOYMENT_ID}, **labels)
    hits = [v for (n, pairs), v in samples(text).items() if n == name and dict(pairs).items() >= wanted.items()]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


@pytest.mark.parametrize("raw, escaped", [
    ("plain", "plain"),
    ('say "hi"', 'say \\"hi\\"'),
    ("C:\\models", "C:\\\\models"),
    ("two\nlines", "two\\nlines"),
    # The backslash is escaped first, so an escaped quote is not escaped twice.
    ('\\"\n', '\\\\\\"\\n'),
    ("ünïcode ✓", "ünïcode ✓"),
])
def test_label_values_escape_backslash_quote_and_newline(raw, escaped):
    assert escape_label_value(raw) == escaped


def test_help_text_escapes_backslash_and_newline_but_not_quotes():
    assert escape_help('a "b"\\c\nd') == 'a "b"\\\\c\\nd'


@pytest.mark.parametrize("raw, text", [
    (3, "3"), (0, "0"), (2.83, "2.83"), (1e-05, "1e-05"), (1764620000.25, "1764620000.25"),
    (None, None), (float("nan"), None), (float("inf"), None), (-math.inf, None), (True, None), ("2.5", None),
])
def test_unknown_values_have_no_text_instead_of_nan(raw, text):
    assert format_value(raw) == text


def test_families_without_samples_are_left_out_and_each_family_is_contiguous():
    first, empty, second = Family("a_first", "First."), Family("b_empty", "Empty."), Family("c_second", "Second.")
    first.add({"x": "1"}, 1)
    first.add({"x": "2"}, float("nan"))
    second.add({}, 2.5)
    empty.add({"x": "1"}, None)
    assert render_families([first, empty, second]) == (
        "# HELP a_first First.\n# TYPE a_first gauge\na_first{x=\"1\"} 1\n"
        "# HELP c_second Second.\n# TYPE c_second gauge\nc_second 2.5\n"
    )


@pytest.mark.parametrize("name", ["9starts_with_digit", "has-dash", ""])
def test_invalid_metric_names_are_refused(name):
    with pytest.raises(ValueError):
        Family(name, "x")


@pytest.mark.parametrize("label", ["__reserved", "has-dash", "9x"])
def test_invalid_label_names_are_refused(label):
    with pytest.raises(ValueError):
        Family("ok", "x").add({label: "v"}, 1)


def test_a_passed_verdict_carries_every_value_the_summary_has():
    text = render_verdict(PASSED, WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_info", status="passed", unit="sglang-qwen36.service",
                 invocation_id=PASSED["invocation_id"], probe_diagnosis="healthy", failed_step="",
                 sampling_mode="thinking_general") == "1"
    assert value(text, "llmops_sglang_verdict_passed") == "1"
    assert value(text, "llmops_sglang_verdict_timestamp_seconds") == "1764620000.25"
    assert value(text, "llmops_sglang_verdict_ready_seconds") == "41.5"
    assert value(text, "llmops_sglang_verdict_ready_notice_lag_seconds") == "0.12"
    assert value(text, "llmops_sglang_verdict_decode_log_lines") == "12"
    assert value(text, "llmops_sglang_verdict_accept_length", stat="mean") == "2.83"
    assert value(text, "llmops_sglang_verdict_accept_length", stat="min") == "2.4"
    assert value(text, "llmops_sglang_verdict_acceptance_ratio", stat="last") == "0.61"
    assert value(text, "llmops_sglang_verdict_generation_throughput_tokens_per_second", stat="median") == "93.6"
    assert value(text, "llmops_sglang_verdict_draft_tokens") == "4"
    assert value(text, "llmops_sglang_verdict_degenerate_samples") == "0"
    assert value(text, "llmops_sglang_verdict_probe_diagnosis", diagnosis="healthy") == "1"
    assert value(text, "llmops_sglang_verdict_probe_diagnosis", diagnosis="sampling loop") == "0"
    # The formula and the step count in the acceptance mapping are not statistics.
    assert value(text, "llmops_sglang_verdict_acceptance_ratio", stat="formula") is None
    assert value(text, "llmops_sglang_verdict_acceptance_ratio", stat="num_steps") is None
    assert "llmops_sglang_verification_deadline_timestamp_seconds" not in text


def test_a_failed_verdict_names_the_step_and_leaves_unknown_values_out():
    text = render_verdict(FAILED_EARLY, WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_passed") == "0"
    assert value(text, "llmops_sglang_verdict_info", status="failed", invocation_id="",
                 failed_step="Wait for the current invocation to be ready") == "1"
    for absent in ("ready_seconds", "accept_length", "acceptance_ratio", "probe_diagnosis", "degenerate_samples",
                   "generation_throughput_tokens_per_second", "decode_log_lines", "draft_tokens"):
        assert "llmops_sglang_verdict_%s" % absent not in text, absent
    assert "NaN" not in text


def test_nan_statistics_are_left_out_sample_by_sample():
    summary = dict(PASSED, accept_length={"mean": float("nan"), "last": 2.5}, gen_throughput=3.5)
    text = render_verdict(summary, WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_accept_length", stat="mean") is None
    assert value(text, "llmops_sglang_verdict_accept_length", stat="last") == "2.5"
    assert value(text, "llmops_sglang_verdict_generation_throughput_tokens_per_second", stat="value") == "3.5"
    assert "NaN" not in text


def test_a_pending_verification_has_a_deadline_and_no_outcome():
    pending = {"instance": "qwen36", "unit": "sglang-qwen36.service", "deployment_id": DEPLOYMENT_ID, "status": "pending"}
    text = render_verdict(pending, WRITTEN_AT, deadline=WRITTEN_AT + 1800)
    assert value(text, "llmops_sglang_verification_deadline_timestamp_seconds") == "1764621800.25"
    assert value(text, "llmops_sglang_verdict_info", status="pending") == "1"
    assert "llmops_sglang_verdict_passed" not in text
    with pytest.raises(ValueError, match="deadline"):
        render_verdict(pending, WRITTEN_AT)


def test_the_free_text_message_never_becomes_a_label():
    summary = dict(FAILED_EARLY, message="Authorization: Bearer sk-do-not-export")
    assert "sk-do-not-export" not in render_verdict(summary, WRITTEN_AT)


def test_an_unknown_probe_diagnosis_is_still_exported_beside_the_known_ones():
    text = render_verdict(dict(PASSED, probe_verdict="something new"), WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_probe_diagnosis", diagnosis="something new") == "1"
    assert value(text, "llmops_sglang_verdict_probe_diagnosis", diagnosis="healthy") == "0"


def test_plan_and_actual_match_label_for_label():
    summary = dict(PASSED, plan={"kv_cache_tokens": {"planned": 120000, "actual": 98304},
                                 "mamba_cache_slots": {"planned": 48}})
    text = render_verdict(summary, WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_planned", quantity="kv_cache_tokens") == "120000"
    assert value(text, "llmops_sglang_verdict_actual", quantity="kv_cache_tokens") == "98304"
    assert value(text, "llmops_sglang_verdict_planned", quantity="mamba_cache_slots") == "48"
    assert value(text, "llmops_sglang_verdict_actual", quantity="mamba_cache_slots") is None
    with pytest.raises(ValueError, match="plan"):
        render_verdict(dict(PASSED, plan=[1, 2]), WRITTEN_AT)


@pytest.mark.parametrize("summary, match", [
    (dict(PASSED, status="unknown"), "status"),
    (dict(PASSED, instance=None), "instance"),
])
def test_summaries_without_a_valid_status_or_instance_are_refused(summary, match):
    with pytest.raises(ValueError, match=match):
        verdict_families(summary, WRITTEN_AT)


def test_textfile_name_ends_in_prom():
    assert textfile_name("qwen36") == "llmops_sglang_verdict_qwen36.prom"


@pytest.mark.parametrize("summary, deadline", [
    (PASSED, None),
    (FAILED_EARLY, None),
    (dict(PASSED, plan={"kv_cache_tokens": {"planned": 120000, "actual": 98304}}), None),
    ({"instance": "qwen36", "deployment_id": DEPLOYMENT_ID, "status": "pending"}, WRITTEN_AT + 60),
    # Label values that need every escape the format has, and a failed step quoted from a task name.
    (dict(FAILED_EARLY, instance='we"ird\\name\nx', failed_step='Probe "the" output\\n\nagain', sampling_mode="ü ✓"), None),
])
def test_promtool_accepts_what_the_renderer_writes(summary, deadline):
    status, said = check_metrics(render_verdict(summary, WRITTEN_AT, deadline))
    assert status == 0, said
    assert said.strip() == "", said


def test_promtool_rejects_an_unescaped_quote_so_the_check_can_fail():
    status, said = check_metrics('# HELP x X.\n# TYPE x gauge\nx{a="say "hi""} 1\n')
    assert status != 0, said


def test_what_the_server_serves_of_what_was_asked_is_a_metric_per_quantity():
    serves = {"running_requests": 3, "requested_running_requests": 16, "kv_tokens": 170687, "context_length": 262144,
              "full_context_requests": 0, "source": "startup log"}
    text = render_verdict(dict(PASSED, serves=serves), WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_serves", quantity="running_requests") == "3"
    assert value(text, "llmops_sglang_verdict_serves", quantity="requested_running_requests") == "16"
    assert value(text, "llmops_sglang_verdict_serves", quantity="kv_cache_tokens") == "170687"
    assert value(text, "llmops_sglang_verdict_serves", quantity="context_length_tokens") == "262144"
    assert value(text, "llmops_sglang_verdict_serves", quantity="full_context_requests") == "0"
    # The source is text, not a sample; a summary without the figures has no family at all.
    assert 'quantity="source"' not in text
    assert "llmops_sglang_verdict_serves" not in render_verdict(PASSED, WRITTEN_AT)
    check_metrics(text)
    with pytest.raises(ValueError, match="serves must be a mapping"):
        render_verdict(dict(PASSED, serves=[3, 16]), WRITTEN_AT)


CANARIES = [
    {"name": "greedy_reference", "passed": True, "message": "the first 64 tokens of 4 prompts equal the reference"},
    {"name": "speculative_lossless", "passed": False, "message": "prompt 2 differs at token 17: 'Paris' vs 'Lyon'"},
    {"name": "tool_call", "passed": None, "message": "skipped: no tool-call parser configured"},
    {"name": "long_context_acceptance", "passed": True, "message": "accept length 2.71 at 32768 tokens, 2.9 short"},
    {"name": "soak", "passed": True, "message": "64 of 64 requests completed"},
]


def test_each_canary_that_ran_is_a_sample_and_a_skipped_one_is_left_out():
    text = render_verdict(dict(PASSED, canaries=CANARIES, canary_acceptance={"short": 2.9, "long": 1.3}), WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="greedy_reference") == "1"
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="speculative_lossless") == "0"
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="long_context_acceptance") == "1"
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="soak") == "1"
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="tool_call") is None
    assert 'canary="tool_call"' not in text
    assert value(text, "llmops_sglang_verdict_canary_accept_length", context="short") == "2.9"
    assert value(text, "llmops_sglang_verdict_canary_accept_length", context="long") == "1.3"
    # The free-text messages never become labels.
    assert "Lyon" not in text and "tool-call parser" not in text
    status, said = check_metrics(text)
    assert status == 0 and said.strip() == "", said


def test_a_summary_without_canaries_or_with_unknown_accept_lengths_has_no_canary_family():
    for summary in (PASSED, dict(PASSED, canaries=None, canary_acceptance=None),
                    dict(PASSED, canaries=[], canary_acceptance={"short": None, "long": float("nan")}),
                    dict(PASSED, canaries=[{"name": "soak", "passed": None, "message": "skipped"}])):
        text = render_verdict(summary, WRITTEN_AT)
        assert "llmops_sglang_verdict_canary" not in text, summary
    text = render_verdict(dict(PASSED, canary_acceptance={"short": 3.1, "long": None}), WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_canary_accept_length", context="short") == "3.1"
    assert value(text, "llmops_sglang_verdict_canary_accept_length", context="long") is None


def test_a_failed_verdict_keeps_the_canary_that_failed_it():
    summary = dict(FAILED_EARLY, failed_step="Canaries", canaries=[{"name": "soak", "passed": False, "message": "hung"}])
    text = render_verdict(summary, WRITTEN_AT)
    assert value(text, "llmops_sglang_verdict_passed") == "0"
    assert value(text, "llmops_sglang_verdict_canary_passed", canary="soak") == "0"


@pytest.mark.parametrize("canaries, acceptance, match", [
    ([{"name": "greedy", "passed": True}], None, "unknown canary 'greedy'"),
    ([{"passed": True}], None, "unknown canary None"),
    ([{"name": ["soak"], "passed": True}], None, "unknown canary"),
    ([{"name": "soak", "passed": "true"}], None, "canary 'soak': passed must be true, false or null"),
    ([{"name": "soak", "passed": 1}], None, "passed must be true, false or null"),
    ([{"name": "soak", "passed": True}, {"name": "soak", "passed": False}], None, "reported twice"),
    (["soak"], None, "a canary must be a mapping"),
    ({"soak": True}, None, "canaries must be a list"),
    ([], [2.9, 1.3], "canary_acceptance must be a mapping"),
])
def test_canary_results_that_break_the_contract_are_refused_not_rendered(canaries, acceptance, match):
    with pytest.raises(ValueError, match=match):
        render_verdict(dict(PASSED, canaries=canaries, canary_acceptance=acceptance), WRITTEN_AT)


def test_canary_label_values_go_through_the_escaping_helper(monkeypatch):
    # The names are a closed set without characters to escape; should the set grow, they are escaped like any value.
    from ansible_collections.llmops.serving.plugins.module_utils import verdict_metrics

    monkeypatch.setattr(verdict_metrics, "CANARY_NAMES", verdict_metrics.CANARY_NAMES + ('odd "name"\\x',))
    text = render_verdict(dict(PASSED, canaries=[{"name": 'odd "name"\\x', "passed": False}]), WRITTEN_AT)
    assert 'canary="odd \\"name\\"\\\\x"} 0' in text
    assert check_metrics(text)[0] == 0


def test_the_canary_names_are_those_sglang_canary_runs():
    # Two lists kept apart (the renderer does not import the canaries' HTTP code); this keeps them equal.
    from ansible_collections.llmops.serving.plugins.module_utils import canary, verdict_metrics

    assert verdict_metrics.CANARY_NAMES == canary.CANARIES
