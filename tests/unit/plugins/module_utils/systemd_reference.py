# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reference readers of what systemd 252 makes of a unit file and an environment file, written from its rules and not
from module_utils/systemd_syntax, so the tests can check that the writer's output reads back as intended.

Sources (systemd 252, Debian 12): systemd.syntax(7) (line continuation, comments, QUOTING and its table of escapes),
systemd.service(5) COMMAND LINES (prefixes, ``;``, ``$$``/``${X}``/``$X``, specifiers), systemd.exec(5) (Environment=,
EnvironmentFile=), and the code they describe: src/shared/conf-parser.c (config_parse: EOL at LF, CR and NUL;
whitespace stripped; comments skipped, also inside a continuation; a line whose backslashes end unpaired continues),
src/basic/extract-word.c (extract_first_word with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE), src/basic/escape.c
(cunescape_one), src/core/load-fragment.c (config_parse_exec: prefixes read off the unquoted first word, a lone
unquoted ``;`` separates commands, each word unquoted then specifier-expanded; config_parse_environ), src/basic/env-util.c
(replace_env_argv at exec time), src/basic/env-file.c (parse_env_file_internal) and src/basic/utf8.c (unichar_is_valid).

Each reader raises Unexpected where systemd would expand something (a specifier, a variable), split a command, warn or
refuse: the writer must never produce such input, so the tests treat it as a failure.
"""

from __future__ import annotations

import re

WHITESPACE = " \t\n\r"
COMMENTS = "#;"
ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
                   "'": "'", "s": " "}


class Unexpected(ValueError):
    """systemd would not read the input as one literal value: it would expand, split, warn or refuse."""


def valid_unichar(code):
    """src/basic/utf8.c unichar_is_valid: no surrogates, no noncharacters, at most U+10FFFF."""
    return code < 0x110000 and not 0xD800 <= code <= 0xDFFF and not 0xFDD0 <= code <= 0xFDEF and (code & 0xFFFE) != 0xFFFE


def check_utf8(text):
    for char in text:
        if not valid_unichar(ord(char)):
            raise Unexpected("systemd rejects %r as invalid UTF-8" % char)


def unit_settings(text):
    """[(section, key, raw value)] of a unit file, as config_parse reads its lines."""
    check_utf8(text)
    settings, section, continuation = [], None, None
    for raw in re.split(r"\r\n|[\n\r\0]", text):
        stripped = raw.lstrip(WHITESPACE)
        if stripped[:1] and stripped[0] in COMMENTS:
            continue
        line = raw if continuation is None else continuation + raw
        escaped = False
        for char in line:
            escaped = not escaped and char == "\\"
        if escaped:
            continuation = line[:-1] + " "
            continue
        continuation = None
        line = line.strip(WHITESPACE)
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise Unexpected("invalid section header %r" % line)
            section = line[1:-1]
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise Unexpected("missing '=' in %r" % line)
        settings.append((section, key.strip(WHITESPACE), value.strip(WHITESPACE)))
    if continuation is not None:
        raise Unexpected("the file ends inside a continued line")
    return settings


def _cunescape_one(text, start):
    """(character, index after the escape) for the escape whose letter is at text[start] (escape.c cunescape_one)."""
    if start >= len(text):
        raise Unexpected("a backslash ends the value")
    letter = text[start]
    if letter in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[letter], start + 1
    widths = {"x": 2, "u": 4, "U": 8}
    if letter in widths:
        digits = text[start + 1:start + 1 + widths[letter]]
        if len(digits) != widths[letter] or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
            raise Unexpected("a bad \\%s escape" % letter)
        code = int(digits, 16)
        if code == 0 or not valid_unichar(code):
            raise Unexpected("an escape of U+%04X" % code)
        return chr(code), start + 1 + widths[letter]
    if letter in "0123" and re.fullmatch(r"[0-7]{3}", text[start:start + 3]):
        code = int(text[start:start + 3], 8)
        if code == 0:
            raise Unexpected("an escaped NUL")
        return chr(code), start + 3
    raise Unexpected("an unknown escape \\%s (systemd warns and keeps it)" % letter)


def extract_first_word(text):
    """(word, rest) of extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE); (None, '') when only whitespace is left."""
    index, length = 0, len(text)
    while index < length and text[index] in WHITESPACE:
        index += 1
    if index == length:
        return None, ""
    word, quote = [], None
    while index < length:
        char = text[index]
        if char == "\\":
            decoded, index = _cunescape_one(text, index + 1)
            word.append(decoded)
        elif quote:
            if char == quote:
                quote = None
            else:
                word.append(char)
            index += 1
        elif char in "'\"":
            quote = char
            index += 1
        elif char in WHITESPACE:
            while index < length and text[index] in WHITESPACE:
                index += 1
            return "".join(word), text[index:]
        else:
            word.append(char)
            index += 1
    if quote:
        raise Unexpected("unbalanced quotes")
    return "".join(word), ""


def expand_specifiers(word):
    """unit_full_printf with no specifier allowed but ``%%``."""
    out, index = [], 0
    while index < len(word):
        if word[index] == "%":
            if word[index + 1:index + 2] != "%":
                raise Unexpected("specifier %r would be expanded" % word[index:index + 2])
            out.append("%")
            index += 2
        else:
            out.append(word[index])
            index += 1
    return "".join(out)


def replace_env(word):
    """What replace_env_argv makes of one word at exec time, with no variable allowed to expand."""
    if word.startswith("$") and word[1:2] not in ("{", "$"):
        raise Unexpected("%r is a variable to split" % word[:20])
    out, index = [], 0
    while index < len(word):
        if word[index] == "$" and word[index + 1:index + 2] == "$":
            out.append("$")
            index += 2
        elif word[index] == "$" and word[index + 1:index + 2] == "{":
            raise Unexpected("a ${...} variable would be expanded")
        else:
            out.append(word[index])
            index += 1
    return "".join(out)


def exec_argv(value):
    """(prefixes, program path, argv) systemd executes for an Exec*= value (one command, env expansion on)."""
    first, rest = extract_first_word(value)
    if first is None:
        raise Unexpected("an empty command")
    prefixes = ""
    while first[:1] and first[0] in "-@:+!":
        prefixes, first = prefixes + first[0], first[1:]
    if "@" in prefixes or ":" in prefixes:
        raise Unexpected("prefixes %r change argv[0] or the expansion" % prefixes)
    path = expand_specifiers(first)
    if not path or re.search(r"[\x00-\x1f\x7f\\\"']", path):
        raise Unexpected("the program path is empty or not safe (string_is_safe)")
    argv = [path]
    while rest:
        if rest[0] == ";" and (len(rest) == 1 or rest[1] in WHITESPACE):
            raise Unexpected("a lone ';' separates a second command")
        if rest.startswith("\\;") and (len(rest) == 2 or rest[2] in WHITESPACE):
            argv.append(";")
            rest = rest[2:].lstrip(WHITESPACE)
            continue
        word, rest = extract_first_word(rest)
        if word is None:
            break
        argv.append(expand_specifiers(word))
    if "$" in path:
        raise Unexpected("the program path is never variable-expanded")
    return prefixes, path, [replace_env(word) for word in argv]


def environment_assignments(value):
    """[(name, value)] an Environment= value sets (config_parse_environ: unquote, unescape, then specifiers)."""
    assignments = []
    rest = value
    while True:
        word, rest = extract_first_word(rest)
        if word is None:
            return assignments
        word = expand_specifiers(word)
        name, equals, assigned = word.partition("=")
        if not equals or not ENV_NAME_RE.match(name):
            raise Unexpected("an invalid environment assignment")
        if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", assigned):
            raise Unexpected("a control character in an environment value")
        assignments.append((name, assigned))


def env_file_assignments(text):
    """[(name, value)] an EnvironmentFile= sets (env-file.c parse_env_file_internal, without expansion)."""
    check_utf8(text)
    if "\0" in text or "\ufeff" in text:
        raise Unexpected("NUL or a byte-order mark in an environment file")
    assignments = []
    state, key, value = "pre_key", [], []
    trailing_whitespace = 0

    def push():
        name = "".join(key).rstrip(WHITESPACE)
        if not ENV_NAME_RE.match(name):
            raise Unexpected("an invalid variable name in an environment file")
        assignments.append((name, "".join(value)))

    for char in text + "\n":
        newline = char in "\n\r"
        if state == "pre_key":
            if char in COMMENTS:
                state = "comment"
            elif char not in WHITESPACE:
                state, key, value = "key", [char], []
        elif state == "key":
            if newline:
                state = "pre_key"  # a line without '=' is ignored
            elif char == "=":
                state = "pre_value"
            else:
                key.append(char)
        elif state == "pre_value":
            if newline:
                push()
                state = "pre_key"
            elif char in WHITESPACE:
                pass
            elif char == "'":
                state = "single_quote"
            elif char == '"':
                state = "double_quote"
            elif char == "\\":
                state = "value_escape"
            else:
                value.append(char)
                state, trailing_whitespace = "value", 0
        elif state == "value":
            if newline:
                if trailing_whitespace:
                    del value[-trailing_whitespace:]
                push()
                state = "pre_key"
            elif char == "\\":
                state, trailing_whitespace = "value_escape", 0
            else:
                value.append(char)
                trailing_whitespace = trailing_whitespace + 1 if char in WHITESPACE else 0
        elif state == "value_escape":
            state = "value"
            if not newline:
                value.append(char)
        elif state == "single_quote":
            if char == "'":
                state = "pre_value"
            else:
                value.append(char)
        elif state == "double_quote":
            if char == '"':
                state = "pre_value"
            elif char == "\\":
                state = "double_quote_escape"
            else:
                value.append(char)
        elif state == "double_quote_escape":
            state = "double_quote"
            if char in '"\\`$':
                value.append(char)
            elif not newline:
                value.extend(("\\", char))
        elif state == "comment":
            if newline:
                state = "pre_key"
    if state not in ("pre_key", "comment"):
        raise Unexpected("the environment file ends inside a quoted value")
    return assignments
