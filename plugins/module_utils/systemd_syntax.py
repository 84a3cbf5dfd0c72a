# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Render values into systemd unit files and environment files so that systemd reads back exactly the value given.

The one escaping layer of the collection: the filters ``systemd_command_line``, ``systemd_environment``,
``systemd_env_file`` and ``systemd_unit_value`` and the deployment.env text of deployment_layout all render through it.
Pure functions; every refusal is a SystemdSyntaxError whose message names the variable and the character, never the
value (the value may be a secret).

The rules, from systemd 252 (Debian 12) and its manual pages:

- Unit files (systemd.syntax(7)): one setting per line; a line ending in a backslash continues on the next; leading and
  trailing whitespace of a value is dropped. Where a setting takes quoted words (Exec*=, Environment=), double quotes
  wrap a whole word and C-style escapes apply inside it (``\\\\``, ``\\"``, ...).
- Specifiers (systemd.unit(5)): ``%`` introduces one (``%h``, ``%i``, ...) in Exec*=, Environment=, Description= and
  paths; ``%%`` is a literal ``%``.
- Command lines (systemd.service(5), COMMAND LINES): ``$VAR`` and ``${VAR}`` are expanded in every word, ``$$`` is a
  literal ``$``; a lone unquoted ``;`` separates two commands; the program (first word) may start with the prefixes
  ``@ - : + !``, is never variable-expanded and so cannot carry a ``$`` at all.
- Environment= (systemd.exec(5)): quoted words, specifiers expanded, ``$`` has no special meaning (``$$`` stays ``$$``).
- EnvironmentFile= (systemd.exec(5)): ``KEY=value`` lines with shell-like quoting: inside double quotes a backslash
  keeps ``" \\ ` $``; no specifier or variable expansion.
- Everywhere: systemd reads UTF-8 and refuses Unicode noncharacters (utf8_is_valid), splits lines at CR as well as LF,
  and rejects control characters in environment values. So control characters (C0, DEL, C1), lone surrogates,
  noncharacters, the byte-order mark and the Unicode line and paragraph separators are refused in every value.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

# Words that need no quoting in a command line or an Environment= assignment: nothing systemd's word splitting,
# quoting, escaping or command separation treats specially. '%' is still doubled and '$' (never here) would be.
SAFE_WORD_RE = re.compile(r"\A[A-Za-z0-9_@%+=:,./-]+\Z")
# systemd.exec(5): names of environment variables are ASCII letters, digits and underscores, not starting with a digit.
ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# A user or group name systemd (valid_user_group_name, strict mode) and useradd both accept.
ACCOUNT_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_-]{0,30}\Z")
# A setting's keyword value (Restart=on-failure, DevicePolicy=closed).
KEYWORD_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]*\Z")
# DeviceAllow=: a device node or a class from /proc/devices, then the access.
DEVICE_ALLOW_RE = re.compile(r"\A(?:/dev/[A-Za-z0-9_.:/+-]+|(?:char|block)-[A-Za-z0-9_.*+-]+)(?: [rwm]{1,3})?\Z")
# What a path may hold: systemd splits path lists at whitespace, unquotes and unescapes them in some settings and not in
# others, and expands specifiers in most, so a path with any of these characters would not mean the same everywhere.
_PATH_SPECIAL = re.compile(r"[\s\"'\\%$;]")
# The prefixes systemd reads off a command's first word (systemd.service(5), table "Special executable prefixes").
EXEC_PREFIXES = "@-:+!"
# The characters a backslash keeps inside double quotes in an EnvironmentFile= (systemd.exec(5)).
_ENV_FILE_DOUBLE_QUOTE_ESCAPES = '"\\`$'
_NAMED_CONTROLS = {0x00: "a NUL", 0x09: "a tab", 0x0A: "a newline", 0x0B: "a vertical tab", 0x0C: "a form feed",
                   0x0D: "a carriage return", 0x1B: "an escape", 0x7F: "a DEL", 0x85: "a next line (NEL)"}


class SystemdSyntaxError(ValueError):
    """A value cannot be rendered so that systemd reads it back unchanged; the message names the variable."""


def _describe(char):
    code = ord(char)
    label = "U+%04X" % code
    if code in _NAMED_CONTROLS:
        return "%s (%s, a control character)" % (_NAMED_CONTROLS[code], label)
    category = unicodedata.category(char)
    if category == "Cc":
        return "a control character (%s)" % label
    if category == "Cs":
        return "a lone surrogate (%s), which is not UTF-8" % label
    if 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE:
        return "a Unicode noncharacter (%s), which systemd rejects as invalid UTF-8" % label
    if code == 0xFEFF:
        return "a byte-order mark (%s)" % label
    if code in (0x2028, 0x2029):
        return "a Unicode line or paragraph separator (%s)" % label
    return None


