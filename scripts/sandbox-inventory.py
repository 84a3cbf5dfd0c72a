#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox's containers beyond the two of inventories/sandbox/hosts.yml (`make sandbox SANDBOX_CONTAINERS=N
SANDBOX_MODEL_NODES=M`).

    sandbox-inventory.py COUNT [--model-nodes M] [--inventory inventories/sandbox]

Writes <inventory>/sandbox-containers.yml with sandbox-llm-c, -d, ... (COUNT - 2 hosts) in the group sglang_servers,
each with the variables the two tracked ones have in host_vars/ (its address on the sandbox bridge, VMID, hostname,
instance, port and GPUs), following their numbering. With M >= 2, M more containers after those run ONE model across them
(multi-node tensor parallelism): hosts sandbox-llm-<next letters> in sglang_servers and in the model group
MODEL_GROUP (in rank order), whose group variables give the model's instance, port and TP size (two ranks per
container: the GPU kit's two GPUs). Removes the file when there is nothing to add. Ansible reads every file of an
inventory directory, so `ansible-playbook -i inventories/sandbox` sees them all; scripts/sandbox.sh down removes the
file.
"""

from __future__ import annotations

import argparse
import json
import os
import string
import sys

# After hosts.yml in name order: Ansible reads an inventory directory sorted, and the rollout keeps that order.
GENERATED_NAME = "sandbox-containers.yml"
TRACKED = 2                      # sandbox-llm-a and -b: inventories/sandbox/hosts.yml and host_vars/
MAX_CONTAINERS = 16              # the GPU kit's 32 GPUs (pve_sim/gpu_kit.py MAX_GPUS), two per container
FIRST_VMID = 301
FIRST_ADDRESS = 11               # 10.213.0.11 on the bridge llmsbx0 (10.213.0.0/24, pve-sim's gateway .1)
FIRST_PORT = 30000
MODEL_GROUP = "sandbox_multinode_model"
# The multi-node model's own instance and port (every node runs the same unit: the same instance, port and flags).
# (group_vars/sglang_servers.yml wins over these for a name both set: it must not set these.)
MODEL_VARS = {
    "sglang_service_model_group": MODEL_GROUP,
    "sglang_service_instance": "qwen36-mn",
    "sglang_service_port": 30100,
    "sglang_service_dist_init_port": 30190,
    "sglang_service_dist_interface": "eth0",
    # Two ranks per container (the GPU kit's two GPUs): TP 2 per node times the nodes.
    "sglang_service_tp_size": None,
    # A node above rank 0 only logs SIGTERM (SGLang waits for rank 0's shutdown), so stopping it alone ends in
    # systemd's SIGKILL: the sandbox waits 15 s for that, not the default minute.
    "sglang_service_stop_timeout_sec": 15,
}
GPUS_PER_CONTAINER = 2


def container(index, own_server=True):
    """Host name and variables of the index-th container (0 is sandbox-llm-a); a node of the multi-node model gets its
    instance and port from the model group instead."""
    letter = string.ascii_lowercase[index]
    variables = {
        "sandbox_container_ip": "10.213.0.%d" % (FIRST_ADDRESS + index),
        "pve_container_vmid": FIRST_VMID + index,
        "pve_container_hostname": "llm-%s" % letter,
        # Its own GPUs of the kit (two per container, in inventory order), as a user assigns them.
        "pve_container_gpus": [GPUS_PER_CONTAINER * index + gpu for gpu in range(GPUS_PER_CONTAINER)],
    }
    if own_server:
        variables.update({"sglang_service_instance": "qwen36-%s" % letter, "sglang_service_port": FIRST_PORT + index})
    return "sandbox-llm-%s" % letter, variables


def generated_inventory(count, model_nodes=0):
    """The inventory (a dict) of the containers past the tracked two; None when there are none."""
    if not TRACKED <= count <= MAX_CONTAINERS:
        raise ValueError("SANDBOX_CONTAINERS must be between %d and %d, not %d (for one container, keep two and run "
                         "ansible-playbook with --limit sandbox-llm-a)" % (TRACKED, MAX_CONTAINERS, count))
    if model_nodes == 1 or model_nodes < 0 or count + model_nodes > MAX_CONTAINERS:
        raise ValueError("SANDBOX_MODEL_NODES must be 0 (no multi-node model) or 2 to %d, not %d"
                         % (MAX_CONTAINERS - count, model_nodes))
    hosts = dict(container(index) for index in range(TRACKED, count))
    # Listed last and together: the rollout cuts a multi-node model's nodes over in one batch.
    nodes = [container(index, own_server=False) for index in range(count, count + model_nodes)]
    hosts.update(nodes)
    if not hosts:
        return None
    children = {"sglang_servers": {"hosts": hosts}}
    if nodes:
        model_vars = dict(MODEL_VARS, sglang_service_tp_size=GPUS_PER_CONTAINER * model_nodes)
        children[MODEL_GROUP] = {"hosts": {name: None for name, dummy in nodes}, "vars": model_vars}
    return {"all": {"children": children}}


def write(inventory_dir, count, model_nodes=0):
    """Write (or remove) the generated file; returns its path or None."""
    path = os.path.join(inventory_dir, GENERATED_NAME)
    inventory = generated_inventory(count, model_nodes)
    if inventory is None:
        if os.path.exists(path):
            os.unlink(path)
        return None
    # JSON is YAML: no YAML library needed, and the file is for machines.
    text = ("---\n# Written by scripts/sandbox-inventory.py for SANDBOX_CONTAINERS=%d SANDBOX_MODEL_NODES=%d; removed by "
            "`make sandbox-down`.\n%s\n" % (count, model_nodes, json.dumps(inventory, indent=2, sort_keys=True)))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int)
    parser.add_argument("--model-nodes", type=int, default=0)
    parser.add_argument("--inventory", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                            "inventories", "sandbox"))
    options = parser.parse_args(argv)
    try:
        path = write(options.inventory, options.count, options.model_nodes)
    except ValueError as exc:
        sys.stderr.write("sandbox-inventory: %s\n" % exc)
        return 2
    if path:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
