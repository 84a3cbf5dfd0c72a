# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Mask secrets in every log line, command line and message a module returns: the one redaction layer.

SGLang prints its API keys in clear text: the ``server_args=`` line at start (0.5.23: a dict,
``'api_key': 'sk-...', 'admin_api_key': ...``; older: ``ServerArgs(..., api_key='sk-...', ...)``), and a server
started with ``--api-key KEY`` shows the key in /proc/<pid>/cmdline to every local user. Clients send it as
``Authorization: Bearer KEY``. The checks quote log lines and command lines so that an operator sees the culprit;
this module keeps the culprit and drops the secret:

- ``name=value`` and ``'name': 'value'`` pairs whose name is a key, password, secret or token (api_key,
  admin_api_key, ssl_keyfile_password, OPENAI_API_KEY, X-Api-Key, ...), quoted or bare; ``None``/``null`` stay
  visible (they say that no key is set);
- SGLang's secret flags, ``--api-key KEY`` and ``--api-key=KEY`` (also ``--admin-api-key``, ``--ssl-keyfile-password``
  and the abbreviations argparse accepts for them, such as ``--ap KEY``);
- ``Authorization:`` header values and ``Bearer`` tokens; the password in ``scheme://user:password@host`` URLs.

A value cut off by a length limit (a quote that never closes) is masked to the end of the text, so shortening a
line before or after redaction never shows part of a key. ``--config /path/secrets.yaml`` stays: it is a path.
"""

from __future__ import annotations

import re

REDACTED = "********"

# SGLang's flags that carry a secret, with the shortest abbreviation SGLang 0.5.23's argparse (allow_abbrev) accepts
# for each: a prefix of the flag at least this long means the flag (tests derive them from the real parser's options).
SECRET_FLAGS = {
    "--api-key": "--ap",
    "--admin-api-key": "--ad",
    "--ssl-keyfile-password": "--ssl-keyfile-",
}

_SECRET_NAME = r"(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|password|passwd|secret|(?:access|auth|hf)[_-]token)"
_QUOTED = r"'(?:[^'\\\n]|\\.)*(?:'|$)|\"(?:[^\"\\\n]|\\.)*(?:\"|$)"
# A bare value ends at whitespace or at what closes a repr, dict or list around it.
_BARE = r"[^\s'\",;)}\]]+"

_PAIR_RE = re.compile(
    r"(?P<name>(?<![\w-])" + _SECRET_NAME + r")(?P<sep>['\"]?\s*[:=]\s*)"
    r"(?P<value>" + _QUOTED + r"|(?!(?:None|null|NULL)\b)" + _BARE + r")",
    re.IGNORECASE | re.MULTILINE)
_FLAG_RE = re.compile(
    r"(?<![\w-])(?P<flag>--[A-Za-z][\w-]*)(?:(?P<eq>=)(?P<value>" + _QUOTED + r"|" + _BARE + r")"
    r"|(?P<space>[ \t]+)(?!-)(?P<spaced>" + _QUOTED + r"|" + _BARE + r"))",
    re.MULTILINE)
_AUTHORIZATION_RE = re.compile(
    r"(?P<head>\b(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?P<scheme>bearer|basic|token|digest)\s+)?"
    r"(?P<value>[^\s'\",;]+)",
    re.IGNORECASE)
# As headers spell it (prose such as "a bearer token" is left alone).
_BEARER_RE = re.compile(r"\b(?P<scheme>Bearer|BEARER)\s+(?P<value>[A-Za-z0-9._~+/=-]+)")
_URL_PASSWORD_RE = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]*):(?P<value>[^@/\s'\"]+)@", re.IGNORECASE)


def is_secret_flag(flag):
    """Whether a ``--flag`` (without ``=value``) is one of SECRET_FLAGS or an abbreviation SGLang takes for it."""
    flag = flag.lower()
    return any(secret.startswith(flag) and len(flag) >= len(shortest) for secret, shortest in SECRET_FLAGS.items())


def _masked(value):
    """``value`` with what is inside its quotes (or all of it, when bare) replaced; its quotes stay, and an empty
    quoted value stays empty (it says that no key is set)."""
    if value in ("''", '""'):
        return value
    if value[:1] in ("'", '"'):
        closing = value[0] if len(value) > 1 and value.endswith(value[0]) else ""
        return value[0] + REDACTED + closing
    return REDACTED


def _mask_pair(match):
    return match.group("name") + match.group("sep") + _masked(match.group("value"))


def _mask_flag(match):
    if not is_secret_flag(match.group("flag")):
        return match.group(0)
    if match.group("eq"):
        return match.group("flag") + "=" + _masked(match.group("value"))
    return match.group("flag") + match.group("space") + _masked(match.group("spaced"))


def _mask_authorization(match):
    scheme = match.group("scheme")
    return match.group("head") + (scheme + " " if scheme else "") + REDACTED


def redact_text(text, secrets=()):
    """``text`` with every secret this module recognises masked (see the module's docstring).

    ``secrets`` are values known to be secret (an API key the caller holds): each is masked wherever it appears.
    None stays None; anything else is turned into text first.
    """
    if text is None:
        return None
    text = str(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _AUTHORIZATION_RE.sub(_mask_authorization, text)
    text = _BEARER_RE.sub(lambda match: match.group("scheme") + " " + REDACTED, text)
    text = _URL_PASSWORD_RE.sub(lambda match: match.group("head") + ":" + REDACTED + "@", text)
    text = _FLAG_RE.sub(_mask_flag, text)
    return _PAIR_RE.sub(_mask_pair, text)


def redact_argv(argv):
    """A copy of an argv list with the value of every secret flag masked (``--api-key KEY`` as two words or
    ``--api-key=KEY`` as one) and every word passed through redact_text()."""
    redacted = []
    hide_next = False
    for word in argv:
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        flag, equals, dummy_value = word.partition("=")
        if word.startswith("--") and is_secret_flag(flag):
            if equals:
                redacted.append(flag + "=" + REDACTED)
            else:
                redacted.append(word)
                hide_next = True
            continue
        redacted.append(redact_text(word))
    return redacted


def command_line(argv):
    """argv as one line for messages (words joined by spaces), with its secrets masked."""
    return redact_text(" ".join(redact_argv(argv)))


def redact_deep(value, secrets=()):
    """A copy of ``value`` (dicts, lists and tuples nested in any way) with redact_text() applied to every string
    in it; keys and other values are kept as they are."""
    if isinstance(value, dict):
        return dict((key, redact_deep(item, secrets)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [redact_deep(item, secrets) for item in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value
