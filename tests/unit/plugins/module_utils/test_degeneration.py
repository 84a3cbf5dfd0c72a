# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests for the degeneration metrics, the verdict thresholds and the diagnosis."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import degeneration
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets

# The incident's reasoning loop: the phrase is from /work/shared/reference/sglang.md ("temperature 0.7 without the
# other card values produced a reasoning loop ("The user's question is 2+2" repeated)"); the repetition count and the
# opening sentence are ours.
INCIDENT_LOOP = "Okay, the user asks what 2+2 is. " + "The user's question is 2+2. " * 40

# Varied prose written for this test (no repetition by construction).
VARIED_PROSE = (
    "The harbour was quiet that morning. Fishing boats rocked gently against their moorings while gulls argued over "
    "scraps near the market stalls. An old man mended nets on the pier, his fingers moving with a speed that decades "
    "of practice had given them. Further along, children chased each other between stacked crates, their laughter "
    "echoing off the stone warehouses. By noon the tide would turn, and the boats would slip out one by one toward the "
    "grey horizon, leaving the village to the shopkeepers and the cats."
)

# Reasoning-style text with the natural repetition of a real answer (restating the question, "so", "2"), written for
# this test: must NOT be judged degenerate.
VARIED_REASONING = (
    "The user asks what 2+2 is. This is basic arithmetic: adding two and two gives four. Let me double-check by "
    "counting: one, two, then three, four. So the sum is 4. There is no trick in the wording, no unusual base or "
    "notation, so the plain answer is right. I should reply briefly, perhaps with the equation written out as "
    "2 + 2 = 4, and not over-explain something this simple."
)


class TestMetrics:
    def test_tokenize(self):
        assert degeneration.tokenize("The user's question is 2+2.") == ["the", "user", "'", "s", "question", "is", "2", "+", "2", "."]

    def test_longest_run_finds_the_loop(self):
        run = degeneration.longest_repeated_run(degeneration.tokenize(INCIDENT_LOOP))
        assert run["n"] == 10
        assert run["repeats"] == 40
        assert run["tokens_covered"] == 400
        assert run["fraction"] > 0.95
        assert "question is 2 + 2" in run["ngram"]

    def test_longest_run_exact_small_case(self):
        tokens = "x a b c a b c a b c y".split()
        assert degeneration.longest_repeated_run(tokens) == {
            "n": 3, "repeats": 3, "tokens_covered": 9, "fraction": round(9 / 11.0, 4), "ngram": "a b c"}

    def test_smallest_period_wins(self):
        tokens = ["a", "b"] * 8
        run = degeneration.longest_repeated_run(tokens)
        assert (run["n"], run["repeats"]) == (2, 8)

    def test_no_repeat(self):
        run = degeneration.longest_repeated_run(list("abcdefg"))
        assert run["repeats"] == 1 and run["tokens_covered"] == 0

    def test_distinct(self):
        assert degeneration.distinct_n(["a", "a", "a", "a"], 1) == 0.25
        assert degeneration.distinct_n(["a", "b", "a", "b"], 2) == pytest.approx(2 / 3.0, abs=1e-4)
        assert degeneration.distinct_n(["a"], 2) is None

    def test_compression_ratio(self):
        assert degeneration.compression_ratio("") is None
        assert degeneration.compression_ratio(INCIDENT_LOOP) < 0.1
        assert degeneration.compression_ratio(VARIED_PROSE) > 0.5


class TestVerdict:
    def test_incident_loop_is_degenerate_on_every_signal(self):
        metrics = degeneration.measure(INCIDENT_LOOP)
        assert metrics["degenerate"] is True
        assert len(metrics["reasons"]) == 3
        assert metrics["distinct_2"] < 0.1

    @pytest.mark.parametrize("text", [VARIED_PROSE, VARIED_REASONING, VARIED_PROSE + " " + VARIED_REASONING])
    def test_varied_text_is_healthy(self, text):
        metrics = degeneration.measure(text)
        assert metrics["degenerate"] is False, metrics["reasons"]
        assert metrics["distinct_2"] > 0.8

    def test_short_text_is_never_judged(self):
        metrics = degeneration.measure("4. 4. 4. 4.")
        assert metrics["tokens"] < degeneration.MIN_TOKENS
        assert metrics["degenerate"] is False

    def test_single_token_loop(self):
        metrics = degeneration.measure(" ".join(["wait"] * 30))
        assert metrics["degenerate"] is True
        assert "repeats 30 times" in metrics["reasons"][0]

    def test_run_threshold_boundaries(self):
        # Three repeats of a sentence inside varied text stay below MIN_REPEATS: healthy.
        three = VARIED_PROSE + " The answer is four. The answer is four. The answer is four."
        assert degeneration.measure(three)["degenerate"] is False
        # A loop that ends the text after a healthy start: 12 repeats cover more than 30 %.
        looping_tail = VARIED_PROSE + " " + "Let me check again. " * 12
        metrics = degeneration.measure(looping_tail)
        assert metrics["longest_run"]["repeats"] == 12
        assert metrics["degenerate"] is True

    def test_long_period_loop_caught_by_distinct_and_compression(self):
        # A 150-token paragraph (longer than MAX_NGRAM) repeated: the run metric cannot see it, the others do.
        paragraph = " ".join("w%d" % index for index in range(150)) + ". "
        metrics = degeneration.measure(paragraph * 6)
        assert metrics["longest_run"]["repeats"] < degeneration.MIN_REPEATS
        assert metrics["degenerate"] is True
        assert any("compresses" in reason for reason in metrics["reasons"])


