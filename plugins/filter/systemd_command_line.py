# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_command_line
short_description: Quote an argv list for a systemd ExecStart= line
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Joins argv words into one C(ExecStart=) value that systemd splits back into exactly the same words.
  - Words made only of safe characters stay bare; others are double-quoted with C-style escapes.
  - C(%) becomes C(%%) so systemd does not expand specifiers, and C($) becomes C($$) so it does not expand variables.
options:
  _input:
    description: The argv words.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Render a unit line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/usr/bin/env', 'A=b c', '100%'] | llmops.serving.systemd_command_line }}"
    # -> ExecStart=/usr/bin/env "A=b c" 100%%
"""

RETURN = r"""
_value:
  description: The quoted command line.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote_word(word):
    if _SAFE_WORD.match(word):
        quoted = word
    else:
        quoted = '"' + "".join(_ESCAPES.get(ch, ch) for ch in word) + '"'
    return quoted.replace("%", "%%").replace("$", "$$")


def systemd_command_line(argv):
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("systemd_command_line expects a list of argv words")
    if not argv:
        raise AnsibleFilterError("systemd_command_line: the command is empty")
    return " ".join(_quote_word(str(word)) for word in argv)


class FilterModule:
    def filters(self):
        return {"systemd_command_line": systemd_command_line}
