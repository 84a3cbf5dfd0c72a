# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/sandbox-inventory.py: SANDBOX_CONTAINERS=N and SANDBOX_MODEL_NODES=M add containers that follow the
example's two exactly, through files in the overlay that Ansible ranks where they must win."""

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
ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), SGLANG_API_KEY="k", PVE_ROOT_PASSWORD="p")


@pytest.fixture
def inventories(tmp_path):
    """Copies of the example and of the overlay without generated files (the script writes into the copy)."""
    example, overlay = tmp_path / "example", tmp_path / "sandbox"
    shutil.copytree(os.path.join(REPO, "inventories", "example"), example)
    shutil.copytree(os.path.join(REPO, "inventories", "sandbox"), overlay)
    for path in inventory.generated_paths(str(overlay)):
        if os.path.exists(path):
            os.unlink(path)
    return example, overlay


def host_vars(example, overlay, host):
    listed = subprocess.run([shutil.which("ansible-inventory", path=os.path.join(REPO, ".venv", "bin")) or "ansible-inventory",
                             "-i", str(example), "-i", str(overlay), "--host", host],
                            capture_output=True, text=True, check=True, timeout=120, env=ENV)
    return json.loads(listed.stdout)


def test_the_first_two_are_the_examples_containers_with_the_overlays_addresses():
    for index, name in enumerate(("llm-qwen-a", "llm-qwen-b")):
        with open(os.path.join(REPO, "inventories", "example", "host_vars", name + ".yml"), encoding="utf-8") as handle:
            example = yaml.safe_load(handle)
        with open(os.path.join(REPO, "inventories", "sandbox", "host_vars", name + ".yml"), encoding="utf-8") as handle:
            overlay = yaml.safe_load(handle)
        assert inventory.container(index) == (name, dict(example, **overlay))


def test_four_containers_add_c_and_d_and_two_removes_every_generated_file(tmp_path):
    written = inventory.write(str(tmp_path), 4)
    assert sorted(os.path.relpath(path, str(tmp_path)) for path in written) == [
        "host_vars/pve1/sandbox-containers.yml", "sandbox-containers.yml"]
    text = open(os.path.join(str(tmp_path), inventory.GENERATED_NAME), encoding="utf-8").read()
    hosts = yaml.safe_load(text)["all"]["children"]["sglang_servers"]["hosts"]
    assert sorted(hosts) == ["llm-qwen-c", "llm-qwen-d"]
    assert hosts["llm-qwen-d"] == {"llmops_pve_node": "pve1", "ansible_host": "10.213.0.14", "pve_container_vmid": 204,
                                   "pve_container_hostname": "llm-qwen-d", "pve_container_gpus": [6, 7]}
    assert text.startswith("---\n")
    assert json.loads(text.split("\n", 2)[2])["all"]["children"]["sglang_servers"]["hosts"] == hosts
    node = yaml.safe_load(open(os.path.join(str(tmp_path), "host_vars", "pve1", inventory.GENERATED_NAME), encoding="utf-8"))
    assert node == {"pve_gpu_host_expected_gpu_count": 8}
    assert inventory.write(str(tmp_path), 2) == []
    assert not any(os.path.exists(path) for path in inventory.generated_paths(str(tmp_path)))


@pytest.mark.parametrize("count", [0, 1, 17])
def test_counts_outside_what_the_gpu_kit_serves_are_refused(tmp_path, count, capsys):
    assert inventory.main([str(count), "--inventory", str(tmp_path)]) == 2
    assert "between 2 and 16" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("nodes", [1, -1, 15])
def test_a_model_on_one_node_or_past_the_letters_is_refused(tmp_path, nodes, capsys):
    assert inventory.main(["2", "--model-nodes", str(nodes), "--inventory", str(tmp_path)]) == 2
    assert "SANDBOX_MODEL_NODES" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_ansible_sees_the_added_hosts_with_the_examples_settings_and_the_node_the_gpus_they_need(inventories):
    example, overlay = inventories
    inventory.write(str(overlay), 3)
    added = host_vars(example, overlay, "llm-qwen-c")
    assert added["ansible_host"] == "10.213.0.13" and added["sglang_service_context_length"] == 131072
    assert added["pve_container_gpus"] == [4, 5] and added["sglang_service_tp_size"] == 2
    # The example says pve1 has four GPUs; the overlay's generated file, read after its main.yml, says six.
    assert host_vars(example, overlay, "pve1")["pve_gpu_host_expected_gpu_count"] == 6