def forbidden_character(text):
    """(position from 1, description) of the first character no systemd file may carry in a value, or None."""
    for index, char in enumerate(text):
        # Every refused character is non-printable in Python's sense (categories C* and Z* but space).
        if char.isprintable():
            continue
        description = _describe(char)
        if description:
            return index + 1, description
    return None


def check_text(value, name):
    """``value`` if it is a string every systemd file can carry; else SystemdSyntaxError naming ``name``."""
    if not isinstance(value, str):
        raise SystemdSyntaxError("%s must be a string, not %s" % (name, type(value).__name__))
    found = forbidden_character(value)
    if found:
        position, description = found
        raise SystemdSyntaxError(
            "%s contains %s at character %d: values rendered into the systemd unit or its environment files may not "
            "contain control characters or characters systemd cannot read" % (name, description, position))
    return value


def check_env_name(key, name):
    """``key`` if it can name an environment variable; else SystemdSyntaxError naming ``name``."""
    if not isinstance(key, str) or not ENV_NAME_RE.match(key):
        shown = ("%r" % key) if isinstance(key, str) and forbidden_character(key) is None else "its key"
        raise SystemdSyntaxError("%s: %s is not an environment variable name (ASCII letters, digits and _, not "
                                 "starting with a digit)" % (name, shown))
    return key


def _quote(word, dollar):
    if SAFE_WORD_RE.match(word):
        quoted = word
    else:
        quoted = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    quoted = quoted.replace("%", "%%")
    return quoted.replace("$", "$$") if dollar else quoted


def exec_word(word, name):
    """One argument of an Exec*= command line: quoted where needed, with ``%%`` and ``$$``."""
    return _quote(check_text(word, name), dollar=True)


def exec_command_line(argv, name):
    """An Exec*= value that systemd splits into exactly ``argv`` (a list of strings, the program first).

    The program may not be empty, start with one of systemd's prefixes (put those in the template: ``ExecStartPre=+``)
    or contain ``$`` (systemd never expands the program path, so ``$$`` would stay doubled there).
    """
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise SystemdSyntaxError("%s must be a list of argv words, not %s" % (name, type(argv).__name__))
    if not argv:
        raise SystemdSyntaxError("%s: the command is empty" % name)
    # Numbers become words as cli_flags renders them; anything else that is not a string is refused by check_text.
    argv = [str(word) if isinstance(word, (int, float)) and not isinstance(word, bool) else word for word in argv]
    program = check_text(argv[0], "%s[0]" % name)
    if not program or program[0] in EXEC_PREFIXES or "$" in program:
        raise SystemdSyntaxError(
            "%s[0]: the program must not be empty, start with one of systemd's prefixes %s or contain '$'"
            % (name, " ".join(EXEC_PREFIXES)))
    return " ".join(exec_word(word, "%s[%d]" % (name, index)) for index, word in enumerate(argv))


def assignment_pairs(variables, name):
    """(key, value) pairs of a mapping or of a list of [key, value] pairs, in their order; numbers and booleans as
    str(), anything else (null, lists, mappings) refused."""
    if isinstance(variables, Mapping):
        items = list(variables.items())
    elif isinstance(variables, (list, tuple)):
        items = variables
    else:
        raise SystemdSyntaxError("%s must be a mapping or a list of [name, value] pairs" % name)
    pairs = []
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise SystemdSyntaxError("%s must be a mapping or a list of [name, value] pairs" % name)
        key, value = item
        if value is None or isinstance(value, (Mapping, list, tuple)):
            raise SystemdSyntaxError("%s: the value of %s is not a string, number or boolean"
                                     % (name, key if isinstance(key, str) and ENV_NAME_RE.match(key) else "a key"))
        pairs.append((key, value if isinstance(value, str) else str(value)))
    return pairs


def environment_assignment(key, value, name):
    """One word of an Environment= setting that sets ``key`` to ``value`` exactly (quoted, ``%%``, ``$`` as is)."""
    check_env_name(key, name)
    return _quote(key + "=" + check_text(value, "%s[%r]" % (name, key)), dollar=False)


def env_file_line(key, value, name):
    """The line of an EnvironmentFile= that sets ``key`` to ``value`` exactly (without the newline).

    Safe values stay bare (so files written before this layer existed read the same); others are double-quoted with
    a backslash before each of ``" \\ ` $``.
    """
    check_env_name(key, name)
    check_text(value, "%s[%r]" % (name, key))
    if value == "" or SAFE_WORD_RE.match(value):
        return "%s=%s" % (key, value)
    return '%s="%s"' % (key, "".join("\\" + char if char in _ENV_FILE_DOUBLE_QUOTE_ESCAPES else char for char in value))


