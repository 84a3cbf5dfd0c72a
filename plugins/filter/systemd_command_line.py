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
  - Joins argv words into one C(ExecStart=) value that systemd splits back into exactly the same words
    (systemd.service(5), COMMAND LINES; quoting as in systemd.syntax(7)).
  - Words made only of safe characters stay bare; others are double-quoted with C-style escapes.
  - C(%) becomes C(%%) so systemd does not expand specifiers, and C($) becomes C($$) so it does not expand variables.
  - Refuses control characters and other characters systemd cannot carry (newline, carriage return, NUL, DEL, C1
    controls, Unicode noncharacters, line separators) with a message that names the variable and the position, never
    the value; and a program (first word) that is empty, starts with one of systemd's prefixes (C(@), C(-), C(:), C(+), C(!)) or
    contains C($).
  - The escaping layer is module_utils C(systemd_syntax), shared with M(llmops.serving.deployment_record) and the filters
    P(llmops.serving.systemd_environment#filter), P(llmops.serving.systemd_env_file#filter) and
    P(llmops.serving.systemd_unit_value#filter).
options:
  _input:
    description: The argv words, the program first.
    type: list
    elements: str
    required: true
  name:
    description: What the words are, for error messages (for example the variable they come from).
    type: str
    default: the command line
"""

EXAMPLES = r"""
- name: Render a unit line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/usr/bin/env', 'A=b c', '100%', '$HOME'] | llmops.serving.systemd_command_line }}"
    # -> ExecStart=/usr/bin/env "A=b c" 100%% "$$HOME"
"""

RETURN = r"""
_value:
  description: The quoted command line.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import SystemdSyntaxError, exec_command_line


def systemd_command_line(argv, name="the command line"):
    try:
        return exec_command_line(argv, name)
    except SystemdSyntaxError as exc:
        raise AnsibleFilterError("systemd_command_line: %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"systemd_command_line": systemd_command_line}
