# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_batches
short_description: The cutover's serial batch sizes, with every node of a multi-node model in one batch
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - From the hosts that cut over (in rollout order) and the nodes of each host's model, the list of batch sizes for a
    play's C(serial). A batch holds O(batch_size) servers; a multi-node model (C(sglang_service_model_group)) is one
    server with all of its nodes, because a node restarted alone takes the others down and systemd brings them back on
    their old deployment.
  - Fails, naming the model, when some of its nodes do not cut over or they are not next to each other in the order.
options:
  _input:
    description: The hosts that cut over, in rollout order.
    type: list
    elements: str
    required: true
  model_nodes:
    description: Host to the hosts of its model in rank order; a host that is missing, or maps to itself alone, runs a
      server on one node.
    type: dict
    required: true
  batch_size:
    description: Servers per batch, or a percentage of the servers that cut over (C("25%"), rounded down, at least 1).
    type: raw
    default: 1
"""

EXAMPLES = r"""
- name: Compute the batches
  ansible.builtin.set_fact:
    batches: "{{ ['a', 'm0', 'm1', 'b'] | llmops.serving.rollout_batches({'m0': ['m0', 'm1'], 'm1': ['m0', 'm1']}, 1) }}"
    # -> [1, 2, 1]
"""

RETURN = r"""
_value:
  description: Batch sizes in hosts, for C(serial).
  type: list
  elements: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import rollout_plan


def rollout_batches(hosts, model_nodes, batch_size=1):
    try:
        return rollout_plan.cutover_batches(hosts, model_nodes or {}, batch_size)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("rollout_batches: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"rollout_batches": rollout_batches}
