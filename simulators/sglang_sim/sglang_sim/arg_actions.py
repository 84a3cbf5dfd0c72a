# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's own argparse actions (sglang/srt/arg_groups/argparse_actions.py), reimplemented.

The class names are SGLang's: the spec names actions by class, and SGLang's --config merger quotes the class name in
`Unsupported config option '...' with action '...'`. Deprecation warnings go to stderr as SGLang's logger.warning
does before logging is configured (the message alone, in SGLang's yellow).
"""
from __future__ import annotations

import argparse
import json
import sys


def print_deprecated_warning(message: str):
    # SGLang: logger.warning(f"\033[1;33m{message}\033[0m"); with no handler yet, logging's last resort prints the
    # message alone to stderr.
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr)


class LoRAPathAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        lora_paths = []
        if values:
            assert isinstance(values, list), "Expected a list of LoRA paths."
            for lora_path in values:
                lora_path = lora_path.strip()
                if lora_path.startswith("{") and lora_path.endswith("}"):
                    obj = json.loads(lora_path)
                    assert "lora_path" in obj and "lora_name" in obj, (
                        f"{repr(lora_path)} looks like a JSON str, "
                        "but it does not contain 'lora_name' and 'lora_path' keys."
                    )
                    lora_paths.append(obj)
                else:
                    lora_paths.append(lora_path)
        setattr(namespace, self.dest, lora_paths)


class DeprecatedStoreTrueAction(argparse.Action):
    """Deprecated flag that still stores True and prints a warning."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        print_deprecated_warning(
            f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
        )
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    """An old boolean (or single-valued flag) whose replacement is one value of another field."""

    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        print_deprecated_warning(
            f"'{option_string}' is deprecated and will be removed in a future "
            f"release.{replacement}"
        )
        setattr(namespace, self.dest, self.const_value)


# The spec's action kinds: argparse's own by their add_argument name, SGLang's by class.
CUSTOM_ACTIONS = {cls.__name__: cls for cls in (LoRAPathAction, DeprecatedStoreTrueAction, DeprecatedStoreConstAction)}
