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

A value cut off by a length limit (a quote that never closes) is masked to the end of the text.
``--config /path/secrets.yaml`` stays: it is a path.

Values the caller knows to be secret (``secrets=``: the API key a module sends, the Hub token) are masked in every form a
peer that was sent them may echo them in (mask_secrets()): as sent; URL-encoded (``%2B``, ``%2f``, ``+`` for a space,
encoded twice as ``%252B``); JSON-escaped (``\\/``, ``\\"``, ``\\u002b``, surrogate pairs); repr/ascii-escaped (``\\'``,
``\\xe9``, ``\\u00e9``, a bytes repr's ``\\xc3\\xa9``, escaped twice); as HTML character references (``&#43;``, ``&amp;``);
any mix of these within one key; and split by whitespace or line breaks (raw, or escaped as ``\\n``/``\\r\\n`` in a JSON or
repr text), as an error body that wraps a long line at 76 columns splits it. Not covered, because no peer of ours would
send them: base64 or hex (a peer echoes what it received, and a bearer token is sent as is: only a Basic credential is
base64, and we send none), a key with its case changed (header values keep their case), and quoted-printable or shell
line continuations (mail and shells, not HTTP). Secrets shorter than MIN_FORMS_CHARS are masked only as they are: their
escaped or spread-out forms would match ordinary text.

Text is shortened for a message or a result only by shortened(), which masks first and cuts afterwards, so a length
limit never leaves part of a key visible: cut first, a key across the cut would no longer be whole, and the masking
would not recognise it. Where its cut leaves the first MIN_TAIL_CHARS characters of a secret or more (in any of the
forms above) at the end, as it does when the text itself carried a cut key, those are masked too.
"""

from __future__ import annotations

import functools
import re

REDACTED = "********"

# Secrets this long or longer are searched for in every form (see the module's docstring); shorter ones only as they are.
MIN_FORMS_CHARS = 8
# A cut text (shortened()) that ends in this many first characters of a secret or more ends in a cut secret, and they are
# masked. Three characters are at most 18 bits of a random key, and prefixes such as "sk-" or "hf_" are public anyway;
# masking a cut that ends in a key's first one to three characters would mask ordinary text (one cut in 64 ends in a
# key's first character). Only at a cut: elsewhere a text that ends in a key's first characters is ordinary text (the
# instance "verify" of a key "verify-secret-key").
MIN_TAIL_CHARS = 4
# shortened() masks this much text past the cut (or 16 characters for each of a secret's, the most its encoded and
# split forms take, if that is more): a key or a password that starts before the cut is then masked whole, and a body
# of many megabytes is not scanned to the end for a message that quotes its first few hundred characters.
SHORTENED_MARGIN_CHARS = 1024

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


# A backslash escape, or one escaped again up to three times (JSON in JSON in JSON); and a URL-encoded byte's "%", or
# one encoded again up to three times. Bounded: with no possessive quantifier before Python 3.11, an unbounded run
# would make a hostile run of backslashes cost quadratic time.
_BACKSLASHES = r"\\{1,8}"
_PERCENT = r"%(?:25){0,3}"
# Between two characters of an echoed secret: whitespace and line breaks, raw or escaped in a JSON or repr text.
_SPLIT = r"(?:\s|" + _BACKSLASHES + r"(?:[nrt]|u000[9aAdD]))*"
# The start of an escape that a cut interrupted ("%2", "\u00", "&#4"): at a text's end, after a secret's first characters.
_PARTIAL_ESCAPE = (r"(?:" + _PERCENT + r"[0-9A-Fa-f]?|" + _BACKSLASHES + r"(?:[uU][0-9A-Fa-f]{0,7}|x[0-9A-Fa-f]?)?"
                   r"|&#?[xX]?[0-9A-Za-z]{0,7})")
_NAMED_REFERENCES = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos"}


def _hex(value, width=1):
    """``value`` in hexadecimal (at least ``width`` digits), as a pattern that takes either case of each letter."""
    return "".join("[%s%s]" % (digit, digit.upper()) if digit.isalpha() else digit for digit in "%0*x" % (width, value))


def _char_forms(char):
    """A pattern for one character of a secret in any form a peer may echo it in (the module's docstring lists them).
    Escapes come before the character itself, so that a secret with a literal ``%`` or ``\\`` reads its encoded form
    whole."""
    code = ord(char)
    data = char.encode("utf-8", "surrogatepass")
    forms = ["".join(_PERCENT + _hex(byte, 2) for byte in data)]  # URL-encoded, once or up to three times again (%25 is %)
    if code < 0x10000:
        forms.append(_BACKSLASHES + "u" + _hex(code, 4))  # JSON, Python
    else:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(_BACKSLASHES + "u" + _hex(high, 4) + _BACKSLASHES + "u" + _hex(low, 4))  # JSON's surrogate pair
        forms.append(_BACKSLASHES + "U" + _hex(code, 8))  # Python
    if code < 0x100:
        forms.append(_BACKSLASHES + "x" + _hex(code, 2))  # Python's str repr
    if code >= 0x80:
        forms.append("".join(_BACKSLASHES + "x" + _hex(byte, 2) for byte in data))  # Python's bytes repr of the UTF-8
    forms.append("&#0*%d;" % code)
    forms.append("&#[xX]0*" + _hex(code) + ";")
    if char in _NAMED_REFERENCES:
        forms.append("&%s;" % _NAMED_REFERENCES[char])
    if not char.isalnum():
        forms.append(_BACKSLASHES + re.escape(char))  # JSON's \/ and \", repr's \' and \\
    if char == " ":
        forms.append(r"\+")  # a query string's space
    forms.append(re.escape(char))
    return "(?:%s)" % "|".join(forms)


class _SecretForms:
    """The compiled patterns of one secret: the whole secret in any form, and each of its characters."""

    def __init__(self, secret):
        self.chars = [re.compile(_char_forms(char)) for char in secret]
        self.whole = re.compile(_SPLIT.join(pattern.pattern for pattern in self.chars))
        self.head = re.compile("(?=%s)" % _SPLIT.join(pattern.pattern for pattern in self.chars[:MIN_TAIL_CHARS]))
        self.split = re.compile(_SPLIT)
        self.partial = re.compile(_PARTIAL_ESCAPE + r"\Z")

    def tail_start(self, text):
        """Where ``text`` ends in the first MIN_TAIL_CHARS characters or more of the secret (any form, a cut escape
        after them allowed), or None."""
        for head in self.head.finditer(text):
            position, index = head.start(), 0
            while index < len(self.chars):
                found = self.chars[index].match(text, position)
                if found is None:
                    break
                position, index = self.split.match(text, found.end()).end(), index + 1
            if index >= MIN_TAIL_CHARS and (position == len(text) or self.partial.match(text, position)):
                return head.start()
        return None


@functools.lru_cache(maxsize=64)
def _forms(secret):
    return _SecretForms(secret)


def _known(secrets):
    """The secrets worth looking for, longest first (a secret inside another is then masked as part of it)."""
    return sorted(set(str(secret) for secret in secrets or () if secret), key=len, reverse=True)


def mask_secrets(text, secrets):
    """``text`` with each of ``secrets`` masked in every form the module's docstring lists; nothing else is touched.
    None stays None."""
    if text is None:
        return None
    text = str(text)
    for secret in _known(secrets):
        text = text.replace(secret, REDACTED)
        if len(secret) >= MIN_FORMS_CHARS:
            text = _forms(secret).whole.sub(REDACTED, text)
    return text


def _tail_start(text, secrets):
    """The first position from which ``text`` is nothing but the start of one of ``secrets`` (at least MIN_TAIL_CHARS
    of its characters, in any form), or None."""
    starts = [_forms(secret).tail_start(text) for secret in secrets if len(secret) >= MIN_FORMS_CHARS]
    starts = [start for start in starts if start is not None]
    return min(starts) if starts else None


def redact_text(text, secrets=()):
    """``text`` with every secret this module recognises masked (see the module's docstring).

    ``secrets`` are values known to be secret (an API key the caller holds): each is masked wherever it appears, in
    every form mask_secrets() knows. None stays None; anything else is turned into text first.
    """
    if text is None:
        return None
    text = mask_secrets(text, secrets)
    text = _AUTHORIZATION_RE.sub(_mask_authorization, text)
    text = _BEARER_RE.sub(lambda match: match.group("scheme") + " " + REDACTED, text)
    text = _URL_PASSWORD_RE.sub(lambda match: match.group("head") + ":" + REDACTED + "@", text)
    text = _FLAG_RE.sub(_mask_flag, text)
    return _PAIR_RE.sub(_mask_pair, text)


def shortened(text, limit, secrets=(), ellipsis="", ends_cut=False):
    """``text`` for a message or a result: masked (redact_text(), with ``secrets``) first, then cut to at most ``limit``
    characters, ``ellipsis`` included when it is cut. Where the cut leaves a secret's first characters at the end, they
    are masked as well (the result stays within ``limit``). ``ends_cut``: ``text`` itself ends where something else
    cut it (the one line of a peer's answer that an exception quotes), so its end is looked at as a cut's even when it
    fits. None stays None.

    Only the first ``limit`` characters and a margin past them (SHORTENED_MARGIN_CHARS, more for long secrets; more
    again when masking shrank the text) are masked and kept, so a huge body costs no more than its start.
    """
    if text is None:
        return None
    text = str(text)
    known = _known(secrets)
    margin = max([SHORTENED_MARGIN_CHARS] + [16 * len(secret) for secret in known])
    window = limit + margin
    while True:
        masked = redact_text(text[:window], known)
        if window >= len(text) or len(masked) >= limit + margin:
            break
        window *= 2
    if len(masked) <= limit and not ends_cut:
        return masked
    room = max(0, limit - len(ellipsis)) if len(masked) > limit else limit
    cut, suffix = masked[:room], ""
    start = _tail_start(cut, known)
    while start is not None:
        # Masked, the tail may be longer than what it replaces: what comes before it gives way (and is looked at again).
        suffix = REDACTED
        cut = cut[:max(0, min(start, room - len(REDACTED)))]
        start = _tail_start(cut, known)
    return (cut + suffix)[:room] + (ellipsis[:limit] if len(masked) > limit else "")


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
