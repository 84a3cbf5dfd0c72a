# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_components
short_description: The component digests of what this run would deploy to a host
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "From P(llmops.serving.rollout_inputs#lookup)'s result (the collection digest and each role's option names) and the
    host's variables: one SHA-256 per role over the values its options have for this host (an option the inventory
    does not set counts as unset: the role's default is part of the collection digest), the collection digest, and one
    per O(state) entry (what the node and the container say, such as the host's driver version file or the staged model
    revision)."
  - Only digests are returned; a secret among the options is never in the result.
options:
  _input:
    description: The lookup's result (a dict with C(collection_digest) and C(options)).
    type: dict
    required: true
  variables:
    description: The host's variables (C(hostvars[inventory_hostname])).
    type: dict
    required: true
  state:
    description: Name to value of what was read from the node or the container.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Compute what this run would deploy
  ansible.builtin.set_fact:
    components: >-
      {{ lookup('llmops.serving.rollout_inputs', 'sglang', 'sglang_service')
         | llmops.serving.rollout_components(hostvars[inventory_hostname], {'model_revision': sglang_model_revision}) }}
"""

RETURN = r"""
_value:
  description: Component name (C(collection), C(options_<role>), C(state_<name>)) to SHA-256 hex digest.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import rollout_plan


def rollout_components(inputs, variables, state=None):
    if not isinstance(inputs, dict) or "collection_digest" not in inputs or "options" not in inputs:
        raise AnsibleFilterError("rollout_components expects the result of the llmops.serving.rollout_inputs lookup")
    values = {}
    for role, names in inputs["options"].items():
        values[role] = {name: variables[name] for name in names if name in variables}
    try:
        return rollout_plan.components(inputs["collection_digest"], values, state or {})
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"rollout_components": rollout_components}
