# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_inputs
short_description: What a deployment of a server is made of, as the controller sees it
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "Returns, for the rollout plan of C(deploy.yml): the digest of this collection's roles and plugins (the code and
    templates every deployment is rendered from; a new collection version changes it) and, per role, the names of the
    options its C(meta/argument_specs.yml) documents (the inputs an inventory can set)."
  - The values of those options are read by the playbook, per host; this lookup reads only the collection's files.
options:
  _terms:
    description: The roles whose options are returned (names under the collection's C(roles/)).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Read what a deployment is made of
  ansible.builtin.set_fact:
    inputs: "{{ lookup('llmops.serving.rollout_inputs', 'sglang', 'sglang_service') }}"
"""

RETURN = r"""
_raw:
  description: One dict.
  type: list
  elements: dict
  contains:
    collection_digest:
      description: SHA-256 over the relative path and content of every file under the collection's C(roles/) and C(plugins/).
      type: str
    options:
      description: Role name to the sorted option names of its C(main) entry point.
      type: dict
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.module_utils.common.yaml import yaml_load

from ansible_collections.llmops.serving.plugins.module_utils import rollout_plan

COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        options = {}
        for role in terms:
            if not isinstance(role, str) or not rollout_plan.ROLE_NAME_RE.match(role):
                raise AnsibleLookupError("rollout_inputs: %r is not a role name" % (role,))
            path = os.path.join(COLLECTION_ROOT, "roles", role, "meta", "argument_specs.yml")
            try:
                with open(path, encoding="utf-8") as handle:
                    specs = yaml_load(handle)
            except (OSError, ValueError) as exc:
                raise AnsibleLookupError("rollout_inputs: cannot read %s: %s" % (path, exc)) from exc
            options[role] = sorted(((specs or {}).get("argument_specs", {}).get("main", {}).get("options") or {}))
        digest = rollout_plan.tree_digest(COLLECTION_ROOT, ("roles", "plugins"))
        return [{"collection_digest": digest, "options": options}]
