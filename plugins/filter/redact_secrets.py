# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: redact_secrets
short_description: Mask secrets in every string of a value before it is printed, written or returned
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Applies the collection's one redaction function (module_utils C(redact)) to every string in a value, nested lists
    and mappings included - C(api_key=...) pairs and their quoted dict form, C(--api-key KEY), C(Authorization:) headers,
    C(Bearer) tokens, URL passwords - and masks each of O(secrets) wherever it appears.
  - For reports that copy messages of other tasks, such as the verification summary of C(sglang_verify).
options:
  _input:
    description: The value; strings in it are masked, everything else is kept as it is.
    type: raw
    required: true
  secrets:
    description: Literal secrets to mask wherever they appear (empty strings are ignored).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Print a message without the API key
  ansible.builtin.debug:
    msg: "{{ failure_message | llmops.serving.redact_secrets(secrets=[sglang_api_key]) }}"
"""

RETURN = r"""
_value:
  description: A copy of the input with every secret masked as C(********).
  type: raw
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.redact import redact_deep


def redact_secrets(value, secrets=()):
    if isinstance(secrets, str) or not isinstance(secrets, (list, tuple)):
        raise AnsibleFilterError("redact_secrets: secrets must be a list of strings")
    return redact_deep(value, [str(secret) for secret in secrets if secret])


class FilterModule:
    def filters(self):
        return {"redact_secrets": redact_secrets}
