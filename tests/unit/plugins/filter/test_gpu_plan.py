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


DEVICES = [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}, {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
           {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
           {"path": "/dev/nvidia-uvm", "type": "c", "major": 508, "minor": 0},
           {"path": "/dev/nvidia-caps", "type": "d", "major": None, "minor": None}]


def test_the_assignment_filter_gives_the_control_nodes_and_the_chosen_gpus_nodes_by_minor():
    picked = assignment_filter.gpu_assignment(DEVICES, NODE, ["GPU-a"], "pve1")
    assert [gpu["uuid"] for gpu in picked["gpus"]] == ["GPU-a"]
    # GPU-a (index 0) is minor 1; the nvidia-uvm node's minor 0 is another module's, not GPU-b's.
    assert [device["path"] for device in picked["devices"]] == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps"]
    assert [device["path"] for device in picked["gpu_devices"]] == ["/dev/nvidia1"]
    every = assignment_filter.gpu_assignment(DEVICES, [], "all", "pve1")
    assert every["devices"] == DEVICES and every["gpus"] == [] and len(every["gpu_devices"]) == 2


def test_the_assignment_filter_names_the_node_when_it_cannot():
    with pytest.raises(AnsibleFilterError, match=r"pve_container_gpus: pve1 has no GPU 2 \(it has 0=GPU-a, 1=GPU-b\)"):
        assignment_filter.gpu_assignment(DEVICES, NODE, [2], "pve1")
    with pytest.raises(AnsibleFilterError, match="pve1's GPU list is unknown, so only 'all' can be given"):
        assignment_filter.gpu_assignment(DEVICES, [], [0], "pve1")
    with pytest.raises(AnsibleFilterError, match="expects the node's GPUs"):
        assignment_filter.gpu_assignment(DEVICES, [{"minor": 0}], "all", "pve1")
    with pytest.raises(AnsibleFilterError, match="device nodes as a list of dicts"):
        assignment_filter.gpu_assignment("/dev/nvidia0", NODE, "all", "pve1")
