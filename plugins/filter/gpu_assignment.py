# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_assignment
short_description: The device nodes and GPUs of a node that one container gets
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Resolves C(pve_container_gpus) - C(all), or a list of GPU indices (nvidia-smi's numbering on the node) and GPU
    UUIDs - against the node's GPUs as C(llmops.serving.nvidia_driver_facts) lists them, and picks from the node's
    discovered device nodes the ones to pass - every node that is not a GPU's (nvidiactl, nvidia-uvm, ...) and the GPU
    nodes of the chosen GPUs, found by their minor (C(/dev/nvidia<minor>)), which need not equal the index. A GPU node
    is NVIDIA's character device (major 195) below the driver's own minors."
  - Fails naming the node and what it has for an index or UUID it does not have, a GPU listed twice or an empty list;
    without the node's GPU list only C(all) can be resolved (every node is passed).
  - "C(pve_container) passes what it returns. The whole inventory's assignment, with the check for GPUs given to two
    containers, is C(llmops.serving.gpu_plan)."
options:
  _input:
    description: The node's device nodes (C(path), C(type), C(major), C(minor)), as C(pve_gpu_host_devices).
    type: list
    elements: dict
    required: true
  node_gpus:
    description: The node's GPUs (C(index), C(uuid), C(minor), ...), as C(pve_gpu_host_gpus); empty when unknown.
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
- name: Show the device nodes this container gets
  ansible.builtin.debug:
    msg: "{{ (pve_gpu_host_devices | llmops.serving.gpu_assignment(pve_gpu_host_gpus, [0, 1], 'pve1')).devices | map(attribute='path') }}"
"""

RETURN = r"""
_value:
  description:
    - "C(gpus): the GPUs named, in index order; C(devices): the device nodes to pass, in discovery order; C(gpu_devices):
      the GPU nodes among them."
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus


def gpu_assignment(devices, node_gpus, request, node="the node"):
    for name, value in (("the node's device nodes", devices), ("the node's GPUs", node_gpus)):
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise AnsibleFilterError("gpu_assignment expects %s as a list of dicts, not %r" % (name, value))
    if not all("uuid" in gpu and "index" in gpu for gpu in node_gpus):
        raise AnsibleFilterError("gpu_assignment expects the node's GPUs as nvidia_driver_facts lists them")
    try:
        return nvidia_gpus.select_devices(devices, node_gpus, request, where=str(node))
    except nvidia_gpus.GpuError as error:
        raise AnsibleFilterError("pve_container_gpus: %s" % error) from None


class FilterModule:
    def filters(self):
        return {"gpu_assignment": gpu_assignment}
