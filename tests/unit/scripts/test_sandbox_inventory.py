# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/sandbox-inventory.py: SANDBOX_CONTAINERS=N adds containers that follow the tracked two exactly."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("sandbox_inventory", os.path.join(REPO, "scripts", "sandbox-inventory.py"))
inventory = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(inventory)


@pytest.fixture
def inventory_copy(tmp_path):
    """The real sandbox inventory directory, copied without a generated file: what the script writes joins hosts.yml
    and the group's variables apply to it."""
    copy = tmp_path / "sandbox"
    shutil.copytree(os.path.join(REPO, "inventories", "sandbox"), copy,
                    ignore=shutil.ignore_patterns(inventory.GENERATED_NAME))
    return copy


def test_the_first_two_are_the_tracked_host_vars():
    for index, name in enumerate(("sandbox-llm-a", "sandbox-llm-b")):
        with open(os.path.join(REPO, "inventories", "sandbox", "host_vars", name + ".yml"), encoding="utf-8") as handle:
            tracked = yaml.safe_load(handle)
        assert inventory.container(index) == (name, tracked)


def test_four_containers_add_c_and_d_and_two_removes_the_file(tmp_path):
    path = inventory.write(str(tmp_path), 4)
    text = open(path, encoding="utf-8").read()
    hosts = yaml.safe_load(text)["all"]["children"]["sglang_servers"]["hosts"]
    assert sorted(hosts) == ["sandbox-llm-c", "sandbox-llm-d"]
    assert hosts["sandbox-llm-d"] == {"sandbox_container_ip": "10.213.0.14", "pve_container_vmid": 304,
                                      "pve_container_hostname": "llm-d", "pve_container_gpus": [6, 7],
                                      "sglang_service_instance": "qwen36-d", "sglang_service_port": 30003}
    assert text.startswith("---\n")
    assert json.loads(text.split("\n", 2)[2])["all"]["children"]["sglang_servers"]["hosts"] == hosts
    assert inventory.write(str(tmp_path), 2) is None and not os.path.exists(path)


@pytest.mark.parametrize("count", [0, 1, 17])
def test_counts_outside_what_the_gpu_kit_serves_are_refused(tmp_path, count, capsys):
    assert inventory.main([str(count), "--inventory", str(tmp_path)]) == 2
    assert "between 2 and 16" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_ansible_sees_the_generated_hosts_with_the_sandbox_group_vars(inventory_copy):
    copy = inventory_copy
    inventory.write(str(copy), 3)
    ansible_inventory = shutil.which("ansible-inventory", path=os.path.join(REPO, ".venv", "bin")) or "ansible-inventory"
    listed = subprocess.run([ansible_inventory, "-i", str(copy), "--list", "--export"], capture_output=True, text=True,
                            check=True, timeout=120, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
    data = json.loads(listed.stdout)
    assert data["sglang_servers"]["hosts"] == ["sandbox-llm-a", "sandbox-llm-b", "sandbox-llm-c"]
    assert data["_meta"]["hostvars"]["sandbox-llm-c"]["sglang_service_port"] == 30002


def test_a_multi_node_model_adds_its_nodes_last_in_its_model_group(tmp_path):
    path = inventory.write(str(tmp_path), 3, model_nodes=2)
    children = yaml.safe_load(open(path, encoding="utf-8"))["all"]["children"]
    assert list(children["sglang_servers"]["hosts"]) == ["sandbox-llm-c", "sandbox-llm-d", "sandbox-llm-e"]
    model = children[inventory.MODEL_GROUP]
    assert list(model["hosts"]) == ["sandbox-llm-d", "sandbox-llm-e"]
    # The nodes share the model's instance and port (the same unit on both), so their host vars must not set them.
    assert children["sglang_servers"]["hosts"]["sandbox-llm-e"] == {
        "sandbox_container_ip": "10.213.0.15", "pve_container_vmid": 305, "pve_container_hostname": "llm-e",
        "pve_container_gpus": [8, 9]}
    assert model["vars"]["sglang_service_model_group"] == inventory.MODEL_GROUP
    assert model["vars"]["sglang_service_tp_size"] == 4


@pytest.mark.parametrize("nodes", [1, -1, 15])
def test_a_model_on_one_node_or_past_the_letters_is_refused(tmp_path, nodes, capsys):
    assert inventory.main(["2", "--model-nodes", str(nodes), "--inventory", str(tmp_path)]) == 2
    assert "SANDBOX_MODEL_NODES" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_ansible_gives_the_model_nodes_the_model_group_vars_and_its_tp_size_to_the_sglang_role(inventory_copy):
    copy = inventory_copy
    inventory.write(str(copy), 2, model_nodes=2)
    ansible = shutil.which("ansible", path=os.path.join(REPO, ".venv", "bin")) or "ansible"
    listed = subprocess.run(
        [ansible, "-i", str(copy), "sandbox-llm-d", "-m", "ansible.builtin.debug", "-a",
         "msg={{ [groups['sglang_servers'], groups['%s'], sglang_service_instance, sglang_service_port, sglang_tp_size] }}"
         % inventory.MODEL_GROUP],
        capture_output=True, text=True, check=True, timeout=120,
        env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                 ANSIBLE_LOAD_CALLBACK_PLUGINS="1"))
    shown = json.loads(listed.stdout)["plays"][0]["tasks"][0]["hosts"]["sandbox-llm-d"]["msg"]
    assert shown == [["sandbox-llm-a", "sandbox-llm-b", "sandbox-llm-c", "sandbox-llm-d"],
                     ["sandbox-llm-c", "sandbox-llm-d"], "qwen36-mn", 30100, 4]
