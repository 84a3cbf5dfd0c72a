#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Dump every option of the INSTALLED SGLang's argument parser as the JSON spec sglang-sim builds its parser from.

Run it with the real SGLang's python (the slow tier's venv):

    .build/slow-sglang-venv/bin/python simulators/sglang_sim/tools/dump_sglang_args.py \
        > simulators/sglang_sim/sglang_sim/sglang_0_5_23_args.json

It builds the parser as sglang/srt/server_args.py:prepare_server_args does (argparse.ArgumentParser(prog="sglang
serve") plus ServerArgs.add_cli_args(parser)) and writes, per action in the parser's order: option strings, dest,
action kind (argparse's own actions by their add_argument name, SGLang's action classes by class name, with the
attributes they carry), type converter by name (int, float, str, or the module-qualified name of SGLang's converter,
e.g. sglang.srt.utils.common.human_readable_int, which accepts `128k`), choices, nargs, default, const, required,
help and metavar, and which parser destinations are not ServerArgs fields. Run it with no SGLANG_* variables set:
some choices depend on them (the dump records the ones it saw). Values JSON cannot hold are written as
{"__tuple__": [...]} (tuples); anything else stops the dump.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

PROG = "sglang serve"
# argparse's own action classes, by the name add_argument(action=...) takes.
BUILTIN_ACTIONS = {
    argparse._StoreAction: "store",  # pylint: disable=protected-access
    argparse._StoreConstAction: "store_const",  # pylint: disable=protected-access
    argparse._StoreTrueAction: "store_true",  # pylint: disable=protected-access
    argparse._StoreFalseAction: "store_false",  # pylint: disable=protected-access
    argparse._AppendAction: "append",  # pylint: disable=protected-access
    argparse._AppendConstAction: "append_const",  # pylint: disable=protected-access
    argparse._CountAction: "count",  # pylint: disable=protected-access
    argparse._HelpAction: "help",  # pylint: disable=protected-access
    argparse._VersionAction: "version",  # pylint: disable=protected-access
    argparse._ExtendAction: "extend",  # pylint: disable=protected-access
    argparse.BooleanOptionalAction: "BooleanOptionalAction",
}
# The attributes every argparse.Action has; anything else an action carries (new_flag, const_value, ...) is dumped
# under "extra".
ACTION_ATTRIBUTES = {"option_strings", "dest", "nargs", "const", "default", "type", "choices", "required", "help",
                     "metavar", "container", "deprecated"}


def encode(value):
    """A JSON value for a default, const or choice; tuples are tagged so the simulator rebuilds them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode(item) for item in value]}
    if isinstance(value, list):
        return [encode(item) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: encode(item) for key, item in value.items()}
    raise TypeError(f"cannot dump {value!r} ({type(value).__name__})")


def type_name(converter):
    if converter is None:
        return None
    if converter in (int, float, str):
        return converter.__name__
    module = getattr(converter, "__module__", None)
    qualname = getattr(converter, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise TypeError(f"cannot name the type converter {converter!r}")
    return f"{module}.{qualname}"


def action_kind(action):
    kind = BUILTIN_ACTIONS.get(type(action))
    if kind is not None:
        return kind
    return type(action).__name__


def dump_action(action):
    choices = action.choices
    entry = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": action_kind(action),
        "type": type_name(action.type),
        "nargs": action.nargs,
        "choices": None,
        "choices_unordered": False,
        "default": encode(action.default),
        "const": encode(action.const),
        "required": action.required,
        "help": action.help,
        "metavar": encode(action.metavar),
    }
    if choices is not None:
        # A set's order changes with PYTHONHASHSEED; it is kept sorted here and marked.
        unordered = isinstance(choices, (set, frozenset))
        entry["choices"] = [encode(choice) for choice in (sorted(choices) if unordered else choices)]
        entry["choices_unordered"] = unordered
    extra = {name: encode(value) for name, value in sorted(vars(action).items()) if name not in ACTION_ATTRIBUTES}
    if extra:
        entry["extra"] = extra
    return entry


def sglang_version():
    from importlib import metadata

    return metadata.version("sglang")


def dump():
    import msgspec  # pylint: disable=import-error
    from sglang.srt.server_args import ServerArgs  # pylint: disable=import-error

    parser = argparse.ArgumentParser(prog=PROG)
    ServerArgs.add_cli_args(parser)
    actions = parser._actions  # pylint: disable=protected-access
    fields = {field.name for field in msgspec.structs.fields(ServerArgs)}
    return {
        "source": "sglang/srt/server_args.py: prepare_server_args (ArgumentParser(prog='sglang serve') + "
                  "ServerArgs.add_cli_args), dumped by simulators/sglang_sim/tools/dump_sglang_args.py",
        "sglang_version": sglang_version(),
        "python_version": "%d.%d" % sys.version_info[:2],
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "prefix_chars": parser.prefix_chars,
        "actions": [dump_action(action) for action in actions],
        # ServerArgs.from_cli_args keeps only the namespace attributes that are ServerArgs fields.
        "dests_not_in_server_args": sorted({action.dest for action in actions} - fields),
    }


def main():
    leaked = sorted(name for name in os.environ if name.startswith("SGLANG_"))
    if leaked:
        print("dump_sglang_args: unset these first, they change SGLang's choices: " + " ".join(leaked), file=sys.stderr)
        return 2
    json.dump(dump(), sys.stdout, indent=1, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
