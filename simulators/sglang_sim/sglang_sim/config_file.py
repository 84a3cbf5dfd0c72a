# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's --config YAML merge (sglang/srt/utils/server_args_config_parser.py: ConfigArgumentMerger).

The YAML mapping becomes command-line arguments put IN FRONT of the others (so the command line wins): `key: true`
for a store_true flag adds `--key`, `false` adds nothing; other booleans become `--key true|false`; a list becomes
`--key item...` (nothing when empty); a mapping becomes `--key '<json>'`; anything else `--key str(value)`. Keys are
used as written (`api-key`; `api_key` would be `--api_key`, which argparse does not know). Options whose action
takes no single value (BooleanOptionalAction, SGLang's deprecated flags, --lora-paths) are refused.

The file is read with PyYAML's safe_load when PyYAML is importable (SGLang's own reader). Otherwise a reader for the
block-mapping subset config files use (plain, quoted, null/bool/int/float scalars resolved as PyYAML's YAML 1.1
rules do, flow and block lists, one level of nested mapping, comments) reads it, and refuses anything else.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

logger = logging.getLogger(__name__)


def _config_keys(action):
    return {action.dest} | {option[2:].replace("-", "_") for option in action.option_strings if option.startswith("--")}


def _takes_one_value(action):
    return isinstance(action, argparse._StoreAction) or action.nargs is None  # pylint: disable=protected-access


class ConfigArgumentMerger:
    """SGLang's ConfigArgumentMerger, reading the same parser's actions."""

    def __init__(self, parser=None, boolean_actions=None):
        store_true = argparse._StoreTrueAction  # pylint: disable=protected-access
        if parser is not None:
            self.parser = parser
            actions = parser._actions  # pylint: disable=protected-access
            self.store_true_actions = [key for action in actions if isinstance(action, store_true)
                                       for key in _config_keys(action)]
            supported = [a for a in actions if isinstance(a, store_true) or _takes_one_value(a)]
            supported_keys = {key for a in supported for key in _config_keys(a)}
            self.unsupported_actions = {
                key: a
                for a in actions
                if a.option_strings and a not in supported and "--config" not in a.option_strings
                and "--help" not in a.option_strings and "-h" not in a.option_strings
                for key in _config_keys(a)
                if key not in supported_keys
            }
        elif boolean_actions is not None:
            self.store_true_actions = boolean_actions
            self.unsupported_actions = {}
        else:
            self.store_true_actions = []
            self.unsupported_actions = {}

    def merge_config_with_args(self, cli_args):
        config_file_path = self._extract_config_file_path(cli_args)
        if not config_file_path:
            return cli_args
        config_data = self._parse_yaml_config(config_file_path)
        config_args = self._convert_config_to_args(config_data)
        config_index = cli_args.index("--config")
        before_config = cli_args[:config_index]
        after_config = cli_args[config_index + 2:]
        return config_args + before_config + after_config

    @staticmethod
    def _extract_config_file_path(args):
        config_indices = [i for i, arg in enumerate(args) if arg == "--config"]
        if len(config_indices) > 1:
            raise ValueError("Multiple config files specified! Only one allowed.")
        if not config_indices:
            return None
        config_index = config_indices[0]
        if config_index == len(args) - 1:
            raise ValueError("No config file specified after --config flag!")
        return args[config_index + 1]

    def _parse_yaml_config(self, file_path):
        self._validate_yaml_file(file_path)
        try:
            with open(file_path, "r") as file:  # pylint: disable=unspecified-encoding  # SGLang opens it so
                config_data = safe_load(file.read())
        except Exception as error:
            logger.error(f"Failed to read config file {file_path}: {error}")  # pylint: disable=logging-fstring-interpolation
            raise
        if config_data is None:
            config_data = {}
        if not isinstance(config_data, dict):
            raise ValueError("Config file must contain a dictionary at root level")
        return config_data

    @staticmethod
    def _validate_yaml_file(file_path):
        path = Path(file_path)
        if path.suffix.lower() not in [".yaml", ".yml"]:
            raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
        if not path.exists():
            raise ValueError(f"Config file not found: {file_path}")

    def _convert_config_to_args(self, config):
        args = []
        for key, value in config.items():
            key_norm = key.replace("-", "_")
            if key_norm in self.unsupported_actions:
                action = self.unsupported_actions[key_norm]
                raise ValueError(f"Unsupported config option '{key_norm}' with action '{action.__class__.__name__}'")
            if isinstance(value, bool):
                self._add_boolean_arg(args, key, value)
            elif isinstance(value, list):
                self._add_list_arg(args, key, value)
            elif isinstance(value, dict):
                self._add_scalar_arg(args, key, json.dumps(value))
            else:
                self._add_scalar_arg(args, key, value)
        return args

    def _add_boolean_arg(self, args, key, value):
        key_norm = key.replace("-", "_")
        if key_norm in self.store_true_actions:
            if value:
                args.append(f"--{key}")
        else:
            args.extend([f"--{key}", str(value).lower()])

    @staticmethod
    def _add_list_arg(args, key, value):
        if value:
            args.append(f"--{key}")
            args.extend(str(item) for item in value)

    @staticmethod
    def _add_scalar_arg(args, key, value):
        args.extend([f"--{key}", str(value)])