def unit_text(value, name):
    """A free-text value (Description=): ``%%`` for ``%``; no leading or trailing whitespace (systemd drops it) and no
    trailing backslash (it would continue the line)."""
    check_text(value, name)
    if value != value.strip() or value.endswith("\\"):
        raise SystemdSyntaxError("%s may not start or end with whitespace or end with a backslash: systemd would drop "
                                 "the whitespace or join the next line" % name)
    return value.replace("%", "%%")


def unit_path(value, name, absolute=True):
    """A path for a setting such as EnvironmentFile=, ReadWritePaths=, LoadCredential= or (relative) LogsDirectory=.

    Refused: anything systemd splits, unquotes, unescapes or expands in some settings (whitespace, quotes, backslashes,
    ``%``, ``$``, ``;``) and ``..`` components.
    """
    check_text(value, name)
    if absolute and not value.startswith("/"):
        raise SystemdSyntaxError("%s must be an absolute path" % name)
    if not absolute and (not value or value.startswith("/")):
        raise SystemdSyntaxError("%s must be a relative path" % name)
    match = _PATH_SPECIAL.search(value)
    if match:
        raise SystemdSyntaxError("%s contains %r at character %d: paths rendered into the unit may not contain "
                                 "whitespace, quotes, backslashes, %%, $ or ;" % (name, match.group(), match.start() + 1))
    if ".." in value.split("/"):
        raise SystemdSyntaxError("%s may not contain a '..' component" % name)
    return value


def _match(pattern, value, name, what):
    check_text(value, name)
    if not pattern.match(value):
        raise SystemdSyntaxError("%s must be %s" % (name, what))
    return value


def unit_account(value, name):
    """A User= or Group= name."""
    return _match(ACCOUNT_NAME_RE, value, name, "a user or group name (letters, digits, _ and -, at most 31, not "
                                                "starting with a digit or -)")


def unit_keyword(value, name):
    """A keyword value such as Restart=on-failure."""
    return _match(KEYWORD_RE, value, name, "a single word of letters, digits, _ and -")


def unit_device_allow(value, name):
    """A DeviceAllow= entry: a /dev path or a char-/block- class, optionally followed by r, w and m."""
    return _match(DEVICE_ALLOW_RE, value, name, "a /dev path or a char-/block- device class, then a space and the "
                                                "access (r, w, m)")


UNIT_VALUE_KINDS = {
    "text": unit_text,
    "path": unit_path,
    "relative_path": lambda value, name: unit_path(value, name, absolute=False),
    "account": unit_account,
    "keyword": unit_keyword,
    "device_allow": unit_device_allow,
}


def unit_value(value, name, kind="text"):
    """``value`` rendered for a unit setting of the given kind (one of UNIT_VALUE_KINDS)."""
    try:
        render = UNIT_VALUE_KINDS[kind]
    except KeyError:
        raise SystemdSyntaxError("unknown kind of unit value %r (one of %s)" % (kind, ", ".join(sorted(UNIT_VALUE_KINDS)))) from None
    return render(value, name)


def value_errors(value, name, kind="text"):
    """Every message for what in ``value`` a setting of ``kind`` refuses (an empty list when nothing), for checking a
    role's inputs before anything is rendered.

    ``environment``: ``value`` is a mapping of environment variable names to strings, numbers or booleans. Any other
    kind: a string, or lists and mappings of them, checked item by item (named ``name[0]``, ``name['key']``); for
    ``text`` the keys of mappings are checked too, and null, numbers and booleans pass (they render as words of their
    own).
    """
    errors = []

    def check(check_one, *args):
        try:
            check_one(*args)
        except SystemdSyntaxError as exc:
            errors.append(str(exc))

    def label_of(label, key):
        if isinstance(key, str) and forbidden_character(key) is None:
            return "%s[%r]" % (label, key)
        return "%s[a key]" % label

    def visit(item, label):
        if isinstance(item, Mapping):
            for key, entry in item.items():
                if kind == "text":
                    check(check_text, key, "a key of %s" % label)
                visit(entry, label_of(label, key))
        elif isinstance(item, (list, tuple)):
            for index, entry in enumerate(item):
                visit(entry, "%s[%d]" % (label, index))
        elif kind == "text":
            if item is not None and not isinstance(item, (bool, int, float)):
                check(check_text, item, label)
        else:
            check(unit_value, item, label, kind)

    if kind != "environment":
        visit(value, name)
        return errors
    if not isinstance(value, Mapping):
        return ["%s must be a mapping of environment variables, not %s" % (name, type(value).__name__)]
    for key, entry in value.items():
        try:
            check_env_name(key, name)
        except SystemdSyntaxError as exc:
            errors.append(str(exc))
            continue
        if entry is None or isinstance(entry, (Mapping, list, tuple)):
            errors.append("%s[%r] must be a string, number or boolean" % (name, key))
        elif not isinstance(entry, (bool, int, float)):
            check(check_text, entry, "%s[%r]" % (name, key))
    return errors
