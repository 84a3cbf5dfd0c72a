# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure degeneration (repetition loops) in generated text and tell its causes apart.

Metrics (pure functions, standard library only):

* longest repeated n-gram run: the most tokens covered by back-to-back copies of one n-gram
  (``a b c a b c a b c`` is the 3-gram ``a b c`` repeated 3 times, covering 9 tokens);
* distinct-n: distinct n-grams / all n-grams, for n = 1, 2, 3;
* compression ratio: ``len(zlib.compress(utf8)) / len(utf8)``; a loop compresses far better than prose.

Tokens are lower-cased words and single punctuation marks, so "The user's question is 2+2." is
``the user ' s question is 2 + 2 .``.

Verdict thresholds (``is_degenerate``), chosen so that ordinary prose and reasoning never trip them
and a loop of a sentence trips at least two of them:

* fewer than ``MIN_TOKENS`` (20) tokens: never degenerate (too short to judge);
* a repeated run of an n-gram (n >= 2) at least ``MIN_REPEATS`` (4) times in a row that covers at
  least ``MIN_RUN_FRACTION`` (30 %) of the text, or a single token repeated ``MIN_SINGLE_TOKEN_REPEATS``
  (12) times in a row;
* distinct-2 below ``MAX_DISTINCT_2`` (0.30) with at least ``MIN_TOKENS_FOR_DISTINCT`` (60) tokens;
* compression ratio below ``MAX_COMPRESSION_RATIO`` (0.15) with at least ``MIN_BYTES_FOR_COMPRESSION``
  (600) bytes (zlib's fixed overhead makes short texts look incompressible).

Diagnosis (``diagnose``) combines the verdict with the speculative-decoding acceptance rate
(recomputed from accept length, see sglang_log): a degenerate output while acceptance is near 1.0 is
the model looping with the draft head predicting the loop - a sampling problem, not MTP; healthy text
with low acceptance is a draft-path problem.
"""

from __future__ import annotations

import re
import zlib

MIN_TOKENS = 20
MIN_REPEATS = 4
MIN_RUN_FRACTION = 0.30
MIN_SINGLE_TOKEN_REPEATS = 12
MAX_NGRAM = 128
MAX_DISTINCT_2 = 0.30
MIN_TOKENS_FOR_DISTINCT = 60
MAX_COMPRESSION_RATIO = 0.15
MIN_BYTES_FOR_COMPRESSION = 600
MAX_TOKENS_ANALYSED = 20000

HIGH_ACCEPTANCE_RATE = 0.85
LOW_ACCEPTANCE_RATE = 1.0 / 3.0

VERDICT_SAMPLING_LOOP = "sampling loop"
VERDICT_DRAFT_PATH = "draft path"
VERDICT_HEALTHY = "healthy"
VERDICT_DEGENERATE_NO_STATS = "degenerate output (no speculative stats to separate causes)"
VERDICT_DEGENERATE_UNCONFIRMED = "degenerate output (acceptance not near 1.0)"

_TOKEN_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def tokenize(text):
    """Lower-cased word and punctuation tokens of ``text`` (at most MAX_TOKENS_ANALYSED)."""
    tokens = _TOKEN_RE.findall((text or "").lower())
    return tokens[:MAX_TOKENS_ANALYSED]


def longest_repeated_run(tokens, max_n=MAX_NGRAM):
    """Longest back-to-back repetition of one n-gram in ``tokens``.

    Returns ``{"n", "repeats", "tokens_covered", "fraction", "ngram"}`` for the n-gram whose whole
    copies cover the most tokens (the smallest n wins a tie, so a 3-gram loop is not reported as a
    6-gram one), or a record with ``repeats`` 1 when nothing repeats. O(len(tokens) x max_n).
    """
    total = len(tokens)
    best = {"n": 0, "repeats": 1, "tokens_covered": 0, "fraction": 0.0, "ngram": ""}
    for size in range(1, min(max_n, total // 2) + 1):
        run = 0
        for index in range(total - size):
            if tokens[index] == tokens[index + size]:
                run += 1
            else:
                run = 0
            repeats = (run + size) // size
            if repeats >= 2 and repeats * size > best["tokens_covered"]:
                start = index - run + 1
                best = {
                    "n": size,
                    "repeats": repeats,
                    "tokens_covered": repeats * size,
                    "fraction": 0.0,
                    "ngram": " ".join(tokens[start:start + size]),
                }
    if total:
        best["fraction"] = round(best["tokens_covered"] / float(total), 4)
    return best


def distinct_n(tokens, n):
    """Distinct n-grams / all n-grams (1.0 for a text without repeats; None when too short)."""
    count = len(tokens) - n + 1
    if count <= 0:
        return None
    grams = set(tuple(tokens[index:index + n]) for index in range(count))
    return round(len(grams) / float(count), 4)


def compression_ratio(text):
    """zlib-compressed size / raw UTF-8 size (None for empty text)."""
    raw = (text or "").encode("utf-8")
    if not raw:
        return None
    return round(len(zlib.compress(raw, 9)) / float(len(raw)), 4)


def measure(text):
    """All metrics of ``text`` plus the verdict: a dict with tokens, bytes, longest_run,
    distinct_1/2/3, compression_ratio, degenerate (bool) and reasons (list of strings)."""
    tokens = tokenize(text)
    metrics = {
        "tokens": len(tokens),
        "bytes": len((text or "").encode("utf-8")),
        "longest_run": longest_repeated_run(tokens),
        "distinct_1": distinct_n(tokens, 1),
        "distinct_2": distinct_n(tokens, 2),
        "distinct_3": distinct_n(tokens, 3),
        "compression_ratio": compression_ratio(text),
    }
    degenerate, reasons = is_degenerate(metrics)
    metrics["degenerate"] = degenerate
    metrics["reasons"] = reasons
    return metrics


def is_degenerate(metrics):
    """Apply the documented thresholds to ``measure``'s metrics; return ``(bool, reasons)``."""
    reasons = []
    if metrics["tokens"] < MIN_TOKENS:
        return False, []
    run = metrics["longest_run"]
    if run["n"] >= 2 and run["repeats"] >= MIN_REPEATS and run["fraction"] >= MIN_RUN_FRACTION:
        reasons.append("the %d-token sequence %r repeats %d times in a row (%.0f%% of the text)"
                       % (run["n"], _shorten(run["ngram"]), run["repeats"], run["fraction"] * 100))
    elif run["n"] == 1 and run["repeats"] >= MIN_SINGLE_TOKEN_REPEATS:
        reasons.append("the token %r repeats %d times in a row" % (run["ngram"], run["repeats"]))
    distinct_2 = metrics["distinct_2"]
    if distinct_2 is not None and metrics["tokens"] >= MIN_TOKENS_FOR_DISTINCT and distinct_2 < MAX_DISTINCT_2:
        reasons.append("distinct-2 is %.2f (below %.2f): few different word pairs" % (distinct_2, MAX_DISTINCT_2))
    ratio = metrics["compression_ratio"]
    if ratio is not None and metrics["bytes"] >= MIN_BYTES_FOR_COMPRESSION and ratio < MAX_COMPRESSION_RATIO:
        reasons.append("compresses to %.0f%% of its size (below %.0f%%)" % (ratio * 100, MAX_COMPRESSION_RATIO * 100))
    return bool(reasons), reasons


def _shorten(text, limit=80):
    return text if len(text) <= limit else text[:limit - 3] + "..."


def acceptance_from_stats(spec_stats):
    """Extract ``(rate, accept_length, num_draft_tokens)`` from a spec_decode_stats result.

    Uses the RECOMPUTED ``acceptance_rate.mean`` (never a logged rate); falls back to computing it
    from ``accept_length.mean`` and ``num_steps``/``num_draft_tokens``. Returns None when the stats
    hold no accept length (no decode lines, or speculative decoding is off).
    """
    if not spec_stats:
        return None
    accept_length = (spec_stats.get("accept_length") or {}).get("mean")
    rate_block = spec_stats.get("acceptance_rate") or {}
    rate = rate_block.get("mean")
    num_draft_tokens = rate_block.get("num_draft_tokens") or spec_stats.get("num_draft_tokens")
    if num_draft_tokens is None and spec_stats.get("num_steps") is not None:
        num_draft_tokens = int(spec_stats["num_steps"]) + 1
    if rate is None and accept_length is not None and num_draft_tokens and num_draft_tokens > 1:
        rate = min(1.0, max(0.0, (float(accept_length) - 1.0) / (num_draft_tokens - 1)))
    if rate is None:
        return None
    return float(rate), accept_length, num_draft_tokens


def diagnose(degenerate, spec_stats=None, high_acceptance=HIGH_ACCEPTANCE_RATE, low_acceptance=LOW_ACCEPTANCE_RATE):
    """Combine the output verdict with speculative stats; return ``{"verdict", "message", ...}``.

    ``degenerate``: True when the probe's output loops. ``spec_stats``: the spec_decode_stats result
    (or any dict with ``acceptance_rate.mean`` or ``accept_length.mean`` + ``num_steps``), or None.

    Verdicts: ``sampling loop`` (degenerate, acceptance >= high_acceptance), ``draft path`` (healthy
    text, acceptance < low_acceptance), ``healthy``, ``degenerate output (no speculative stats to
    separate causes)``, and ``degenerate output (acceptance not near 1.0)`` when the text loops but
    acceptance does not confirm the loop (speculative decoding is lossless by design, so sampling is
    still the first suspect).
    """
    acceptance = acceptance_from_stats(spec_stats)
    result = {"verdict": None, "message": None, "acceptance_rate": None, "accept_length": None, "num_draft_tokens": None}
    if acceptance is not None:
        result["acceptance_rate"] = round(acceptance[0], 4)
        result["accept_length"] = acceptance[1]
        result["num_draft_tokens"] = acceptance[2]
    described = _describe_acceptance(acceptance)
    if degenerate:
        if acceptance is None:
            result["verdict"] = VERDICT_DEGENERATE_NO_STATS
            result["message"] = ("the output is degenerate (a repetition loop); without speculative-decoding stats the cause "
                                 "cannot be separated: run spec_decode_stats on the log from the probe's offset. A loop is most often "
                                 "sampling: check temperature/presence_penalty against the model card")
        elif acceptance[0] >= high_acceptance:
            result["verdict"] = VERDICT_SAMPLING_LOOP
            result["message"] = ("the output is a repetition loop while %s (near 1.0): the model is looping and the draft head "
                                 "predicts the loop. This is a sampling problem, not MTP: check temperature/presence_penalty "
                                 "against the model card" % described)
        else:
            result["verdict"] = VERDICT_DEGENERATE_UNCONFIRMED
            result["message"] = ("the output is degenerate while %s, not near 1.0, so the stats do not confirm a sampling loop. "
                                 "Speculative decoding does not change the output distribution: check temperature/presence_penalty "
                                 "against the model card first, then the model weights and the draft path" % described)
    else:
        if acceptance is not None and acceptance[0] < low_acceptance:
            result["verdict"] = VERDICT_DRAFT_PATH
            result["message"] = ("the output is healthy but %s, below %.2f: speculative drafts are being rejected; the draft path "
                                 "(MTP head, --speculative-* flags, long context) is the suspect, not sampling" % (described, low_acceptance))
        else:
            result["verdict"] = VERDICT_HEALTHY
            if acceptance is None:
                result["message"] = "the output is healthy (no speculative-decoding stats given)"
            else:
                result["message"] = "the output is healthy and %s" % described
    return result


def _describe_acceptance(acceptance):
    if acceptance is None:
        return "no acceptance data"
    rate, accept_length, num_draft_tokens = acceptance
    if accept_length is not None and num_draft_tokens:
        return "acceptance is %.2f (accept length %.2f of %d draft tokens)" % (rate, accept_length, num_draft_tokens)
    return "acceptance is %.2f" % rate