def safe_load(text):
    """yaml.safe_load when PyYAML is importable, else the subset reader below."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return load_yaml_subset(text)
    return yaml.safe_load(text)


# ---- the subset reader -----------------------------------------------------------------------------------------
# PyYAML's implicit resolvers (yaml/resolver.py, YAML 1.1), for plain scalars.
_BOOL_RE = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                           |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                           |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                           |[-+]?\.(?:inf|Inf|INF)
                           |\.(?:nan|NaN|NAN))$""", re.X)
_INT_RE = re.compile(r"""^(?:[-+]?0b[0-1_]+
                         |[-+]?0[0-7_]+
                         |[-+]?(?:0|[1-9][0-9_]*)
                         |[-+]?0x[0-9a-fA-F_]+
                         |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""", re.X)
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_TIMESTAMP_RE = re.compile(r"^[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?")
_DOUBLE_QUOTE_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                         "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                         "L": "\u2028", "P": "\u2029"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_KEY_RE = re.compile(r"^(?P<key>[^\s#'\"\[\]{}&*!|>%@`,-][^:#]*?|-[^\s:#][^:#]*?)\s*:(?:\s+(?P<rest>.*))?$")


class YamlSubsetError(ValueError):
    pass


def _unsupported(line_no, what):
    raise YamlSubsetError(f"line {line_no}: {what} is beyond sglang-sim's YAML reader (flat mappings of scalars and "
                          "lists); install PyYAML for full YAML")


def _sexagesimal(text, convert):
    sign = -1 if text.startswith("-") else 1
    if text[0] in "+-":
        text = text[1:]
    value, base = 0, 1
    for digit in reversed(text.split(":")):
        value += convert(digit) * base
        base *= 60
    return sign * value


def _construct_int(text):
    # yaml/constructor.py: SafeConstructor.construct_yaml_int
    value = text.replace("_", "")
    sign = -1 if value.startswith("-") else 1
    if value[0] in "+-":
        value = value[1:]
    if value == "0":
        return 0
    if value.startswith("0b"):
        return sign * int(value[2:], 2)
    if value.startswith("0x"):
        return sign * int(value[2:], 16)
    if value[0] == "0":
        return sign * int(value, 8)
    if ":" in value:
        return sign * _sexagesimal(value, int)
    return sign * int(value)


def _construct_float(text):
    # yaml/constructor.py: SafeConstructor.construct_yaml_float
    value = text.replace("_", "").lower()
    sign = -1.0 if value.startswith("-") else 1.0
    if value[0] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * float("inf")
    if value == ".nan":
        return float("nan")
    if ":" in value:
        return sign * _sexagesimal(value, float)
    return sign * float(value)


def _plain(text, line_no):
    if _NULL_RE.match(text):
        return None
    if _BOOL_RE.match(text):
        return text.lower() in ("yes", "true", "on")
    if _INT_RE.match(text):
        return _construct_int(text)
    if _FLOAT_RE.match(text):
        return _construct_float(text)
    if _TIMESTAMP_RE.match(text):
        _unsupported(line_no, "a timestamp")
    if text[0] in "&*!|>%@`{":
        _unsupported(line_no, f"{text[0]!r} (anchors, aliases, tags, block scalars, flow mappings)")
    if ": " in text or text.endswith(":") or " #" in text:
        _unsupported(line_no, "a nested or ambiguous plain scalar")
    return text


def _double_quoted(text, line_no):
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            code = text[i + 1:i + 2]
            if code in _DOUBLE_QUOTE_ESCAPES:
                out.append(_DOUBLE_QUOTE_ESCAPES[code])
                i += 2
            elif code in _HEX_ESCAPES:
                width = _HEX_ESCAPES[code]
                digits = text[i + 2:i + 2 + width]
                if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    _unsupported(line_no, "a bad escape")
                out.append(chr(int(digits, 16)))
                i += 2 + width
            else:
                _unsupported(line_no, "an unknown escape")
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _scalar_token(text, line_no):
    """(value, rest) for one scalar at the start of text; quoted scalars end at their closing quote."""
    if text.startswith('"'):
        match = re.match(r'"((?:[^"\\]|\\.)*)"', text)
        if not match:
            _unsupported(line_no, "a multi-line or unterminated quoted scalar")
        return _double_quoted(match.group(1), line_no), text[match.end():]
    if text.startswith("'"):
        match = re.match(r"'((?:[^']|'')*)'", text)
        if not match:
            _unsupported(line_no, "a multi-line or unterminated quoted scalar")
        return match.group(1).replace("''", "'"), text[match.end():]
    return None, text


def _strip_comment(rest, line_no):
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        _unsupported(line_no, "text after a quoted scalar")


def _inline_value(text, line_no):
    """A value written on the key's line: a scalar or a flow list of scalars."""
    value, rest = _scalar_token(text, line_no)
    if rest is not text:
        _strip_comment(rest, line_no)
        return value
    if text.startswith("["):
        return _flow_list(text, line_no)
    plain = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    return _plain(plain, line_no)


def _flow_list(text, line_no):
    items, rest = [], text[1:].lstrip()
    if rest.startswith("]"):
        _strip_comment(rest[1:], line_no)
        return items
    while True:
        value, after = _scalar_token(rest, line_no)
        if after is rest:
            match = re.match(r"([^,\]\[{}]*)", rest)
            plain = match.group(1).strip()
            if not plain:
                _unsupported(line_no, "an empty or nested flow list item")
            value, after = _plain(plain, line_no), rest[match.end():]
        items.append(value)
        after = after.lstrip()
        if after.startswith(","):
            rest = after[1:].lstrip()
            if rest.startswith("]"):
                _strip_comment(rest[1:], line_no)
                return items
            continue
        if after.startswith("]"):
            _strip_comment(after[1:], line_no)
            return items
        _unsupported(line_no, "a multi-line or nested flow list")


def load_yaml_subset(text):
    """Read the config-file subset of YAML the way yaml.safe_load reads it; refuse the rest."""
    lines = []
    for line_no, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            _unsupported(line_no, "tab indentation")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped in ("---", "...") and not raw.startswith(" "):
            if stripped == "---" and lines:
                _unsupported(line_no, "a second document")
            continue
        lines.append((line_no, len(raw) - len(raw.lstrip()), stripped))
    if not lines:
        return None
    top_indent = lines[0][1]
    result, index = {}, 0
    while index < len(lines):
        line_no, indent, stripped = lines[index]
        if indent != top_indent:
            _unsupported(line_no, "unexpected indentation")
        match = _KEY_RE.match(stripped)
        if not match:
            _unsupported(line_no, "a line that is not `key: value`")
        key = _plain(match.group("key").strip(), line_no)
        rest = match.group("rest")
        index += 1
        if rest is not None and rest.strip() and not rest.strip().startswith("#"):
            result[key] = _inline_value(rest.strip(), line_no)
            continue
        block = []
        while index < len(lines) and (lines[index][1] > top_indent
                                      or (lines[index][1] == top_indent and lines[index][2].startswith("- "))
                                      or (lines[index][1] == top_indent and lines[index][2] == "-")):
            block.append(lines[index])
            index += 1
        result[key] = _block_value(block, line_no)
    return result


def _block_value(block, key_line):
    if not block:
        return None
    indent = block[0][1]
    if block[0][2] == "-" or block[0][2].startswith("- "):
        items = []
        for line_no, item_indent, stripped in block:
            if item_indent != indent or not (stripped == "-" or stripped.startswith("- ")):
                _unsupported(line_no, "a nested block list")
            items.append(_inline_value(stripped[1:].strip(), line_no) if stripped != "-" else None)
        return items
    mapping = {}
    for line_no, item_indent, stripped in block:
        match = _KEY_RE.match(stripped)
        if item_indent != indent or not match:
            _unsupported(line_no, "a nested block under key line %d" % key_line)
        rest = match.group("rest")
        if rest is None or not rest.strip() or rest.strip().startswith("#"):
            _unsupported(line_no, "a mapping nested more than one level")
        mapping[_plain(match.group("key").strip(), line_no)] = _inline_value(rest.strip(), line_no)
    return mapping
