# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: cli_flags
short_description: Render a mapping of long command-line flags into an argv list
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - 'Turns a mapping such as C({"tp-size": 2, "enable-metrics": true}) into C(["--tp-size", "2", "--enable-metrics"]).'
  - Keys are flag names without the leading dashes, in the mapping's order.
  - C(true) renders the bare flag; C(false), C(null) and the empty string leave the flag out.
  - A list renders the flag once followed by every element (argparse C(nargs="+") style).
  - Everything else is rendered with Python's C(str()), so numbers keep their exact value.
options:
  _input:
    description: The flags, as a mapping of flag name to value.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Build the server's argv
  ansible.builtin.set_fact:
    server_argv: "{{ {'model-path': '/models/qwen', 'tp-size': 2, 'enable-metrics': true, 'api-key': none} | llmops.serving.cli_flags }}"
    # -> ['--model-path', '/models/qwen', '--tp-size', '2', '--enable-metrics']
"""

RETURN = r"""
_value:
  description: The argv words.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence


def cli_flags(flags):
    if not isinstance(flags, dict):
        raise AnsibleFilterError(f"cli_flags expects a mapping of flag names to values, got {type(flags).__name__}")
    argv = []
    for name, value in flags.items():
        name = str(name)
        if not name or name.startswith("-") or any(ch.isspace() for ch in name):
            raise AnsibleFilterError(f"cli_flags: {name!r} is not a flag name (give it without leading dashes)")
        if value is None or value is False or value == "":
            continue
        flag = "--" + name
        if value is True:
            argv.append(flag)
        elif is_sequence(value):
            argv.append(flag)
            argv.extend(str(item) for item in value)
        elif isinstance(value, dict):
            raise AnsibleFilterError(f"cli_flags: the value of {flag} is a mapping; give a string, number, boolean or list")
        else:
            argv.extend((flag, str(value)))
    return argv


class FilterModule:
    def filters(self):
        return {"cli_flags": cli_flags}
