# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: card_generation_config
short_description: The staged model's generation_config.json with the model card's sampling values
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Returns the checkpoint's C(generation_config.json) (the input) with the card's values for the keys SGLang 0.5.23
    takes from it for C(/v1/chat/completions) requests that leave them out (with C(--sampling-defaults model)):
    C(temperature), C(top_p), C(top_k), C(min_p), C(repetition_penalty); C(do_sample) is set so transformers keeps them."
  - C(presence_penalty) is not written; SGLang never reads it from this file (docs/sampling.md).
  - Other keys of the input are kept.
options:
  _input:
    description: The checkpoint's own C(generation_config.json), parsed; an empty dict or null when it has none.
    type: dict
    required: true
  mode:
    description: The sampling mode, one of C(thinking_general), C(thinking_coding), C(non_thinking).
    type: str
    required: true
  overrides:
    description: Values that replace the card's; a null value removes a key (the checkpoint's value then stays).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Give chat requests the card's values for the keys a client leaves out
  ansible.builtin.copy:
    content: "{{ original | llmops.serving.card_generation_config('thinking_general') | to_nice_json }}"
    dest: /srv/models/Qwen3.6-27B/generation_config.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The generation config to stage.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def card_generation_config(existing, mode, overrides=None):
    if existing is not None and not isinstance(existing, dict):
        raise AnsibleFilterError("card_generation_config expects the parsed generation_config.json (a dict)")
    try:
        return sampling_presets.card_generation_config(existing, mode, overrides or {})
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"card_generation_config": card_generation_config}
