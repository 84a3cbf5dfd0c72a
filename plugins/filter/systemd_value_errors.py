# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_value_errors
short_description: Say which variables hold values a systemd unit or environment file cannot carry
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - For a role's input check before anything is rendered (an C(assert) on an empty result), returns one message per
    offending value, naming the variable (and the list index or mapping key) and the character, never the value, so
    it is safe for secrets too.
  - The rules are those the rendering filters apply (module_utils C(systemd_syntax)). Control characters and other
    characters systemd cannot carry are refused in every kind; see P(llmops.serving.systemd_unit_value#filter) for the
    kinds C(path), C(relative_path), C(account), C(keyword) and C(device_allow).
options:
  _input:
    description: Variable name -> value. A value may be a string or lists and mappings of them (checked item by item).
    type: dict
    required: true
  kind:
    description:
      - C(text) for values that become argv words or other quoted text (keys of mappings are checked too; null, numbers
        and booleans pass).
      - C(environment) for mappings of environment variables (names and values).
      - C(instance) for instance names (the rule of module_utils C(deployment_layout)).
      - The kinds of P(llmops.serving.systemd_unit_value#filter) for values of unit settings.
    type: str
    choices: [text, environment, instance, path, relative_path, account, keyword, device_allow]
    default: text
"""

EXAMPLES = r"""
- name: Check the inputs before rendering the unit
  ansible.builtin.assert:
    that: _errors | length == 0
    fail_msg: "{{ _errors | join('; ') }}"
  vars:
    _errors: >-
      {{ ({'my_served_name': my_served_name, 'my_extra_args': my_extra_args} | llmops.serving.systemd_value_errors)
         + ({'my_config_dir': my_config_dir} | llmops.serving.systemd_value_errors('path')) }}
"""

RETURN = r"""
_value:
  description: The messages, in the order of the variables; empty when every value can be rendered.
  type: list
  elements: str
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import instance_name_error
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import UNIT_VALUE_KINDS, value_errors

KINDS = ("text", "environment", "instance") + tuple(sorted(UNIT_VALUE_KINDS))


def systemd_value_errors(variables, kind="text"):
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError("systemd_value_errors expects a mapping of variable names to values")
    if kind not in KINDS:
        raise AnsibleFilterError("systemd_value_errors: unknown kind %r (one of %s)" % (kind, ", ".join(KINDS)))
    errors = []
    for name, value in list(variables.items()):
        if kind == "instance":
            error = instance_name_error(value)
            if error:
                errors.append("%s: %s" % (name, error))
        else:
            errors.extend(value_errors(value, name, kind))
    return errors


class FilterModule:
    def filters(self):
        return {"systemd_value_errors": systemd_value_errors}
