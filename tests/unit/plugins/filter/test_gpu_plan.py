# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_plan and gpu_assignment filters: what deploy.yml and pve_container hand module_utils/nvidia_gpus, and how
they refuse what is not a node's GPU list (the assignment itself is tested in test_nvidia_gpus.py)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter import gpu_assignment as assignment_filter
from ansible_collections.llmops.serving.plugins.filter import gpu_plan as plan_filter

NODE = [{"index": 0, "uuid": "GPU-a", "minor": 1}, {"index": 1, "uuid": "GPU-b", "minor": 0}]


def test_the_plan_filter_resolves_the_inventorys_containers():
    plan = plan_filter.gpu_plan({"llm-a": {"node": "pve1", "gpus": [1], "shared": False},
                                 "llm-b": {"node": "pve1", "gpus": [1], "shared": False}}, {"pve1": NODE})
    assert [gpu["uuid"] for gpu in plan["assignments"]["llm-a"]] == ["GPU-b"]
    assert len(plan["errors"]) == 1 and "GPU 1 (GPU-b) of pve1 is assigned to llm-a and llm-b" in plan["errors"][0]
    assert plan_filter.FilterModule().filters()["gpu_plan"] is plan_filter.gpu_plan


@pytest.mark.parametrize("servers, nodes", [([], {}), ({}, []), ({}, {"pve1": [{"index": 0}]}), ({}, {"pve1": "GPU-a"})])
def test_the_plan_filter_refuses_what_is_not_its_input(servers, nodes):
    with pytest.raises(AnsibleFilterError):
        plan_filter.gpu_plan(servers, nodes)


def test_the_assignment_filter_gives_the_gpus_and_names_the_node_when_it_cannot():
    assert [gpu["minor"] for gpu in assignment_filter.gpu_assignment(NODE, ["GPU-b", 0], "pve1")] == [1, 0]
    with pytest.raises(AnsibleFilterError, match=r"pve_container_gpus: pve1 has no GPU 2 \(it has 0=GPU-a, 1=GPU-b\)"):
        assignment_filter.gpu_assignment(NODE, [2], "pve1")
    with pytest.raises(AnsibleFilterError, match="expects the node's GPUs"):
        assignment_filter.gpu_assignment([{"minor": 0}], "all", "pve1")