STATS_HIGH = {"decode_lines": 10, "accept_length": {"mean": 3.9}, "acceptance_rate": {"mean": 0.9667, "num_draft_tokens": 4}}
STATS_LOW = {"decode_lines": 10, "accept_length": {"mean": 1.31}, "acceptance_rate": {"mean": 0.1033, "num_draft_tokens": 4}}
STATS_OK = {"decode_lines": 10, "accept_length": {"mean": 2.83}, "acceptance_rate": {"mean": 0.61, "num_draft_tokens": 4}}


class TestDiagnose:
    def test_sampling_loop(self):
        result = degeneration.diagnose(True, STATS_HIGH)
        assert result["verdict"] == degeneration.VERDICT_SAMPLING_LOOP == "sampling loop"
        assert "check temperature/presence_penalty against the model card" in result["message"]
        assert "not MTP" in result["message"]
        assert result["acceptance_rate"] == pytest.approx(0.9667)

    def test_draft_path(self):
        result = degeneration.diagnose(False, STATS_LOW)
        assert result["verdict"] == "draft path"
        assert "accept length 1.31 of 4 draft tokens), below 0.33" in result["message"]
        assert "not sampling" in result["message"]

    def test_healthy(self):
        assert degeneration.diagnose(False, STATS_OK)["verdict"] == "healthy"
        assert degeneration.diagnose(False, None)["verdict"] == "healthy"

    def test_degenerate_without_stats(self):
        for stats in (None, {}, {"decode_lines": 0, "accept_length": None, "acceptance_rate": None}):
            result = degeneration.diagnose(True, stats)
            assert result["verdict"] == "degenerate output (no speculative stats to separate causes)"

    def test_degenerate_with_middling_acceptance(self):
        result = degeneration.diagnose(True, STATS_OK)
        assert result["verdict"] == degeneration.VERDICT_DEGENERATE_UNCONFIRMED

    def test_rate_recomputed_from_accept_length_when_missing(self):
        stats = {"accept_length": {"mean": 3.85}, "num_steps": 3}
        result = degeneration.diagnose(True, stats)
        assert result["verdict"] == "sampling loop"
        assert result["acceptance_rate"] == pytest.approx(0.95)
        assert result["num_draft_tokens"] == 4

    def test_thresholds_are_boundaries(self):
        at_high = {"acceptance_rate": {"mean": degeneration.HIGH_ACCEPTANCE_RATE}}
        below_high = {"acceptance_rate": {"mean": degeneration.HIGH_ACCEPTANCE_RATE - 0.01}}
        assert degeneration.diagnose(True, at_high)["verdict"] == "sampling loop"
        assert degeneration.diagnose(True, below_high)["verdict"] != "sampling loop"
        at_low = {"acceptance_rate": {"mean": degeneration.LOW_ACCEPTANCE_RATE}}
        below_low = {"acceptance_rate": {"mean": degeneration.LOW_ACCEPTANCE_RATE - 0.01}}
        assert degeneration.diagnose(False, at_low)["verdict"] == "healthy"
        assert degeneration.diagnose(False, below_low)["verdict"] == "draft path"


class TestPresets:
    def test_card_values(self):
        assert sampling_presets.get_preset("thinking_general")["sampling"] == {
            "temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
        assert sampling_presets.get_preset("thinking_coding")["sampling"] == {
            "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
        non_thinking = sampling_presets.get_preset("non_thinking")
        assert non_thinking["sampling"] == {
            "temperature": 0.7, "top_p": 0.80, "top_k": 20, "min_p": 0.0, "presence_penalty": 1.5, "repetition_penalty": 1.0}
        assert non_thinking["chat_template_kwargs"] == {"enable_thinking": False}

    def test_copies_are_independent(self):
        preset = sampling_presets.get_preset("thinking_general")
        preset["sampling"]["temperature"] = 0.1
        assert sampling_presets.PRESETS["thinking_general"]["sampling"]["temperature"] == 1.0

    def test_overrides_and_removal(self):
        sampling, kwargs = sampling_presets.request_sampling("thinking_general", {"temperature": 0.7, "presence_penalty": None, "seed": 1})
        assert sampling["temperature"] == 0.7 and "presence_penalty" not in sampling and sampling["seed"] == 1
        assert kwargs is None
        differences = sampling_presets.differences_from_preset(sampling, "thinking_general")
        assert differences == {"temperature": {"sent": 0.7, "card": 1.0}, "presence_penalty": {"sent": None, "card": 0.0}}

    def test_unknown_mode(self):
        with pytest.raises(ValueError):
            sampling_presets.get_preset("greedy")
