# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests for the degeneration metrics, the verdict thresholds and the diagnosis."""

from __future__ import annotations

import re
from pathlib import Path

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
        # A paragraph longer than MAX_NGRAM tokens repeated: the run metric cannot see it, the others do.
        paragraph = " ".join("w%d" % index for index in range(degeneration.MAX_NGRAM + 100)) + ". "
        metrics = degeneration.measure(paragraph * 6)
        assert metrics["longest_run"]["repeats"] < degeneration.MIN_REPEATS
        assert metrics["degenerate"] is True
        assert any("compresses" in reason for reason in metrics["reasons"])


# =========================================================================== issue #13: real text, both ways
#
# Verbatim public samples (excerpts where said), one file each under data/degeneration/, the source next to each
# name. On the code before issue #13 every HEALTHY sample below was called a loop, and the Qwen#277 prefix and the
# vLLM#13952 block loop were called healthy; the other loops were already caught and must stay caught.
DATA = Path(__file__).parent / "data" / "degeneration"


def sample(name):
    return (DATA / name).read_text(encoding="utf-8")


HEALTHY_WITH_RULERS = {
    # https://github.com/python/cpython/blob/000593c0f97ac9b75b56064a957b84a3aaa60674/README.rst - its first 45
    # lines: reStructuredText headings underlined with 12 to 29 "=" and "-".
    "cpython-readme-3.7.13-excerpt.rst": "the token '='",
    # https://github.com/gosoon/source-code-reading-notes/blob/c305ef8ccf8b03eb14c11a8480371893d1b30c5f/
    # node_modules/commonmark/bench.md - commonmark.js' benchmark table (a vendored copy), its table lines: a
    # "|---...|---------:|" separator and 26 rows of numbers between pipes.
    "commonmark-bench-table.md": "distinct-2",
    # https://github.com/Morizeyao/GPT2-Chinese/issues/175 - a Chinese GPT-2's sample as generate.py prints it:
    # 40 "=" either side of "SAMPLE 1", then the sample's first paragraph (excerpt).
    "gpt2-chinese-175-sample.txt": "the token '='",
    # https://github.com/microsoft/foundry-local/issues/896 - a model chat CLI's screen (excerpt): a 142-character
    # "─" ruler and a box-drawn table of commands.
    "foundry-local-896-help.txt": "the token '─'",
}

CJK_LOOPS = {
    # https://github.com/vllm-project/vllm/issues/13952 - Llama-3.1-8B answering in Traditional Chinese, then
    # writing its own chat template again: a 121-character block twice, the third copy cut by max_tokens=256.
    "vllm-13952-template-loop.txt": 2,
    # https://github.com/QwenLM/Qwen/issues/277 - Qwen: a two-sentence paragraph four times, the fifth cut off.
    "qwen-277-paragraph-loop.txt": 4,
    # https://github.com/datawhalechina/self-llm/issues/237 - one sentence 16 times, no spaces at all.
    "self-llm-237-sentence-loop.txt": 15,
    # https://github.com/QwenLM/Qwen3/issues/540 - Qwen2-1.5B: a healthy start, then one sentence six more times.
    "qwen3-540-sentence-loop.txt": 6,
}


def qwen_277_first_three_copies():
    """The first three copies of the Qwen#277 paragraph: a verbatim prefix of that output, i.e. what the probe
    reads when max_tokens cuts the same loop after its third copy."""
    text = sample("qwen-277-paragraph-loop.txt")
    copy_ends = [match.end() for match in re.finditer("居民才能结束冥想。", text)]
    return text[:copy_ends[2]]


class TestRealText:
    @pytest.mark.parametrize("name", sorted(HEALTHY_WITH_RULERS))
    def test_healthy_markup_with_rulers_is_not_a_loop(self, name):
        metrics = degeneration.measure(sample(name))
        assert metrics["degenerate"] is False, metrics["reasons"]

    @pytest.mark.parametrize("name", sorted(CJK_LOOPS))
    def test_cjk_loops_are_loops(self, name):
        metrics = degeneration.measure(sample(name))
        assert metrics["degenerate"] is True
        assert metrics["longest_run"]["repeats"] == CJK_LOOPS[name]
        assert metrics["longest_run"]["n"] >= 16
        assert "repeats %d times in a row" % CJK_LOOPS[name] in metrics["reasons"][0]

    def test_a_paragraph_three_times_is_a_loop(self):
        text = qwen_277_first_three_copies()
        assert text.count("瞭望塔的内部有一个巨大的圆形空间") == 3
        metrics = degeneration.measure(text)
        assert metrics["degenerate"] is True
        assert (metrics["longest_run"]["repeats"], metrics["longest_run"]["fraction"]) == (3, 1.0)
        assert metrics["reasons"][0].startswith("the 99-token sequence '瞭望塔的外部看起来像一座高大的塔楼，但内部")

    def test_one_copy_of_the_paragraph_is_healthy(self):
        text = qwen_277_first_three_copies()
        assert degeneration.measure(text[:len(text) // 3])["degenerate"] is False

    def test_the_incident_loop_stays_a_sampling_loop(self):
        metrics = degeneration.measure(INCIDENT_LOOP)
        assert degeneration.diagnose(metrics["degenerate"], STATS_HIGH)["verdict"] == degeneration.VERDICT_SAMPLING_LOOP


class TestTokens:
    def test_cjk_is_one_token_per_character(self):
        assert degeneration.tokenize("臣妾是甄嬛，家父") == ["臣", "妾", "是", "甄", "嬛", "，", "家", "父"]
        assert degeneration.tokenize("Qwen3 模型") == ["qwen3", "模", "型"]

    def test_ruler_lines_are_one_token(self):
        text = "Title\n=====\n| a | b |\n|---|:---:|\n+-----+\n╭────┬────╮\n- item"
        assert degeneration.tokenize(text) == [
            "title", "<rule>", "|", "a", "|", "b", "|", "<rule>", "<rule>", "<rule>", "-", "item"]

    def test_a_run_of_one_ruler_character_in_a_line_is_one_token(self):
        assert degeneration.tokenize("SAMPLE ===== 1 -- x") == ["sample", "=====", "1", "-", "-", "x"]

    def test_a_very_long_run_still_loops(self):
        """CONSTRUCTED: a model stuck emitting dashes (no word in the line, longer than a ruler)."""
        metrics = degeneration.measure("-" * 2000)
        assert degeneration.tokenize("-" * 2000) == ["-" * 80] * 25
        assert metrics["degenerate"] is True
        assert "the token" in metrics["reasons"][0] and "repeats 25 times" in metrics["reasons"][0]

    def test_punctuation_loops_are_not_rulers(self):
        """CONSTRUCTED: "!" is no ruler character, and 600 bytes of one character compress whatever the tokens."""
        assert degeneration.measure("Great" + "!" * 30)["degenerate"] is True
        one_token = degeneration.measure("=" * 600 + "\n")
        assert one_token["tokens"] < degeneration.MIN_TOKENS
        assert one_token["degenerate"] is True and "compresses" in one_token["reasons"][0]

    def test_distinct_n_counts_words_only(self):
        metrics = degeneration.measure(sample("commonmark-bench-table.md"))
        assert metrics["word_tokens"] < metrics["tokens"]
        assert metrics["distinct_2"] > degeneration.MAX_DISTINCT_2

    def test_join_tokens(self):
        assert degeneration.join_tokens(["臣", "妾", "，", "the", "user", "'", "s"]) == "臣妾，the user ' s"


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
