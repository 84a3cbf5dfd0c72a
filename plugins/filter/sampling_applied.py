# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sampling_applied
short_description: Which of the model card's sampling values the running SGLang server applies to chat requests
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Compares the chat defaults SGLang logged at start (C(Using default chat sampling params from model generation
    config), as M(llmops.serving.sglang_memory_plan) returns them in C(sampling_defaults) of
    RV(llmops.serving.sglang_memory_plan#module:actual)) with the card's values for a mode.
options:
  _input:
    description: The logged defaults (a dict; empty when SGLang logged none).
    type: dict
    required: true
  mode:
    description: The sampling mode, one of C(thinking_general), C(thinking_coding), C(non_thinking).
    type: str
    required: true
  overrides:
    description: Values that replace the card's; a null value removes a key.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Show which card values the server supplies
  ansible.builtin.debug:
    msg: "{{ plan.actual.sampling_defaults | default({}) | llmops.serving.sampling_applied('thinking_general') }}"
"""

RETURN = r"""
_value:
  description: C(applied) (keys with the card's value), C(differs) (key -> server and card value), C(missing) (keys the
    server does not supply; a client must send them).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import sampling_presets


def sampling_applied(chat_defaults, mode, overrides=None):
    if chat_defaults is not None and not isinstance(chat_defaults, dict):
        raise AnsibleFilterError("sampling_applied expects the logged chat defaults as a dict")
    try:
        return sampling_presets.applied_by_server(chat_defaults or {}, mode, overrides or {})
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"sampling_applied": sampling_applied}
