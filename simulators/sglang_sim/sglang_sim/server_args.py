# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's argument parser, built from the spec dumped from the real parser (sglang_0_5_23_args.json).

simulators/sglang_sim/tools/dump_sglang_args.py writes the spec from the installed SGLang (every option of
ServerArgs.add_cli_args: option strings, dest, action, type converter by name, choices, nargs, default, const,
help); the slow tier fails when the committed spec and the real parser differ. build_parser() adds the options in
the same order with the same argparse settings (prog "sglang serve", allow_abbrev as SGLang leaves it), so
abbreviations, ambiguities (`--enable-metric`), choices and conversions (`128k`) behave as in SGLang.
prepare_namespace() is the parsing half of sglang/srt/server_args.py:prepare_server_args (the --config merge, then
parse_args); what SGLang resolves after parsing is in resolution.py.
"""
from __future__ import annotations

import argparse
import functools
import json
import pkgutil

from sglang_sim.arg_actions import CUSTOM_ACTIONS
from sglang_sim.arg_types import TYPE_CONVERTERS
from sglang_sim.config_file import ConfigArgumentMerger

SPEC_RESOURCE = "sglang_0_5_23_args.json"
# add_argument keywords each argparse action takes (the Action attributes dump_sglang_args.py records).
_BUILTIN_KEYWORDS = {
    "store": ("dest", "nargs", "const", "default", "type", "choices", "required", "help", "metavar"),
    "store_const": ("dest", "const", "default", "required", "help", "metavar"),
    "store_true": ("dest", "default", "required", "help"),
    "store_false": ("dest", "default", "required", "help"),
    "append": ("dest", "nargs", "const", "default", "type", "choices", "required", "help", "metavar"),
    "extend": ("dest", "nargs", "const", "default", "type", "choices", "required", "help", "metavar"),
    "count": ("dest", "default", "required", "help"),
    "BooleanOptionalAction": ("dest", "default", "type", "choices", "required", "help", "metavar"),
}
_ALL_KEYWORDS = ("dest", "nargs", "const", "default", "type", "choices", "required", "help", "metavar")
# Python 3.9-3.11 append this to a BooleanOptionalAction's help when it has a default; the dump holds the result.
_BOOLEAN_OPTIONAL_HELP_SUFFIX = " (default: %(default)s)"


def decode(value):
    """Rebuild a value dump_sglang_args.py encoded (tuples are tagged)."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(decode(item) for item in value["__tuple__"])
        return {key: decode(item) for key, item in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def load_spec(resource: str = SPEC_RESOURCE) -> dict:
    """The committed spec (pkgutil reads it from the package, a wheel or a zipapp alike)."""
    return json.loads(pkgutil.get_data("sglang_sim", resource).decode("utf-8"))


def _option_strings(entry):
    strings = entry["option_strings"]
    if entry["action"] == "BooleanOptionalAction":
        # BooleanOptionalAction adds the --no- spellings itself; give it the ones it was given.
        generated = {"--no-" + string[2:] for string in strings if string.startswith("--")}
        strings = [string for string in strings if string not in generated]
    return strings


def add_spec_argument(parser, entry):
    """parser.add_argument for one dumped action."""
    kind = entry["action"]
    values = {
        "dest": entry["dest"],
        "nargs": entry["nargs"],
        "const": decode(entry["const"]),
        "default": decode(entry["default"]),
        "type": None,
        "choices": decode(entry["choices"]),
        "required": entry["required"],
        "help": entry["help"],
        "metavar": decode(entry["metavar"]),
    }
    if entry["choices_unordered"]:
        values["choices"] = set(values["choices"])  # SGLang passes a set (its error lists them in hash order)
    if entry["type"] is not None:
        try:
            values["type"] = TYPE_CONVERTERS[entry["type"]]
        except KeyError:
            raise ValueError(f"{entry['option_strings']}: no converter for type {entry['type']}") from None
    if kind == "BooleanOptionalAction" and values["help"] and values["help"].endswith(_BOOLEAN_OPTIONAL_HELP_SUFFIX) \
            and values["default"] is not None:
        values["help"] = values["help"][:-len(_BOOLEAN_OPTIONAL_HELP_SUFFIX)]
    if kind in _BUILTIN_KEYWORDS:
        action = argparse.BooleanOptionalAction if kind == "BooleanOptionalAction" else kind
        kwargs = {name: values[name] for name in _BUILTIN_KEYWORDS[kind]}
    elif kind in CUSTOM_ACTIONS:
        action = CUSTOM_ACTIONS[kind]
        kwargs = {name: values[name] for name in _ALL_KEYWORDS}
        kwargs.update({name: decode(value) for name, value in entry.get("extra", {}).items()})
    else:
        raise ValueError(f"{entry['option_strings']}: action {kind} is not implemented by the simulator")
    return parser.add_argument(*_option_strings(entry), action=action, **kwargs)


def build_parser(spec=None) -> argparse.ArgumentParser:
    """argparse.ArgumentParser(prog="sglang serve") with every option of SGLang's ServerArgs.add_cli_args."""
    spec = load_spec() if spec is None else spec
    parser = argparse.ArgumentParser(prog=spec["prog"], allow_abbrev=spec["allow_abbrev"],
                                     prefix_chars=spec["prefix_chars"])
    for entry in spec["actions"]:
        if entry["action"] == "help":
            continue  # ArgumentParser adds -h/--help itself, first, as the dump shows it.
        add_spec_argument(parser, entry)
    return parser


def merge_config(argv, parser):
    """The argv prepare_server_args parses: a literal `--config FILE` pair replaced by the file's options, in front."""
    argv = list(argv)
    if "--config" in argv:
        argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
    return argv


def prepare_namespace(argv, parser=None) -> argparse.Namespace:
    """sglang/srt/server_args.py: prepare_server_args up to parse_args: merge a --config YAML, then parse.

    A literal `--config FILE` pair is replaced by the file's options, put in front of the other arguments (so the
    command line wins); `--config=FILE` is not merged, as in SGLang. Errors: argparse's (exit 2), the merger's
    ValueError (uncaught, as in SGLang).
    """
    parser = build_parser() if parser is None else parser
    return parser.parse_args(merge_config(argv, parser))
