# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy.yml's GPU plan (playbooks/tasks/gpu-plan.yml) on inventories/example as shipped: each container gets its own
GPUs of its node, by the minors of their device nodes; a second server on GPUs already given is refused naming both.

The nodes' GPUs are what pve_gpu_host publishes on a node (pve_gpu_host_gpus, pve_gpu_host_devices), set here as facts
in the shape nvidia_driver_facts returns them, with device minors that do not follow the index (as on real hosts):
nothing is reached over the network, the example's addresses are documentation addresses.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook

REPO = pathlib.Path(__file__).resolve().parents[3]


def node_facts(count):
    gpus = [{"index": index, "uuid": "GPU-%08x-0000-4000-8000-%012x" % (count, index), "minor": index ^ 1,
             "bus_id": "0000:%02x:00.0" % (0x18 + index), "memory_total_mib": 49140, "name": "NVIDIA RTX A6000"}
            for index in range(count)]
    devices = [{"path": "/dev/nvidia%d" % gpu["minor"], "type": "c", "major": 195, "minor": gpu["minor"]} for gpu in gpus]
    devices += [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                {"path": "/dev/nvidia-uvm", "type": "c", "major": 508, "minor": 0}]
    return {"pve_gpu_host_gpus": gpus, "pve_gpu_host_devices": devices, "pve_gpu_host_driver_version": "580.95.05"}


PLAYBOOK = """---
- name: The nodes' GPUs, as pve_gpu_host publishes them
  hosts: pve_nodes
  gather_facts: false
  tasks:
    - name: Publish them
      ansible.builtin.set_fact:
        pve_gpu_host_gpus: "{{{{ {facts}[inventory_hostname].pve_gpu_host_gpus }}}}"
        pve_gpu_host_devices: "{{{{ {facts}[inventory_hostname].pve_gpu_host_devices }}}}"
        pve_gpu_host_driver_version: "{{{{ {facts}[inventory_hostname].pve_gpu_host_driver_version }}}}"

- name: The container play's GPU plan
  hosts: sglang_servers
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.import_tasks: {tasks}

    # The device nodes pve_container passes for these inputs (deploy.yml's, to the role's own selection).
    - name: The pve_container role's choice of device nodes
      ansible.builtin.include_vars: {role_vars}

    - name: What each container gets
      ansible.builtin.debug:
        msg: "{{{{ {{'gpus': llmops_gpus, 'devices': _pve_container_gpu_devices, 'uuids': sglang_service_gpus,
                   'expected': nvidia_userspace_expected_gpu_uuids, 'driver': sglang_driver_version}} | to_json }}}}"
      vars:
        pve_container_gpu_style: raw
        pve_container_node_host: "{{{{ llmops_pve_node }}}}"
        pve_container_gpus: "{{{{ llmops_gpus | map(attribute='uuid') | list }}}}"
        pve_container_node_gpus: "{{{{ pve_gpu_host_node_gpus[llmops_pve_node].gpus }}}}"
        pve_container_gpu_devices: "{{{{ pve_gpu_host_node_gpus[llmops_pve_node].devices }}}}"
"""


@pytest.fixture
def example(tmp_path):
    """A copy of inventories/example, and the test playbook beside it."""
    inventory = tmp_path / "example"
    shutil.copytree(REPO / "inventories" / "example", inventory)
    facts = json.dumps({"pve1": node_facts(4)})
    playbook = tmp_path / "plan.yml"
    playbook.write_text(PLAYBOOK.format(facts=facts.replace('"', "'"), tasks=REPO / "playbooks" / "tasks" / "gpu-plan.yml",
                                        role_vars=REPO / "roles" / "pve_container" / "vars" / "main.yml"))
    return inventory, playbook


def run(inventory, playbook, *args):
    # Every host local: nothing may leave this machine, whatever the example's addresses say. The plan must not connect
    # to the nodes at all when they published their GPUs (asserted below).
    return ansible_playbook(str(playbook), "-e", "ansible_connection=local", *args, inventory=str(inventory), cwd=str(REPO),
                            timeout=300,
                            environment={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "SGLANG_API_KEY": "not-used",
                                         "PVE_ROOT_PASSWORD": "not-used", "HOME": os.environ.get("HOME", "/root")})


def assigned(result):
    return dict((item.host, json.loads(item.result["msg"])) for item in result.results if item.task.endswith("What each container gets"))


def test_the_example_gives_each_container_its_own_gpus_in_check_mode_too(example):
    inventory, playbook = example
    for mode in ([], ["--check"]):
        result = run(inventory, playbook, *mode)
        assert result.rc == 0, result.summary()
        got = assigned(result)
        reads = [item for item in result.results if item.task.endswith("Read the GPUs nvidia-smi lists on each node")]
        assert reads and all(item.result.get("skipped") for item in reads), reads
        assert {host: [gpu["index"] for gpu in plan["gpus"]] for host, plan in got.items()} == {
            "llm-qwen-a": [0, 1], "llm-qwen-b": [2, 3]}
        # By minor: GPU 0 of pve1 is /dev/nvidia1; every container also gets the node's control nodes.
        assert [device["path"] for device in got["llm-qwen-a"]["devices"]] == [
            "/dev/nvidia1", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
        assert [device["path"] for device in got["llm-qwen-b"]["devices"]] == [
            "/dev/nvidia3", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm"]
        assert got["llm-qwen-b"]["uuids"] == got["llm-qwen-b"]["expected"] == [gpu["uuid"] for gpu in got["llm-qwen-b"]["gpus"]]
        assert got["llm-qwen-a"]["driver"] == "580.95.05"


def test_two_servers_on_the_same_gpus_are_refused_before_any_change_naming_both(example):
    inventory, playbook = example
    (inventory / "host_vars" / "llm-qwen-b.yml").write_text(
        (inventory / "host_vars" / "llm-qwen-b.yml").read_text().replace("pve_container_gpus: [2, 3]", "pve_container_gpus: [1, 2]"))
    # With --limit on the other container: the plan is the whole inventory's.
    result = run(inventory, playbook, "--limit", "pve_nodes,llm-qwen-a")
    assert result.rc != 0
    said = " ".join(result.failures())
    assert "The GPU assignment cannot be made: GPU 1 (GPU-00000004-0000-4000-8000-000000000001) of pve1 is assigned to " \
           "llm-qwen-a and llm-qwen-b" in said, said
    assert "Nothing was changed" in said


def test_a_gpu_the_node_does_not_have_is_named_with_what_it_has(example):
    inventory, playbook = example
    (inventory / "host_vars" / "llm-qwen-b.yml").write_text(
        (inventory / "host_vars" / "llm-qwen-b.yml").read_text().replace("pve_container_gpus: [2, 3]", "pve_container_gpus: [4]"))
    result = run(inventory, playbook)
    assert result.rc != 0
    said = " ".join(result.failures())
    assert "llm-qwen-b: pve1 has no GPU 4 (it has 0=GPU-00000004-0000-4000-8000-000000000000, " in said, said
