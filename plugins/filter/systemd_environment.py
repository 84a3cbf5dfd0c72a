# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_environment
short_description: Render environment variables as values of systemd Environment= settings
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns one C(Environment=) value per variable, each a single word that systemd unquotes into exactly C(NAME=value)
    (systemd.exec(5)) - quoted where needed, with C(%%) for C(%) (specifiers are expanded there) and C($) left as it is
    (variables are not expanded there, so C($$) would stay doubled).
  - Refuses names that are not environment variable names, and control characters and other characters systemd
    cannot carry in values, with a message that names the variable and key, never the value.
options:
  _input:
    description: The variables, as a mapping or as a list of C([name, value]) pairs (the output of C(dictsort)), in the
      order to render them. Values that are not strings are rendered as text.
    type: raw
    required: true
  name:
    description: Where the variables come from, for error messages.
    type: str
    default: the environment
"""

EXAMPLES = r"""
- name: Render the unit's environment
  ansible.builtin.copy:
    dest: /tmp/env.conf
    mode: "0644"
    content: |
      [Service]
      {% for assignment in {'A': 'b c', 'P': '100%', 'D': '$HOME'} | dictsort | llmops.serving.systemd_environment %}
      Environment={{ assignment }}
      {% endfor %}
    # -> Environment="A=b c"
    #    Environment="D=$HOME"
    #    Environment=P=100%%
"""

RETURN = r"""
_value:
  description: One C(Environment=) value per variable, in the given order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import (
    SystemdSyntaxError,
    assignment_pairs,
    environment_assignment,
)


def systemd_environment(variables, name="the environment"):
    try:
        return [environment_assignment(key, value, name) for key, value in assignment_pairs(variables, name)]
    except SystemdSyntaxError as exc:
        raise AnsibleFilterError("systemd_environment: %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"systemd_environment": systemd_environment}
