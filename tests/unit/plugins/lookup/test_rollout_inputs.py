# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_inputs lookup and rollout_components filter: the roles' documented options, the collection's digest."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError, AnsibleLookupError

from ansible_collections.llmops.serving.plugins.filter.rollout_components import rollout_components
from ansible_collections.llmops.serving.plugins.lookup import rollout_inputs
from ansible_collections.llmops.serving.plugins.module_utils import rollout_plan


def lookup(*roles):
    return rollout_inputs.LookupModule().run(list(roles))[0]


def test_options_are_the_argument_specs_and_the_digest_is_the_collections():
    found = lookup("sglang_service", "flash_attn")
    with open(rollout_inputs.COLLECTION_ROOT + "/roles/sglang_service/meta/argument_specs.yml", encoding="utf-8") as handle:
        documented = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    assert found["options"]["sglang_service"] == sorted(documented)
    assert "sglang_service_port" in found["options"]["sglang_service"]
    assert found["collection_digest"] == rollout_plan.tree_digest(rollout_inputs.COLLECTION_ROOT, ("roles", "plugins"))
    for bad in ("../etc", "no_such_role"):
        with pytest.raises(AnsibleLookupError):
            lookup(bad)


def test_components_take_only_the_documented_options_the_host_sets():
    inputs = {"collection_digest": "a" * 64, "options": {"sglang_service": ["sglang_service_port", "sglang_service_api_key"]}}
    host = {"sglang_service_port": 30000, "sglang_service_argv": ["published", "fact"], "unrelated": 1}
    base = rollout_components(inputs, host, {"model_revision": "r1"})
    # A fact that is not an option (sglang_service_argv) changes nothing; an option does.
    assert rollout_components(inputs, dict(host, sglang_service_argv=["other"]), {"model_revision": "r1"}) == base
    assert rollout_components(inputs, dict(host, sglang_service_port=30001), {"model_revision": "r1"}) != base
    assert rollout_components(inputs, dict(host, sglang_service_api_key="rotated"), {"model_revision": "r1"}) != base
    with pytest.raises(AnsibleFilterError):
        rollout_components({"options": {}}, host)
