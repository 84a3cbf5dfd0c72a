# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_env_file
short_description: Render environment variables as the lines of a systemd EnvironmentFile=
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns one C(NAME=value) line per variable that systemd reads back as exactly that value (systemd.exec(5),
    EnvironmentFile=). Safe values stay bare; others are double-quoted with a backslash before each of C("), C(\\), C(`) and C($).
    An environment file has no specifier or variable expansion, so C(%) and C($) need nothing more.
  - Refuses names that are not environment variable names, and control characters and other characters systemd
    cannot carry in values, with a message that names the variable and key, never the value (these files hold
    secrets).
options:
  _input:
    description: The variables, as a mapping or as a list of C([name, value]) pairs (the output of C(dictsort)), in the
      order to render them. Values that are not strings are rendered as text.
    type: raw
    required: true
  name:
    description: Where the variables come from, for error messages.
    type: str
    default: the environment file
"""

EXAMPLES = r"""
- name: Write a secret environment file
  ansible.builtin.copy:
    dest: /etc/example/secrets.env
    mode: "0600"
    content: |
      {% for line in {'HF_TOKEN': 'hf_abc', 'NOTE': 'say "hi"'} | dictsort | llmops.serving.systemd_env_file %}
      {{ line }}
      {% endfor %}
    # -> HF_TOKEN=hf_abc
    #    NOTE="say \"hi\""
  no_log: true
"""

RETURN = r"""
_value:
  description: One line per variable (without the newline), in the given order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import (
    SystemdSyntaxError,
    assignment_pairs,
    env_file_line,
)


def systemd_env_file(variables, name="the environment file"):
    try:
        return [env_file_line(key, value, name) for key, value in assignment_pairs(variables, name)]
    except SystemdSyntaxError as exc:
        raise AnsibleFilterError("systemd_env_file: %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"systemd_env_file": systemd_env_file}
