# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: model_nodes
short_description: The hosts that run one model together, in rank order
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "A model on one host: the host alone. A model across hosts (C(sglang_service_model_group)): the hosts of that
    inventory group, in the group's order, which is the node rank order (rank 0 first: it serves the API, the router
    sends requests to it, the others join through C(--dist-init-addr))."
  - "A group that is not in the inventory gives an empty list: the caller names the mistake (sglang_service's input
    check, the rollout plan's)."
  - The one definition sglang_service, sglang_verify, sglang_router and the rollout plan use.
options:
  _input:
    description: The host (C(inventory_hostname)).
    type: str
    required: true
  model_group:
    description: The host's C(sglang_service_model_group); empty for a model on one host.
    type: str
    required: true
  groups:
    description: The inventory's groups (C(groups)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the nodes of this host's model
  ansible.builtin.debug:
    msg: "{{ inventory_hostname | llmops.serving.model_nodes(sglang_service_model_group, groups) }}"
"""

RETURN = r"""
_value:
  description: The host names, rank 0 first.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


def model_nodes(host, model_group, groups):
    if not isinstance(host, str) or not host:
        raise AnsibleFilterError("model_nodes expects a host name, not %r" % (host,))
    if model_group is None or str(model_group) == "":
        return [host]
    try:
        members = groups.get(str(model_group))
    except AttributeError:
        raise AnsibleFilterError("model_nodes expects the inventory's groups, not %r" % (type(groups).__name__,)) from None
    return [str(member) for member in members] if members is not None else []


class FilterModule:
    def filters(self):
        return {"model_nodes": model_nodes}
