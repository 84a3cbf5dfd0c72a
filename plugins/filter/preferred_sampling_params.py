# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: preferred_sampling_params
short_description: The model card's sampling values as SGLang's --preferred-sampling-params JSON
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns the card's values for a mode as the JSON object SGLang's C(--preferred-sampling-params) takes (keys
    sorted, no spaces). SGLang merges it per key into native C(/generate) requests, under the request's own values.
  - It never reaches C(/v1/chat/completions) or C(/v1/completions) requests; the OpenAI adapters fill every key
    before the merge (docs/sampling.md).
options:
  _input:
    description: The sampling mode, one of C(thinking_general), C(thinking_coding), C(non_thinking).
    type: str
    required: true
  overrides:
    description: Values that replace the card's; a null value removes a key.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Render the server flag
  ansible.builtin.set_fact:
    preferred: "{{ 'thinking_general' | llmops.serving.preferred_sampling_params }}"
# {"min_p":0.0,"presence_penalty":0.0,"repetition_penalty":1.0,"temperature":1.0,"top_k":20,"top_p":0.95}
"""

RETURN = r"""
_value:
  description: The JSON text for C(--preferred-sampling-params).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def preferred_sampling_params(mode, overrides=None):
    try:
        return sampling_presets.preferred_sampling_params(mode, overrides or {})
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"preferred_sampling_params": preferred_sampling_params}
