# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verification verdict as Prometheus metrics: a pure renderer of the text exposition format for node_exporter's
textfile collector (https://prometheus.io/docs/instrumenting/exposition_formats/).

Input is the summary the sglang_verify role assembles (templates/summary.json.j2). Conventions:

* Every metric is a gauge named ``llmops_sglang_verdict_*`` (``llmops_sglang_verification_*`` for the pending state)
  with the labels ``sglang_instance`` and ``deployment_id``; ``llmops_sglang_verdict_info`` carries the identifying
  strings (unit, invocation, status, failed step, probe diagnosis, sampling mode) as labels with the value 1.
* A value that is unknown (None, missing, not a number, NaN or infinite) is never written as NaN: its sample is left
  out, and a family without samples is left out whole (no HELP/TYPE lines without a sample).
* ``status`` is ``passed``, ``failed`` or ``pending`` (written when a verification starts, with the deadline after which
  it counts as abandoned).
* Statistics given as a mapping (accept length, acceptance rate, throughput: mean, median, min, max, last) become one
  sample per statistic with a ``stat`` label; a bare number gets ``stat="value"``.
* ``plan`` (optional): a mapping of quantity name to ``{"planned": number, "actual": number}``; each side becomes a
  sample of ``llmops_sglang_verdict_planned`` / ``llmops_sglang_verdict_actual`` with a ``quantity`` label, so
  ``actual / planned`` matches label for label. The quantity name should end with its unit (``kv_cache_tokens``).
* ``serves`` (optional): what the server serves of what was requested (sglang_memory_plan's ``serves``), as
  ``llmops_sglang_verdict_serves`` with a ``quantity`` label: ``running_requests`` of ``requested_running_requests``,
  ``kv_cache_tokens`` against ``context_length_tokens``, and ``full_context_requests``, so an alert can compare them.
* ``canaries`` (optional): the canaries' results (module sglang_canary), a list of ``{"name", "passed", "message"}``;
  each canary that ran becomes a sample of ``llmops_sglang_verdict_canary_passed`` (label ``canary``, 1 or 0); one that
  was skipped (``passed`` null or missing: it does not apply) is left out like any unknown value. An unknown name, a
  name given twice or a ``passed`` that is not a bool is refused (ValueError), never guessed at; the message is free
  text and never a label.
* ``canary_acceptance`` (optional): ``{"short": number, "long": number}``, the speculative accept length the canary
  measured on a short and on a long prompt (the quantity of SGLang's ``sglang:spec_accept_length``), as
  ``llmops_sglang_verdict_canary_accept_length`` with a ``context`` label, so a rule can compare long against short.
"""

from __future__ import annotations

import math
import re

from ansible_collections.llmops.serving.plugins.module_utils.degeneration import (
    VERDICT_DEGENERATE_NO_STATS,
    VERDICT_DEGENERATE_UNCONFIRMED,
    VERDICT_DRAFT_PATH,
    VERDICT_HEALTHY,
    VERDICT_SAMPLING_LOOP,
)

STATUS_PASSED = "passed"
STATUS_FAILED = "failed"
STATUS_PENDING = "pending"
STATUSES = (STATUS_PASSED, STATUS_FAILED, STATUS_PENDING)

# Every probe diagnosis gets a sample (1 for the current one), so a rule can select one without knowing the others.
PROBE_DIAGNOSES = (VERDICT_HEALTHY, VERDICT_DRAFT_PATH, VERDICT_SAMPLING_LOOP, VERDICT_DEGENERATE_UNCONFIRMED,
                   VERDICT_DEGENERATE_NO_STATS)

# The statistics spec_decode_stats reports; other keys of its mappings (formula, num_steps, ...) are not samples.
STAT_KEYS = ("mean", "median", "min", "max", "last")

# (quantity label, key of sglang_memory_plan's serves)
SERVES_QUANTITIES = (("running_requests", "running_requests"), ("requested_running_requests", "requested_running_requests"),
                     ("kv_cache_tokens", "kv_tokens"), ("context_length_tokens", "context_length"),
                     ("full_context_requests", "full_context_requests"))

# The canaries sglang_canary runs, the only values of the canary label.
CANARY_NAMES = ("greedy_reference", "speculative_lossless", "tool_call", "long_context_acceptance", "soak")

# The prompts the canary measures acceptance on, the only values of the context label.
CANARY_CONTEXTS = ("short", "long")

METRIC_NAME_RE = re.compile(r"\A[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME_RE = re.compile(r"\A[a-zA-Z_][a-zA-Z0-9_]*\Z")


def textfile_name(instance):
    """The file an instance's verdict goes to; node_exporter reads only ``*.prom`` files."""
    return "llmops_sglang_verdict_%s.prom" % instance


def escape_label_value(value):
    """Label values escape backslash, double quote and line feed (in that order: the backslash first)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text):
    """HELP text escapes backslash and line feed only."""
    return str(text).replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value):
    """The sample value as text, or None when the value is unknown (the sample is then left out, never NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return None
    return repr(value)


class Family:
    """One metric family: name, HELP text, type and its samples as (labels, value) pairs."""

    def __init__(self, name, help_text, metric_type="gauge"):
        if not METRIC_NAME_RE.match(name):
            raise ValueError("%r is not a valid metric name" % name)
        self.name = name
        self.help_text = help_text
        self.metric_type = metric_type
        self.samples = []

    def add(self, labels, value):
        """Add a sample; an unknown value adds nothing."""
        text = format_value(value)
        if text is None:
            return
        for label in labels:
            if not LABEL_NAME_RE.match(label) or label.startswith("__"):
                raise ValueError("%r is not a valid label name" % label)
        self.samples.append((dict(labels), text))


def render_families(families):
    """The exposition text of the families that have samples: HELP, TYPE, then the samples, one family after another."""
    lines = []
    for family in families:
        if not family.samples:
            continue
        lines.append("# HELP %s %s" % (family.name, escape_help(family.help_text)))
        lines.append("# TYPE %s %s" % (family.name, family.metric_type))
        for labels, value in family.samples:
            if labels:
                rendered = ",".join('%s="%s"' % (name, escape_label_value(labels[name])) for name in labels)
                lines.append("%s{%s} %s" % (family.name, rendered, value))
            else:
                lines.append("%s %s" % (family.name, value))
    return "".join(line + "\n" for line in lines)


def _text(value):
    return "" if value is None else str(value)


def _stat_samples(family, base, stats):
    """A mapping of statistics: one sample per statistic (``stat`` label); a bare number: ``stat="value"``."""
    if isinstance(stats, dict):
        for key in STAT_KEYS:
            family.add(dict(base, stat=key), stats.get(key))
    else:
        family.add(dict(base, stat="value"), stats)


def _canary_samples(summary, base, passed, accept_length):
    """The canaries' results (1 passed, 0 failed, skipped ones left out) and the accept lengths they measured."""
    canaries = summary.get("canaries")
    if canaries is None:
        canaries = []
    if not isinstance(canaries, list):
        raise ValueError("the summary's canaries must be a list of {name, passed, message}, not %s" % type(canaries).__name__)
    seen = set()
    for canary in canaries:
        if not isinstance(canary, dict):
            raise ValueError("a canary must be a mapping {name, passed, message}, not %r" % (canary,))
        name = canary.get("name")
        if not isinstance(name, str) or name not in CANARY_NAMES:
            raise ValueError("unknown canary %r (known: %s)" % (name, ", ".join(CANARY_NAMES)))
        if name in seen:
            raise ValueError("canary %r is reported twice" % name)
        seen.add(name)
        result = canary.get("passed")
        if result is not None and not isinstance(result, bool):
            raise ValueError("canary %r: passed must be true, false or null (skipped), not %r" % (name, result))
        if result is not None:
            passed.add(dict(base, canary=name), 1 if result else 0)
    measured = summary.get("canary_acceptance")
    if measured is None:
        measured = {}
    if not isinstance(measured, dict):
        raise ValueError("the summary's canary_acceptance must be a mapping {short, long}, not %s" % type(measured).__name__)
    for context in CANARY_CONTEXTS:
        accept_length.add(dict(base, context=context), measured.get(context))


def verdict_families(summary, written_at, deadline=None):
    """The families for one verification summary.

    ``written_at``: UNIX time the verdict is written. ``deadline``: for a pending verification, the UNIX time after
    which it counts as abandoned (required then, ignored otherwise).
    """
    instance = summary.get("instance")
    if not instance:
        raise ValueError("the summary has no instance")
    status = summary.get("status")
    if status not in STATUSES:
        raise ValueError("the summary's status %r is not one of %s" % (status, ", ".join(STATUSES)))
    if status == STATUS_PENDING and deadline is None:
        raise ValueError("a pending verification needs a deadline")
    base = {"sglang_instance": instance, "deployment_id": _text(summary.get("deployment_id"))}

    info = Family("llmops_sglang_verdict_info",
                  "The verification of an SGLang instance: what was verified and the outcome, as labels (value 1).")
    info.add(dict(base, unit=_text(summary.get("unit")), invocation_id=_text(summary.get("invocation_id")),
                  status=status, failed_step=_text(summary.get("failed_step")),
                  probe_diagnosis=_text(summary.get("probe_verdict")),
                  sampling_mode=_text(summary.get("sampling_mode"))), 1)

    passed = Family("llmops_sglang_verdict_passed", "1 when the verification passed, 0 when it failed.")
    if status != STATUS_PENDING:
        passed.add(base, 1 if status == STATUS_PASSED else 0)

    written = Family("llmops_sglang_verdict_timestamp_seconds", "UNIX time the verdict (or the pending state) was written.")
    written.add(base, written_at)

    pending_deadline = Family("llmops_sglang_verification_deadline_timestamp_seconds",
                              "UNIX time after which a pending verification counts as abandoned.")
    if status == STATUS_PENDING:
        pending_deadline.add(base, deadline)

    ready = Family("llmops_sglang_verdict_ready_seconds",
                   "Seconds from the start of the readiness wait until the server was ready.")
    ready.add(base, summary.get("ready_after_seconds"))
    ready_lag = Family("llmops_sglang_verdict_ready_notice_lag_seconds",
                       "Seconds between the server's ready line and the wait noticing it.")
    ready_lag.add(base, summary.get("ready_noticed_after_line_seconds"))

    decode_lines = Family("llmops_sglang_verdict_decode_log_lines",
                          "Decode batch lines of the verified invocation that the speculative stats were read from.")
    decode_lines.add(base, summary.get("decode_lines"))

    accept_length = Family("llmops_sglang_verdict_accept_length",
                           "Speculative decoding accept length (tokens per verify pass, bonus token included).")
    acceptance = Family("llmops_sglang_verdict_acceptance_ratio",
                        "Speculative decoding acceptance rate recomputed from the accept length (0 to 1).")
    throughput = Family("llmops_sglang_verdict_generation_throughput_tokens_per_second",
                        "Generation throughput from the decode lines, in tokens per second.")
    for family, key in ((accept_length, "accept_length"), (acceptance, "acceptance_rate"), (throughput, "gen_throughput")):
        if summary.get(key) is not None:
            _stat_samples(family, base, summary[key])
    rate = summary.get("acceptance_rate") if isinstance(summary.get("acceptance_rate"), dict) else {}
    draft_tokens = Family("llmops_sglang_verdict_draft_tokens",
                          "Speculative draft tokens per verify pass that the acceptance rate was computed with.")
    draft_tokens.add(base, rate.get("num_draft_tokens"))

    degenerate = Family("llmops_sglang_verdict_degenerate_samples", "Probe samples whose output was degenerate.")
    degenerate.add(base, summary.get("degenerate_samples"))

    diagnosis = Family("llmops_sglang_verdict_probe_diagnosis",
                       "The generation probe's diagnosis: 1 for the current one, 0 for the others.")
    current = summary.get("probe_verdict")
    if current:
        for name in PROBE_DIAGNOSES + ((current,) if current not in PROBE_DIAGNOSES else ()):
            diagnosis.add(dict(base, diagnosis=name), 1 if name == current else 0)

    planned = Family("llmops_sglang_verdict_planned", "Planned value of a quantity (the unit ends its name).")
    actual = Family("llmops_sglang_verdict_actual", "Value of a quantity the running server shows (the unit ends its name).")
    plan = summary.get("plan") or {}
    if not isinstance(plan, dict):
        raise ValueError("the summary's plan must be a mapping of quantity to planned and actual values")
    for quantity in sorted(plan):
        values = plan[quantity] if isinstance(plan[quantity], dict) else {}
        planned.add(dict(base, quantity=quantity), values.get("planned"))
        actual.add(dict(base, quantity=quantity), values.get("actual"))

    serves = Family("llmops_sglang_verdict_serves",
                    "What the server serves of what was requested: running requests of those requested, the KV pool's "
                    "tokens against the context length, and requests of the full context the pool holds.")
    figures = summary.get("serves") or {}
    if not isinstance(figures, dict):
        raise ValueError("the summary's serves must be a mapping")
    for quantity, key in SERVES_QUANTITIES:
        serves.add(dict(base, quantity=quantity), figures.get(key))

    canary_passed = Family("llmops_sglang_verdict_canary_passed",
                           "1 when the verification's canary (label canary) passed, 0 when it failed; a skipped canary "
                           "has no sample.")
    canary_accept_length = Family("llmops_sglang_verdict_canary_accept_length",
                                  "Speculative accept length (tokens per verify pass, bonus token included, as "
                                  "sglang:spec_accept_length) the canary measured on a short and a long prompt (label context).")
    _canary_samples(summary, base, canary_passed, canary_accept_length)

    return [info, passed, written, pending_deadline, ready, ready_lag, decode_lines, accept_length, acceptance,
            throughput, draft_tokens, degenerate, diagnosis, planned, actual, serves, canary_passed, canary_accept_length]


def render_verdict(summary, written_at, deadline=None):
    """The textfile content for one verification summary (see :func:`verdict_families`)."""
    return render_families(verdict_families(summary, written_at, deadline))
