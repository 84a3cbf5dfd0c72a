# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an SGLang server's Prometheus ``/metrics`` says about its requests in flight, as pure functions.

SGLang (with ``--enable-metrics``) serves the Prometheus text format (version 0.0.4) at ``GET /metrics``. The gauges
``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` count the requests being run and those waiting; each may come
in several series (labels ``engine_type``, ``model_name``, ``tp_rank``, ``pp_rank`` and any ``--extra-metric-labels``).

Only the lines of the metric asked for are parsed, strictly; every other line is skipped after a look at its first
token, so a large body of unrelated metrics costs little and a broken unrelated line does not matter. A sample line is::

    name [ "{" label "=" '"' value '"' { "," label "=" '"' value '"' } [ "," ] "}" ] value [ timestamp ]

where a label value escapes ``\\``, ``"`` and a line break as ``\\\\``, ``\\"`` and ``\\n`` and may hold anything else
(``}``, ``,``, ``=``, ``#``, any Unicode character). Lines are split at ``\\n`` only (a trailing ``\\r`` is dropped), never
at the other characters ``str.splitlines`` would split at, since those may stand in a label value.
"""

from __future__ import annotations

import math
import re

from ansible_collections.llmops.serving.plugins.module_utils import redact

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"

# The metric name at the start of a sample line (the legacy Prometheus name syntax; colons are allowed in names).
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# One label: a legacy name or a quoted (UTF-8) name, "=", a quoted value with only the three escapes the format knows.
_LABEL_RE = re.compile(r'[ \t]*(?:[a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\\n]|\\[\\"n])*")[ \t]*=[ \t]*"(?:[^"\\\n]|\\[\\"n])*"[ \t]*')
# Go's ParseFloat syntax as Prometheus writes values (no hex floats, no underscores, which float() would take).
_VALUE_RE = re.compile(r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)", re.IGNORECASE)
_TIMESTAMP_RE = re.compile(r"-?[0-9]+")
_BLANKS = " \t"
_FIELD_SEPARATOR_RE = re.compile(r"[ \t]+")


def _labels_end(line, start):
    """Index just past the ``}`` that closes the label set opening at ``line[start] == "{"``; ValueError if none does."""
    position = start + 1
    while True:
        while position < len(line) and line[position] in _BLANKS:
            position += 1
        if position < len(line) and line[position] == "}":
            return position + 1
        match = _LABEL_RE.match(line, position)
        if match is None:
            raise ValueError("a label is not name=\"value\" at column %d" % (position + 1))
        position = match.end()
        if position < len(line) and line[position] == ",":
            position += 1
        elif position >= len(line) or line[position] != "}":
            raise ValueError("the label set is not closed with } (the line ends at column %d)" % (len(line) + 1)
                             if position >= len(line) else "expected , or } at column %d" % (position + 1))


def _sample_value(line, position):
    """The value of the sample whose value (and optional timestamp) starts at ``line[position:]``."""
    rest = line[position:]
    if rest[:1] not in ("", " ", "\t"):
        raise ValueError("expected a blank before the value at column %d" % (position + 1))
    fields = [field for field in _FIELD_SEPARATOR_RE.split(rest) if field]
    if not fields:
        raise ValueError("the line has no value")
    if len(fields) > 2:
        raise ValueError("unexpected text after the value: %r" % redact.shortened(" ".join(fields[2:]), 80))
    if not _VALUE_RE.fullmatch(fields[0]):
        raise ValueError("the value %r is not a number" % redact.shortened(fields[0], 80))
    if len(fields) == 2 and not _TIMESTAMP_RE.fullmatch(fields[1]):
        raise ValueError("the timestamp %r is not an integer" % redact.shortened(fields[1], 80))
    return float(fields[0])


def gauge_values(text, name):
    """The value of every sample of the metric ``name`` in the Prometheus text ``text``, in the order of the lines.

    The name must match exactly (``sglang:num_running_reqs_total`` is not ``sglang:num_running_reqs``); the labels may be
    any. Comments (``# HELP``, ``# TYPE``, any ``#`` line) and blank lines are skipped, and so are lines of other
    metrics. ``NaN``, ``+Inf`` and ``-Inf`` are returned as floats. A line of ``name`` that is not a well-formed sample
    (a truncated line, an unclosed label set, a value that is not a number) raises ValueError naming its line number.
    """
    values = []
    for number, raw in enumerate(text.split("\n"), 1):
        if not raw.startswith(name):
            # Fast path: most lines are other metrics. Leading blanks are allowed by the format, though rare.
            if not raw[:1] or raw[0] not in _BLANKS or not raw.lstrip(_BLANKS).startswith(name):
                continue
        line = raw.strip(_BLANKS + "\r")
        match = _NAME_RE.match(line)
        if match is None or match.group() != name:
            continue  # a longer name that starts with ``name``
        position = match.end()
        try:
            if position < len(line) and line[position] not in _BLANKS + "{":
                raise ValueError("unexpected %r after the metric name" % line[position])
            rest = position
            while rest < len(line) and line[rest] in _BLANKS:
                rest += 1
            if rest < len(line) and line[rest] == "{":
                position = _labels_end(line, rest)
            values.append(_sample_value(line, position))
        except ValueError as exc:
            raise ValueError("line %d, a sample of %s: %s: %s" % (number, name, exc, _quote(line))) from None
    return values


def _quote(line, limit=200):
    return repr(line if len(line) <= limit else line[:limit] + "...")


def _count(values, name):
    """The sum of ``values`` as an int; ValueError when a value is not a count of requests."""
    for value in values:
        if math.isnan(value) or math.isinf(value) or value < 0 or value != int(value):
            raise ValueError("%s has the value %r, which is not a count of requests" % (name, value))
    return int(sum(values))


def in_flight(text):
    """``{"running": int, "queued": int}``: the requests being run and those waiting, summed over every series.

    A gauge without any sample counts 0, but when neither has one the server does not export SGLang's scheduler
    metrics (it runs without ``--enable-metrics``, or it is not an SGLang server) and ValueError is raised. Idle means
    both are 0: a server can run nothing while its queue is long (sgl-project/sglang issue #24140).
    """
    running = gauge_values(text, RUNNING)
    queued = gauge_values(text, QUEUED)
    if not running and not queued:
        raise ValueError("the metrics have neither %s nor %s: the server does not export SGLang's scheduler metrics; "
                         "start it with --enable-metrics (sglang_service_enable_metrics: true)" % (RUNNING, QUEUED))
    return {"running": _count(running, RUNNING), "queued": _count(queued, QUEUED)}
