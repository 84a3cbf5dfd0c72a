# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: log_header_printf
short_description: The launcher's printf statement that writes a log file's header line
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Renders the shell C(printf) statement that writes the first line of a log file, with the marker and the keys in the
    order that C(log_provenance) and C(sglang_ready) parse (one definition, in module_utils C(deployment_layout)).
  - The input maps each header key to the shell word that gives its value; a key missing from the mapping, or one the
    header does not have, fails the rendering, so the launcher cannot drift from the parser.
options:
  _input:
    description: Header key -> shell word (quoted as the shell needs it), for exactly the keys C(instance), C(deployment_id),
      C(invocation_id), C(pid), C(started_at) and C(unit).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Render the header statement of a launcher
  ansible.builtin.copy:
    dest: /tmp/header.sh
    mode: "0644"
    content: |
      {{ {'instance': '"$I"', 'deployment_id': '"$D"', 'invocation_id': '"$INVOCATION_ID"', 'pid': '"$$"',
          'started_at': '"$started_at"', 'unit': '"$U"'} | llmops.serving.log_header_printf }}
    # -> printf '# llmops-serving instance=%s deployment_id=%s ... unit=%s\n' \
    #      "$I" "$D" "$INVOCATION_ID" "$$" "$started_at" "$U"
"""

RETURN = r"""
_value:
  description: Two lines, the C(printf) with its format and, continued after a backslash, the values in header order.
  type: str
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import deployment_layout


def log_header_printf(shell_words):
    if not isinstance(shell_words, Mapping):
        raise AnsibleFilterError("log_header_printf expects a mapping of header key to shell word")
    try:
        line_format = deployment_layout.format_header_line(dict.fromkeys(shell_words, "%s"))
    except ValueError as exc:
        raise AnsibleFilterError(f"log_header_printf: {exc}") from exc
    words = " ".join(str(shell_words[key]) for key in deployment_layout.HEADER_KEYS)
    return "printf '%s\\n' \\\n  %s" % (line_format, words)


class FilterModule:
    def filters(self):
        return {"log_header_printf": log_header_printf}
