# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sampling_protection
short_description: Which sampling keys the SGLang server supplies per endpoint when a client leaves them out
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Returns, per endpoint (C(/v1/chat/completions), C(/v1/completions), C(/generate)) and key, whether SGLang 0.5.23
    gives a request that leaves the key out the card's value, and by which mechanism (C(generation_config.json) or
    C(--preferred-sampling-params)). A value a client sends itself always wins."
  - Published next to the deployment record so that clients know what they must send (docs/sampling.md).
options:
  _input:
    description: The sampling mode, one of C(thinking_general), C(thinking_coding), C(non_thinking).
    type: str
    required: true
  overrides:
    description: Values that replace the card's; a null value removes a key.
    type: dict
    default: {}
  sampling_defaults:
    description: The server's C(--sampling-defaults), C(model) (SGLang's default) or C(openai).
    type: str
    default: model
"""

EXAMPLES = r"""
- name: Publish what the server protects
  ansible.builtin.copy:
    content: "{{ 'thinking_general' | llmops.serving.sampling_protection | to_nice_json }}"
    dest: /var/lib/llmops-serving/qwen36/sampling-protection.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: "C({endpoint: {key: {protected, mechanism, default, card}}})."
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def sampling_protection(mode, overrides=None, sampling_defaults="model"):
    if sampling_defaults not in ("model", "openai"):
        raise AnsibleFilterError("sampling_defaults must be model or openai, not %r" % (sampling_defaults,))
    try:
        return sampling_presets.server_protection(mode, overrides or {}, sampling_defaults)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"sampling_protection": sampling_protection}
