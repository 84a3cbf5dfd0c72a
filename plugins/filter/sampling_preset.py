# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sampling_preset
short_description: The model card's sampling values for a mode, as clients must send them
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns the Qwen3.6 model card's recommended sampling values for a mode, with overrides applied, in the form the
    collection publishes with each deployment (C(sampling.json)) and the generation probe sends.
  - SGLang never takes C(presence_penalty) from C(generation_config.json), and for C(/v1/chat/completions) the request's
    values win, so clients must send these values themselves.
  - The values come from the same table the C(llmops.serving.generation_probe) module uses.
options:
  _input:
    description: The mode, one of C(thinking_general), C(thinking_coding), C(non_thinking).
    type: str
    required: true
  overrides:
    description: Request fields that replace the card's; a null value removes a field.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Publish the sampling values for clients
  ansible.builtin.copy:
    content: "{{ 'thinking_general' | llmops.serving.sampling_preset | to_nice_json }}"
    dest: /var/lib/llmops-serving/qwen36/sampling.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: C(mode), C(description), C(sampling), C(chat_template_kwargs) and C(source) of the preset.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def sampling_preset(mode, overrides=None):
    try:
        preset = sampling_presets.get_preset(mode)
        sampling, chat_template_kwargs = sampling_presets.request_sampling(mode, overrides or {})
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {
        "mode": mode,
        "description": preset["description"],
        "sampling": sampling,
        "chat_template_kwargs": chat_template_kwargs,
        "source": sampling_presets.SOURCE,
    }


class FilterModule:
    def filters(self):
        return {"sampling_preset": sampling_preset}
