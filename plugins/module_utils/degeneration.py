# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure degeneration (repetition loops) in generated text and tell its causes apart.

Metrics (pure functions, standard library only):

* longest repeated n-gram run: the most tokens covered by back-to-back copies of one n-gram
  (``a b c a b c a b c`` is the 3-gram ``a b c`` repeated 3 times, covering 9 tokens), for n up to
  ``MAX_NGRAM`` (512) tokens, so that a repeated paragraph is seen too;
* distinct-n: distinct n-grams / all n-grams, for n = 1, 2, 3, over the WORD tokens only (punctuation and markup
  left out: tables, lists and rulers repeat ``|``, ``-`` and ``.`` by design);
* compression ratio: ``len(zlib.compress(utf8)) / len(utf8)``; a loop compresses far better than prose.

Tokens are what a reader sees as units, close to what a model's tokenizer emits:

* lower-cased words and single punctuation marks, so "The user's question is 2+2." is
  ``the user ' s question is 2 + 2 .``;
* one token per character of Chinese and Japanese script (Han, Hiragana, Katakana), which has no spaces: without
  this a whole clause up to the next comma would be a single token, and a paragraph repeated three times would
  look like a few tokens repeated three times;
* a ruler line - a line of ``---``, ``===``, ``***``, ``___``, ``~~~``, box-drawing characters or a markdown table
  separator such as ``|---|:---:|`` (at most ``MAX_RULER_CHARS`` long) - is one token ``<rule>``, and a run of 3 to
  ``MAX_MARK_RUN`` (80) of one such character inside a line (``Title =====``) is one token: healthy markdown and
  reStructuredText are full of them, and as single characters a 29-character underline read as a 29-fold loop.
  Longer runs split into 80-character tokens, so a model emitting thousands of dashes still loops.

Verdict thresholds (``is_degenerate``), chosen so that ordinary prose, reasoning and markdown never trip them
and a loop of a sentence or of a paragraph trips at least one:

* a repeated run of a short n-gram (2 <= n < ``MIN_BLOCK_TOKENS`` (16)) at least ``MIN_REPEATS`` (4) times in a
  row that covers at least ``MIN_RUN_FRACTION`` (30 %) of the text, or a single token repeated
  ``MIN_SINGLE_TOKEN_REPEATS`` (12) times in a row;
* a block of at least ``MIN_BLOCK_TOKENS`` tokens (a sentence or a paragraph) repeated ``MIN_BLOCK_REPEATS`` (3)
  times in a row covering at least 30 % of the text, or repeated twice in a row covering at least
  ``MIN_TWICE_FRACTION`` (60 %): a healthy answer never restates a whole paragraph verbatim back to back, while a
  long loop cut off by ``max_tokens`` shows only two or three copies;
