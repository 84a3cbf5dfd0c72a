# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_config_yaml
short_description: Render server flags as an SGLang --config YAML file whose values read back exactly
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - SGLang (0.5.23) reads C(--config FILE.yaml) in-process and turns each flag and value of its top-level mapping into
    C(--flag value) before the command-line arguments, so a secret flag such as C(api-key) passed this way never appears
    in the server's command line.
  - Every value is written as a double-quoted YAML string with the file kept ASCII (C(\\") and C(\\\\) escaped,
    other characters outside printable ASCII as C(\\xNN), C(\\uNNNN) or C(\\UNNNNNNNN)), so a YAML reader returns the
    exact string whatever its characters and whatever the reader's encoding, never a number, boolean or null.
  - Refuses flag names that are not C(--flag) names, and control characters and other characters systemd and YAML
    cannot carry in values, with a message that names the flag, never the value (the values are secrets).
options:
  _input:
    description: Flag name (without the leading dashes) -> string value, in the order to write them.
    type: dict
    required: true
  name:
    description: Where the values come from, for error messages.
    type: str
    default: the SGLang config file
"""

EXAMPLES = r"""
- name: Write the server's secret flags for LoadCredential=
  ansible.builtin.copy:
    dest: /etc/llmops-serving/qwen36/server-secrets.yaml
    content: "{{ {'api-key': vault_sglang_api_key} | llmops.serving.sglang_config_yaml }}"
    owner: root
    group: root
    mode: "0600"
  no_log: true
"""

RETURN = r"""
_value:
  description: The YAML text, a comment line and then one line per flag with its double-quoted value, ending with a newline.
  type: str
"""

import re

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import SystemdSyntaxError, check_text

_FLAG_NAME_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9_-]*\Z")


def yaml_double_quoted(value):
    """``value`` as an ASCII-only double-quoted YAML scalar that any YAML 1.1 or 1.2 reader returns unchanged."""
    out = []
    for char in value:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append("\\x%02X" % code)
        elif code <= 0xFFFF:
            out.append("\\u%04X" % code)
        else:
            out.append("\\U%08X" % code)
    return '"' + "".join(out) + '"'


def sglang_config_yaml(flags, name="the SGLang config file"):
    if not isinstance(flags, Mapping):
        raise AnsibleFilterError("sglang_config_yaml expects a mapping of flag names to strings")
    lines = ["# SGLang --config file written by llmops.serving; every value is a quoted string."]
    for flag, value in list(flags.items()):
        if not isinstance(flag, str) or not _FLAG_NAME_RE.match(flag):
            raise AnsibleFilterError("sglang_config_yaml: %s: a key is not a flag name (letters, digits, - and _, "
                                     "without the leading dashes)" % name)
        try:
            check_text(value, "%s[%r]" % (name, flag))
        except SystemdSyntaxError as exc:
            raise AnsibleFilterError("sglang_config_yaml: %s" % exc) from None
        lines.append("%s: %s" % (flag, yaml_double_quoted(value)))
    return "\n".join(lines) + "\n"


class FilterModule:
    def filters(self):
        return {"sglang_config_yaml": sglang_config_yaml}
