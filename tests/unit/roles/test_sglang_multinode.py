# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One model across nodes (sglang_service_model_group): every node renders the same unit and deployment inputs, the
node's rank reaches SGLang only through node.env and the launcher, the input check refuses what SGLang or the unit could
not carry, and sglang_verify names the node that is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import yaml

from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO, render, render_file

SERVICE_VARS = ("roles/sglang_service/defaults/main.yml", "roles/sglang_service/vars/main.yml")
VERIFY_VARS = ("roles/sglang_verify/defaults/main.yml", "roles/sglang_verify/vars/main.yml")
NODES = ["gpu-node-1", "gpu-node-2"]
# What the inventory and the sglang role give every node of the model.
MODEL = {
    "sglang_venv": "/opt/sglang/envs/0.5.23-0123456789ab",
    "groups": {"big_model": NODES, "sglang_servers": ["other"] + NODES},
    "hostvars": {"gpu-node-1": {"ansible_host": "10.0.0.1"}, "gpu-node-2": {"ansible_host": "10.0.0.2"}},
    "sglang_service_model_group": "big_model",
    "sglang_service_tp_size": 4,
    "sglang_service_dist_interface": "ens1f0",
    "ansible_managed": "Ansible managed",
}
RENDERED = ("{{ [lookup('ansible.builtin.template', '%s/roles/sglang_service/templates/sglang.service.j2'),"
            " _sglang_service_argv, _sglang_service_record_inputs, _sglang_service_node_environment] }}" % REPO)


def node_view(host, **variables):
    """(unit text, argv, record inputs, node environment) as the role renders them on ``host``."""
    return render(RENDERED, dict(MODEL, inventory_hostname=host, **variables), SERVICE_VARS)


def test_every_node_renders_the_same_unit_and_deployment_and_only_its_node_file_differs():
    unit_1, argv_1, inputs_1, node_1 = node_view("gpu-node-1")
    unit_2, argv_2, inputs_2, node_2 = node_view("gpu-node-2")
    assert (unit_1, argv_1, inputs_1) == (unit_2, argv_2, inputs_2)
    flags = argv_1[argv_1.index("--tp-size"):]
    assert flags[:6] == ["--tp-size", "4", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:20000"]
    assert "--node-rank" not in argv_1, "the launcher adds the rank from node.env"
    assert "EnvironmentFile=/etc/llmops-serving/qwen36/node.env" in unit_1.splitlines()
    assert inputs_1["model_nodes"] == NODES, "a change of the ranks' order is a new deployment"
    assert node_1 == {"LLMOPS_NODE_RANK": "0", "NCCL_SOCKET_IFNAME": "ens1f0", "GLOO_SOCKET_IFNAME": "ens1f0"}
    assert node_2["LLMOPS_NODE_RANK"] == "1"


def test_the_node_file_gives_systemd_one_variable_per_line():
    # A node file that systemd reads as one comment would start every node as rank 0 (seen in the sandbox: rank 1
    # then tried to open rank 0's store on its own address and failed with EADDRNOTAVAIL).
    text = render_file("roles/sglang_service/templates/node.env.j2", dict(MODEL, inventory_hostname="gpu-node-2"),
                       var_files=SERVICE_VARS)
    assignments = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert assignments == ["GLOO_SOCKET_IFNAME=ens1f0", "LLMOPS_NODE_RANK=1", "NCCL_SOCKET_IFNAME=ens1f0"]


def test_a_server_on_one_node_keeps_its_unit_argv_and_deployment_inputs():
    unit, argv, inputs, _node = node_view("other", sglang_service_model_group="", sglang_service_tp_size=2)
    assert "node.env" not in unit
    assert not {"--nnodes", "--dist-init-addr", "--node-rank"} & set(argv)
    # The deployment inputs of every earlier release: no key added, so an upgrade alone is not a new deployment.
    assert sorted(inputs) == ["model_path", "model_revision", "package_environment", "sampling_mode",
                              "sampling_overrides", "sampling_server_defaults", "versions"]


def test_rank_0_is_reached_by_its_own_address_and_ipv6_in_brackets():
    expression = "{{ _sglang_service_dist_init_addr }}"
    ipv6 = dict(MODEL["hostvars"], **{"gpu-node-1": {"ansible_host": "fd00::1"}})
    assert render(expression, dict(MODEL, inventory_hostname="gpu-node-2", hostvars=ipv6), SERVICE_VARS) == "[fd00::1]:20000"
    assert render(expression, dict(MODEL, inventory_hostname="gpu-node-2", sglang_service_dist_init_host="ib0.node1",
                                   sglang_service_dist_init_port=5000), SERVICE_VARS) == "ib0.node1:5000"


def multinode_check(host="gpu-node-1", **variables):
    """The conditions of the role's multi-node check (tasks/validate.yml) that fail for these variables, and its message."""
    with open(os.path.join(REPO, "roles/sglang_service/tasks/validate.yml"), encoding="utf-8") as handle:
        task = next(task for task in yaml.safe_load(handle) if task["name"] == "Check the multi-node settings")
    conditions = task["ansible.builtin.assert"]["that"]
    expression = "{{ [%s] }}" % ", ".join("(%s) | bool" % condition for condition in conditions)
    # The task's own vars are templates: they go in as a variables file, which the renderer trusts as a play would.
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as task_vars:
        yaml.safe_dump(task["vars"], task_vars)
    try:
        var_files = SERVICE_VARS + (task_vars.name,)  # absolute: render() joins it to the repository unchanged
        context = dict(MODEL, inventory_hostname=host, **variables)
        holds = render(expression, context, var_files)
        failed = [condition for condition, held in zip(conditions, holds) if not held]
        return failed, render(task["ansible.builtin.assert"]["fail_msg"], context, var_files) if failed else None
    finally:
        os.unlink(task_vars.name)


def test_the_input_check_accepts_the_model_and_refuses_what_sglang_or_the_unit_cannot_take():
    assert multinode_check() == ([], None)
    failed, message = multinode_check(sglang_service_tp_size=3)
    assert failed and "not a multiple of the 2 nodes" in message
    failed, message = multinode_check(host="stranger")
    assert failed and "stranger is not in its model group big_model" in message
    failed, message = multinode_check(sglang_service_model_group="no_such_group")
    assert failed and "is not an inventory group" in message
    for hostile in ({"sglang_service_extra_flags": {"node-rank": 1}}, {"sglang_service_extra_args": ["--nnodes=3"]},
                    {"sglang_service_dist_interface": "eth0\nExecStartPre=+/bin/sh"},
                    {"sglang_service_dist_interface": "eth0 lo"}, {"sglang_service_dist_init_port": 70000},
                    {"sglang_service_dist_init_host": "10.0.0.1 --enable-x"}):
        failed, message = multinode_check(**hostile)
        assert failed, hostile
        assert "belong to the role" in message


def test_the_launcher_adds_the_nodes_rank_and_refuses_anything_else(tmp_path):
    launcher = tmp_path / "sglang-launch"
    launcher.write_text(render_file("roles/sglang_service/templates/sglang-launch.j2", {"ansible_managed": "test"}))
    server = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], 'LLMOPS_NODE_RANK' in os.environ]))"]

    def start(invocation, rank):
        env = {"PATH": os.environ["PATH"], "INVOCATION_ID": invocation, "LLMOPS_DEPLOYMENT_ID": "ab" * 32,
               "LLMOPS_LOG_DIR": str(tmp_path)}
        if rank is not None:
            env["LLMOPS_NODE_RANK"] = rank
        run = subprocess.run(["bash", str(launcher)] + server + ["--nnodes", "2"], env=env, capture_output=True,
                             text=True, timeout=60, check=False)
        with open(tmp_path / "current.log", encoding="utf-8") as handle:
            return run.returncode, handle.read().splitlines()[-1]

    assert start("1" * 32, "1") == (0, json.dumps([["--nnodes", "2", "--node-rank", "1"], False]))
    assert start("2" * 32, None) == (0, json.dumps([["--nnodes", "2"], False]))
    code, last = start("3" * 32, "1 --enable-debug")
    assert code == 2 and "LLMOPS_NODE_RANK is not a rank number" in last