* distinct-2 of the word tokens below ``MAX_DISTINCT_2`` (0.30) with at least ``MIN_TOKENS_FOR_DISTINCT`` (60) of them;
* compression ratio below ``MAX_COMPRESSION_RATIO`` (0.15) with at least ``MIN_BYTES_FOR_COMPRESSION``
  (600) bytes (zlib's fixed overhead makes short texts look incompressible).

The token-based checks need at least ``MIN_TOKENS`` (20) tokens (too short to judge otherwise); the compression
check needs only its 600 bytes, so that 600 bytes of one character (a few tokens) is still a loop.

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
MIN_BLOCK_TOKENS = 16
MIN_BLOCK_REPEATS = 3
MIN_TWICE_FRACTION = 0.60
MAX_NGRAM = 512
MAX_RULER_CHARS = 200
MAX_MARK_RUN = 80
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

RULE_TOKEN = "<rule>"

# Han (with extension A and compatibility ideographs), Hiragana and Katakana: written without spaces.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Characters rulers and tables are drawn with; one of them repeated is markup, not a loop.
_MARK_CHARS = "\\-=*_~#\u2500-\u257f"
_TOKEN_RE = re.compile(
    r"[" + _CJK + r"]"                                # one CJK character
    r"|(?:(?![" + _CJK + r"])\w)+"                    # a word of any other script
    r"|([" + _MARK_CHARS + r"])\1{2,%d}" % (MAX_MARK_RUN - 1) +  # a run of one ruler character
    r"|[^\w\s]",                                      # one punctuation mark
    re.UNICODE)
# A line drawn only with ruler characters, table pipes/colons/pluses and box-drawing corners, with a run of
# at least three of one ruler character: "-----", "=====", "|---|:---:|", "+-----+", "╭────┬────╮".
_RULER_LINE_RE = re.compile(
    r"^(?=.*([" + _MARK_CHARS + r"])\1\1)[" + _MARK_CHARS + r"|:+\s]+$", re.UNICODE)
_WORD_RE = re.compile(r"\w", re.UNICODE)
# CJK characters and CJK/full-width punctuation, written without spaces around them.
_NO_SPACE_RE = re.compile(r"[" + _CJK + r"\u3000-\u303f\uff00-\uffef]")


def tokenize(text):
    """Lower-cased tokens of ``text`` (at most MAX_TOKENS_ANALYSED), as described in the module docstring."""
    tokens = []
    for line in (text or "").lower().splitlines():
        stripped = line.strip()
        if stripped and len(stripped) <= MAX_RULER_CHARS and _RULER_LINE_RE.match(stripped):
            tokens.append(RULE_TOKEN)
        else:
            tokens.extend(match.group(0) for match in _TOKEN_RE.finditer(line))
        if len(tokens) >= MAX_TOKENS_ANALYSED:
            break
    return tokens[:MAX_TOKENS_ANALYSED]


def word_tokens(tokens):
    """The tokens that carry words (letters, digits, CJK characters): punctuation and markup left out."""
    return [token for token in tokens if token != RULE_TOKEN and _WORD_RE.search(token)]


def longest_repeated_run(tokens, max_n=MAX_NGRAM):
    """Longest back-to-back repetition of one n-gram in ``tokens``.

    Returns ``{"n", "repeats", "tokens_covered", "fraction", "ngram"}`` for the n-gram whose whole
    copies cover the most tokens (the smallest n wins a tie, so a 3-gram loop is not reported as a
    6-gram one; an earlier run wins a tie between runs of one n), or a record with ``repeats`` 1 when
    nothing repeats. See ``_runs_at_lag`` for why this stays fast with n up to MAX_NGRAM.
    """
    total = len(tokens)
    best = {"n": 0, "repeats": 1, "tokens_covered": 0, "fraction": 0.0, "ngram": ""}
    ids = _token_ids(tokens)
    for size in range(1, min(max_n, total // 2) + 1):
        found = None
        for start, run in _runs_at_lag(ids, size):
            covered = (run + size) // size * size
            if found is None or covered > found[0]:
                found = (covered, start)
        if found is None or found[0] <= best["tokens_covered"]:
            continue
        covered, start = found
        best = {
            "n": size,
            "repeats": covered // size,
            "tokens_covered": covered,
            "fraction": 0.0,
            "ngram": join_tokens(tokens[start:start + size]),
        }
    if total:
        best["fraction"] = round(best["tokens_covered"] / float(total), 4)
    return best


_CHUNK = 32


def _runs_at_lag(ids, size):
    """``(start, length)`` of every run of ``ids[i] == ids[i + size]`` at least ``size`` long, in order.

    Only such runs hold two whole copies of a ``size``-gram, and each contains a position of every residue modulo
    ``size``, so probing every ``size``-th position finds them all; a hit is then widened, in chunks compared in C.
    That is about len(ids) / size probes per size instead of len(ids), which keeps MAX_NGRAM large affordable.
    """
    limit = len(ids) - size
    pos = 0
    while pos < limit:
        if ids[pos] != ids[pos + size]:
            pos += size
            continue
        start = pos
        while start >= _CHUNK and ids[start - _CHUNK:start] == ids[start - _CHUNK + size:start + size]:
            start -= _CHUNK
        while start > 0 and ids[start - 1] == ids[start - 1 + size]:
            start -= 1
        end = pos + 1
        while end + _CHUNK <= limit and ids[end:end + _CHUNK] == ids[end + size:end + size + _CHUNK]:
            end += _CHUNK
        while end < limit and ids[end] == ids[end + size]:
            end += 1
        if end - start >= size:
            yield start, end - start
        pos = end + 1


def join_tokens(tokens):
    """Tokens back as text for a message: spaces between words, none between CJK characters and their punctuation."""
    text = ""
    for token in tokens:
        if text and not (_NO_SPACE_RE.match(text[-1]) or _NO_SPACE_RE.match(token[0])):
            text += " "
        text += token
    return text


def _token_ids(tokens):
    """Each token as a small int (equal tokens, equal ints), so that comparisons run in C."""
    ids = {}
    return [ids.setdefault(token, len(ids)) for token in tokens]


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
    words = word_tokens(tokens)
    metrics = {
        "tokens": len(tokens),
        "word_tokens": len(words),
        "bytes": len((text or "").encode("utf-8")),
        "longest_run": longest_repeated_run(tokens),
        "distinct_1": distinct_n(words, 1),
        "distinct_2": distinct_n(words, 2),
        "distinct_3": distinct_n(words, 3),
        "compression_ratio": compression_ratio(text),
    }
    degenerate, reasons = is_degenerate(metrics)
    metrics["degenerate"] = degenerate
    metrics["reasons"] = reasons
    return metrics


def is_degenerate(metrics):
    """Apply the documented thresholds to ``measure``'s metrics; return ``(bool, reasons)``."""
    reasons = []
    if metrics["tokens"] >= MIN_TOKENS:
        run_reason = _run_reason(metrics["longest_run"])
        if run_reason:
            reasons.append(run_reason)
        distinct_2 = metrics["distinct_2"]
        words = metrics.get("word_tokens", metrics["tokens"])
        if distinct_2 is not None and words >= MIN_TOKENS_FOR_DISTINCT and distinct_2 < MAX_DISTINCT_2:
            reasons.append("distinct-2 is %.2f (below %.2f): few different word pairs" % (distinct_2, MAX_DISTINCT_2))
    ratio = metrics["compression_ratio"]
    if ratio is not None and metrics["bytes"] >= MIN_BYTES_FOR_COMPRESSION and ratio < MAX_COMPRESSION_RATIO:
        reasons.append("compresses to %.0f%% of its size (below %.0f%%)" % (ratio * 100, MAX_COMPRESSION_RATIO * 100))
    return bool(reasons), reasons


def _run_reason(run):
    """The reason the longest run makes the text a loop, or None (see the thresholds in the module docstring)."""
    n, repeats, fraction = run["n"], run["repeats"], run["fraction"]
    if n == 1:
        if repeats >= MIN_SINGLE_TOKEN_REPEATS:
            return "the token %r repeats %d times in a row" % (run["ngram"], repeats)
        return None
    looping = repeats >= MIN_REPEATS and fraction >= MIN_RUN_FRACTION
    if n >= MIN_BLOCK_TOKENS:
        looping = looping or (repeats >= MIN_BLOCK_REPEATS and fraction >= MIN_RUN_FRACTION) or (
            repeats >= 2 and fraction >= MIN_TWICE_FRACTION)
    if not looping:
        return None
    return "the %d-token sequence %r repeats %d times in a row (%.0f%% of the text)" % (
        n, _shorten(run["ngram"]), repeats, fraction * 100)


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
