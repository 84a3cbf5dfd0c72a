# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_assignment
short_description: The GPUs of a node that one container's assignment names
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Resolves C(pve_container_gpus) - C(all), or a list of GPU indices (nvidia-smi's numbering on the node) and GPU
    UUIDs - against the node's GPUs as C(llmops.serving.nvidia_driver_facts) lists them. Fails naming the node and
    what it has for an index or UUID it does not have, a GPU listed twice or an empty list."
  - "C(pve_container) passes the device nodes of these GPUs by their minor (C(/dev/nvidia<minor>)), which need not
    equal the index. The whole inventory's assignment, with the check for GPUs given to two containers, is
    C(llmops.serving.gpu_plan)."
options:
  _input:
    description: The node's GPUs (C(index), C(uuid), C(minor), ...).
    type: list
    elements: dict
    required: true
  request:
    description: C(all) (or null) or a list of GPU indices and UUIDs.
    type: raw
    required: true
  node:
    description: The node's name, for the messages.
    type: str
    default: the node
"""

EXAMPLES = r"""
- name: Show the minors of the device nodes this container gets
  ansible.builtin.debug:
    msg: "{{ pve_gpu_host_gpus | llmops.serving.gpu_assignment([0, 1], 'pve1') | map(attribute='minor') }}"
"""

RETURN = r"""
_value:
  description: The GPUs named, in index order.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus


def gpu_assignment(node_gpus, request, node="the node"):
    if not isinstance(node_gpus, list) or not all(isinstance(gpu, dict) and "uuid" in gpu and "index" in gpu for gpu in node_gpus):
        raise AnsibleFilterError("gpu_assignment expects the node's GPUs as nvidia_driver_facts lists them, not %r" % (node_gpus,))
    try:
        return nvidia_gpus.resolve(node_gpus, request, where=str(node))
    except nvidia_gpus.GpuError as error:
        raise AnsibleFilterError("pve_container_gpus: %s" % error) from None


class FilterModule:
    def filters(self):
        return {"gpu_assignment": gpu_assignment}
