# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_plan
short_description: Which of its node's GPUs each server container gets, and what is wrong with the assignment
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Resolves every server container's C(pve_container_gpus) (C(all), or a list of the node's GPU indices as nvidia-smi
    numbers them on the node, and GPU UUIDs) against the GPUs its node's nvidia-smi lists, and checks the whole
    inventory at once: a GPU given to two containers is an error unless every container that gets it sets
    C(pve_container_gpus_shared); an index or UUID the node does not have, a GPU listed twice, a node without GPUs
    and a node whose GPUs are unknown are errors naming the container and the node."
  - The one place deploy.yml decides the assignment; C(pve_container) passes exactly these GPUs' device nodes (by
    their minor, which need not equal the index), C(sglang_service) records their UUIDs in the deployment and
    C(sglang_verify) checks the server holds exactly them.
options:
  _input:
    description:
      - "Each server container: C({host: {node: <its llmops_pve_node>, gpus: <its pve_container_gpus, null for all>,
        shared: <its pve_container_gpus_shared>}}). A container without a node is left out."
    type: dict
    required: true
  nodes:
    description:
      - "Each node's GPUs as C(llmops.serving.nvidia_driver_facts) lists them there (C(gpus): index, uuid, minor,
        ...): C({node: [gpu, ...]}); null for a node that could not be read."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Stop on a GPU given to two servers
  ansible.builtin.assert:
    that: _plan.errors | length == 0
    fail_msg: "{{ _plan.errors | join('; ') }}"
  vars:
    _plan: "{{ {'llm-a': {'node': 'pve1', 'gpus': [0, 1], 'shared': false}} | llmops.serving.gpu_plan(node_gpus) }}"
"""

RETURN = r"""
_value:
  description:
    - "C(assignments): C({host: [gpu, ...]}) in index order; C(errors): one message per problem (empty when the plan
      holds); C(co_tenants): C({host: [other hosts that share one of its GPUs]})."
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus


def gpu_plan(servers, nodes):
    if not isinstance(servers, dict) or not isinstance(nodes, dict):
        raise AnsibleFilterError("gpu_plan expects a dict of server containers and a dict of node GPU lists, not %s and %s"
                                 % (type(servers).__name__, type(nodes).__name__))
    for node, gpus in nodes.items():
        listed = isinstance(gpus, list) and all(isinstance(gpu, dict) and "uuid" in gpu and "index" in gpu for gpu in gpus)
        if gpus is not None and not listed:
            raise AnsibleFilterError("gpu_plan: the GPUs of node %s must be nvidia_driver_facts' gpus list" % node)
    return nvidia_gpus.plan(dict((str(host), dict(settings or {})) for host, settings in servers.items()), nodes)


class FilterModule:
    def filters(self):
        return {"gpu_plan": gpu_plan}