def test_rank_0_names_the_node_that_is_down_with_its_rank():
    results = {"results": [
        {"item": "gpu-node-2", "failed": True, "msg": "sglang-qwen36.service is not active (inactive/dead)"},
    ]}
    problems = render("{{ [_sglang_verify_node_problems, _sglang_verify_serves_api, _sglang_verify_other_nodes] }}",
                      dict(MODEL, inventory_hostname="gpu-node-1", _sglang_verify_nodes=results), VERIFY_VARS)
    assert problems == [["node rank 1 (gpu-node-2): sglang-qwen36.service is not active (inactive/dead)"], True,
                        ["gpu-node-2"]]
    follower = render("{{ [_sglang_verify_node_rank | int, _sglang_verify_serves_api, _sglang_verify_node_problems] }}",
                      dict(MODEL, inventory_hostname="gpu-node-2"), VERIFY_VARS)
    assert follower == [1, False, []]


def node_deployment_check(deployments):
    """(holds, message) of sglang_service's check that the model's nodes recorded one deployment (tasks/service.yml)."""
    with open(os.path.join(REPO, "roles/sglang_service/tasks/service.yml"), encoding="utf-8") as handle:
        task = next(task for task in yaml.safe_load(handle)
                    if task["name"] == "Stop unless every node of the model recorded the same deployment")
    hostvars = {node: dict(MODEL["hostvars"][node], **({"sglang_service_deployment_id": deployment} if deployment else {}))
                for node, deployment in deployments.items()}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as task_vars:
        yaml.safe_dump(task["vars"], task_vars)
    try:
        context = dict(MODEL, inventory_hostname="gpu-node-1", hostvars=hostvars)
        var_files = SERVICE_VARS + (task_vars.name,)
        check = task["ansible.builtin.assert"]
        return render("{{ (%s) | bool }}" % check["that"], context, var_files), render(check["fail_msg"], context, var_files)
    finally:
        os.unlink(task_vars.name)


def test_the_nodes_restart_only_into_one_deployment():
    holds, _message = node_deployment_check({"gpu-node-1": "ab" * 32, "gpu-node-2": "ab" * 32})
    assert holds
    # A variable set for one node only makes its deployment differ: named before anything restarts.
    holds, message = node_deployment_check({"gpu-node-1": "ab" * 32, "gpu-node-2": "cd" * 32})
    assert not holds
    assert "gpu-node-1: abababababab..; gpu-node-2: cdcdcdcdcdcd.." in message and "Nothing was restarted" in message
    # A node that did not run the role in this play is no proof of the same deployment.
    holds, message = node_deployment_check({"gpu-node-1": "ab" * 32, "gpu-node-2": None})
    assert not holds and "gpu-node-2: none (not in this play" in message