def test_a_multi_node_model_wins_over_the_examples_tp_size_and_comes_last(inventories):
    example, overlay = inventories
    inventory.write(str(overlay), 2, model_nodes=2)
    ansible = shutil.which("ansible", path=os.path.join(REPO, ".venv", "bin")) or "ansible"
    listed = subprocess.run(
        [ansible, "-i", str(example), "-i", str(overlay), "llm-qwen-d", "-m", "ansible.builtin.debug", "-a",
         "msg={{ [groups['sglang_servers'], groups['%s'], sglang_service_instance, sglang_service_port, "
         "sglang_service_tp_size, sglang_tp_size] }}" % inventory.MODEL_GROUP],
        capture_output=True, text=True, check=True, timeout=120,
        env=dict(ENV, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"))
    shown = json.loads(listed.stdout)["plays"][0]["tasks"][0]["hosts"]["llm-qwen-d"]["msg"]
    # In rank order after the example's servers (the rollout cuts the model's nodes over in one batch).
    assert shown == [["llm-qwen-a", "llm-qwen-b", "llm-qwen-c", "llm-qwen-d"], ["llm-qwen-c", "llm-qwen-d"], "qwen36-mn",
                     30100, 4, 4]
    assert host_vars(example, overlay, "pve1")["pve_gpu_host_expected_gpu_count"] == 8
    # The example's own servers keep the example's TP size.
    assert host_vars(example, overlay, "llm-qwen-b")["sglang_service_tp_size"] == 2


def test_the_examples_template_is_the_debian_release_the_script_calls_the_examples():
    with open(os.path.join(REPO, "inventories", "example", "group_vars", "sglang_servers.yml"), encoding="utf-8") as handle:
        example = yaml.safe_load(handle)
    assert example["pve_container_ostemplate"] == inventory.TEMPLATES[inventory.EXAMPLE_DEBIAN]
    assert inventory.DEBIAN_OF_PVE["9"] == inventory.EXAMPLE_DEBIAN


def test_a_pve_8_node_gives_every_container_debian_12_and_the_example_alone_adds_no_gpus(tmp_path):
    written = inventory.write(str(tmp_path), 2, pve_release="8")
    assert [os.path.relpath(path, str(tmp_path)) for path in written] == ["sandbox-containers.yml"]
    hosts = yaml.safe_load(open(written[0], encoding="utf-8"))["all"]["children"]["sglang_servers"]["hosts"]
    # Only the template: the example's hosts keep everything else from the example.
    assert hosts == {name: {"pve_container_ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
                     for name in ("llm-qwen-a", "llm-qwen-b")}
    files = inventory.generated(3, model_nodes=2, pve_release="8")
    servers = files[inventory.GENERATED_NAME]["all"]["children"]["sglang_servers"]
    assert {host["pve_container_ostemplate"] for host in list(servers["hosts"].values())
            + list(servers["children"][inventory.MODEL_GROUP]["hosts"].values())} == {inventory.TEMPLATES["12"]}


def test_the_model_nodes_alone_can_run_another_debian_release(tmp_path):
    files = inventory.generated(2, model_nodes=2, model_nodes_debian="12")
    servers = files[inventory.GENERATED_NAME]["all"]["children"]["sglang_servers"]
    assert "hosts" not in servers
    nodes = servers["children"][inventory.MODEL_GROUP]["hosts"]
    assert [nodes[name]["pve_container_ostemplate"] for name in ("llm-qwen-c", "llm-qwen-d")] == [inventory.TEMPLATES["12"]] * 2
    # On the example's release, the example's own Debian adds nothing.
    assert "pve_container_ostemplate" not in inventory.generated(4)[inventory.GENERATED_NAME]["all"]["children"][
        "sglang_servers"]["hosts"]["llm-qwen-c"]


@pytest.mark.parametrize("argv,message", [(["--pve-release", "7"], "SANDBOX_PVE_RELEASE must be 8 or 9, not '7'"),
                                          (["--model-nodes-debian", "11"], "SANDBOX_MODEL_NODES_DEBIAN must be 12 or 13, not '11'")])
def test_a_release_the_sandbox_has_no_template_for_is_refused(tmp_path, capsys, argv, message):
    assert inventory.main(["2", "--inventory", str(tmp_path)] + argv) == 2
    assert message in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_ansible_gives_the_examples_containers_the_pve_8_template_over_the_examples_group_vars(inventories):
    example, overlay = inventories
    inventory.write(str(overlay), 2, pve_release="8")
    seen = host_vars(example, overlay, "llm-qwen-a")
    assert seen["pve_container_ostemplate"] == inventory.TEMPLATES["12"]
    assert seen["ansible_host"] == "10.213.0.11" and seen["pve_container_gpus"] == [0, 1]


def test_the_templates_the_sandbox_builds_are_the_inventorys(capsys):
    assert inventory.main(["--templates"]) == 0
    assert capsys.readouterr().out.split() == [volume.split(":vztmpl/")[1] for volume in inventory.TEMPLATES.values()]
