# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One finding of the GPU preflight: the single owner of its format.

A finding names a check (``check``, a stable id such as ``acs_redirect``), a ``severity`` (``error``: the deployment
fails or serves wrong results; ``warning``: it runs, slower or at risk; ``info``: worth knowing), the ``subject`` (a
GPU as ``GPU<index> <bus id>``, a bridge, a kernel, a file), ``what`` was found, the ``evidence`` (the verbatim
lines it rests on), the ``consequence`` for this deployment and the ``fix``.

Evidence comes from programs and files that a broken or hostile node controls, so every text is made printable here:
control characters other than the tab (ANSI escapes included) are shown as ``\\xNN``, each line is cut to ``EVIDENCE_LINE_LIMIT``
characters and at most ``EVIDENCE_LINES`` lines are kept.
"""

from __future__ import annotations

import re

SEVERITIES = ("error", "warning", "info")
_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}

EVIDENCE_LINES = 6
EVIDENCE_LINE_LIMIT = 300
TEXT_LIMIT = 1000
ELLIPSIS = "..."

# C0 and C1 controls and DEL, except the tab that lspci and nvidia-smi print themselves (harmless in a terminal).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def visible(text, limit=TEXT_LIMIT):
    """``text`` with control characters as ``\\xNN`` and cut to ``limit`` characters (``...`` marks a cut)."""
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    # Cut before escaping as well, so a huge input costs no more than the limit.
    cut = len(text) > limit * 4
    text = _CONTROL.sub(lambda match: "\\x%02x" % ord(match.group()), text[:limit * 4])
    if cut or len(text) > limit:
        return text[:max(limit - len(ELLIPSIS), 0)] + ELLIPSIS
    return text


def evidence_lines(lines, max_lines=EVIDENCE_LINES, limit=EVIDENCE_LINE_LIMIT):
    """At most ``max_lines`` visible lines; a last line says how many more there were."""
    if isinstance(lines, str):
        lines = lines.splitlines() or [lines]
    lines = [line for line in lines if line is not None]
    shown = [visible(line.rstrip("\r\n"), limit) for line in lines[:max_lines]]
    if len(lines) > max_lines:
        shown.append("(%d more lines)" % (len(lines) - max_lines))
    return shown


class Finding:
    """One finding; build it with the raw texts, read it with ``as_dict()`` or ``summary()``."""

    __slots__ = ("check", "severity", "subject", "what", "evidence", "consequence", "fix")

    def __init__(self, check, severity, subject, what, evidence=(), consequence="", fix=""):
        if severity not in _RANK:
            raise ValueError("severity %r is not one of %s" % (severity, ", ".join(SEVERITIES)))
        self.check = visible(check, 80)
        self.severity = severity
        self.subject = visible(subject, 200)
        self.what = visible(what)
        self.evidence = evidence_lines(evidence)
        self.consequence = visible(consequence)
        self.fix = visible(fix)

    def as_dict(self):
        return {key: (list(getattr(self, key)) if key == "evidence" else getattr(self, key)) for key in self.__slots__}

    def summary(self):
        """One line: ``ERROR acs_redirect 0000:00:01.1: ...: consequence -> fix``, ready to print."""
        line = "%s %s %s: %s" % (self.severity.upper(), self.check, self.subject, self.what)
        if self.consequence:
            line += "; %s" % self.consequence
        if self.fix:
            line += " -> fix: %s" % self.fix
        return line

    def sort_key(self):
        """Errors first, then warnings, then info; within a severity by check and subject."""
        return (_RANK[self.severity], self.check, self.subject, self.what)

    def __repr__(self):
        return "Finding(%r, %r, %r)" % (self.check, self.severity, self.subject)


def sort_findings(findings):
    """The findings in report order, one of each (the same check, subject and what only once)."""
    seen = set()
    ordered = []
    for finding in sorted(findings, key=Finding.sort_key):
        key = finding.sort_key()
        if key not in seen:
            seen.add(key)
            ordered.append(finding)
    return ordered


def count(findings, severity):
    return sum(1 for finding in findings if finding.severity == severity)


def failure_message(findings):
    """The module's ``msg`` when errors were found: a count, then one line per error."""
    errors = [finding for finding in sort_findings(findings) if finding.severity == "error"]
    if not errors:
        return None
    head = "GPU preflight found %d error%s:" % (len(errors), "" if len(errors) == 1 else "s")
    return "\n".join([head] + ["- " + finding.summary() for finding in errors])


def gpu_subject(index, bus_id):
    """How a GPU is named in a finding: ``GPU<index> <bus id>``."""
    return "GPU%s %s" % ("?" if index is None else index, bus_id or "(bus id unknown)")
