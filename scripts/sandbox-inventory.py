#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test-scale containers beyond the example's two (`make sandbox SANDBOX_CONTAINERS=N SANDBOX_MODEL_NODES=M`).

    sandbox-inventory.py COUNT [--model-nodes M] [--inventory inventories/sandbox]

The sandbox deploys inventories/example (llm-qwen-a and -b on pve1) through the overlay inventories/sandbox. For
COUNT > 2 or M > 0 this writes, in the overlay (all three removed again for COUNT 2 and M 0, and by
scripts/sandbox.sh down):

- sandbox-containers.yml: llm-qwen-c, -d, ... (COUNT - 2 hosts) in sglang_servers, each with what the example gives
  its two in host_vars/ (node, VMID, hostname, its own two GPUs of pve1) and its address on the sandbox bridge; with
  M >= 2, M more containers that run ONE model across them (multi-node tensor parallelism), in the model group
  MODEL_GROUP, a child of sglang_servers (in rank order);
- group_vars/MODEL_GROUP.yml: the model's instance, port and TP size. A file, and a child group, because the example's
  group_vars/sglang_servers.yml sets the TP size: among group variables from files, a child group's win (variables
  inline in an inventory file rank below every group_vars file);
- host_vars/pve1/sandbox-containers.yml: the GPUs pve1 must have (two per container), after the overlay's main.yml.

    sandbox-inventory.py COUNT ... [--pve-release 9|8] [--model-nodes-debian 12|13]

Each container gets the Debian release of the node's Proxmox VE release (PVE 9: Debian 13, the example's template;
PVE 8: Debian 12), the multi-node model's containers --model-nodes-debian. A container whose release is not the
example's gets its template as a host variable in sandbox-containers.yml (inventory host variables rank above the
example's group_vars files).
"""

from __future__ import annotations

import argparse
import json
import os
import string
import sys

# After hosts.yml in name order: Ansible reads an inventory directory sorted, and the rollout keeps that order.
GENERATED_NAME = "sandbox-containers.yml"
NODE = "pve1"
EXAMPLE_CONTAINERS = 2           # llm-qwen-a and -b: inventories/example
MAX_CONTAINERS = 16              # the GPU kit's 32 GPUs (pve_sim/gpu_kit.py MAX_GPUS), two per container
FIRST_VMID = 201                 # the example's numbering
FIRST_ADDRESS = 11               # 10.213.0.11 on the bridge llmsbx0 (10.213.0.0/24, pve-sim's gateway .1)
MODEL_GROUP = "sandbox_multinode_model"
# The multi-node model's own instance and port (every node runs the same unit: the same instance, port and flags).
MODEL_VARS = {
    "sglang_service_model_group": MODEL_GROUP,
    "sglang_service_instance": "qwen36-mn",
    "sglang_service_port": 30100,
    "sglang_service_dist_init_port": 30190,
    "sglang_service_dist_interface": "eth0",
    # Two ranks per container (the GPU kit's two GPUs): TP 2 per node times the nodes.
    "sglang_service_tp_size": None,
    "sglang_tp_size": None,
    # A node above rank 0 only logs SIGTERM (SGLang waits for rank 0's shutdown), so stopping it alone ends in
    # systemd's SIGKILL: the sandbox waits 15 s for that, not the default minute.
    "sglang_service_stop_timeout_sec": 15,
}
GPUS_PER_CONTAINER = 2
# The Debian release of each Proxmox VE release's containers, and PVE's template of each (its template index names).
DEBIAN_OF_PVE = {"9": "13", "8": "12"}
TEMPLATES = {"13": "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst", "12": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
EXAMPLE_DEBIAN = "13"            # inventories/example/group_vars/sglang_servers.yml: pve_container_ostemplate


def container(index):
    """Host name and inventory variables of the index-th container (0 is llm-qwen-a), as the example writes them."""
    letter = string.ascii_lowercase[index]
    return "llm-qwen-%s" % letter, {
        "llmops_pve_node": NODE,
        "ansible_host": "10.213.0.%d" % (FIRST_ADDRESS + index),
        "pve_container_vmid": FIRST_VMID + index,
        "pve_container_hostname": "llm-qwen-%s" % letter,
        # Its own GPUs of the node (two per container, in inventory order), as a user assigns them.
        "pve_container_gpus": [GPUS_PER_CONTAINER * index + gpu for gpu in range(GPUS_PER_CONTAINER)],
    }


def generated(count, model_nodes=0, pve_release="9", model_nodes_debian=None):
    """{relative path: content as a dict} of the generated files; empty for the example's own two containers on the
    example's Proxmox VE release."""
    if not EXAMPLE_CONTAINERS <= count <= MAX_CONTAINERS:
        raise ValueError("SANDBOX_CONTAINERS must be between %d and %d, not %d (for one container, keep two and run "
                         "ansible-playbook with --limit llm-qwen-a)" % (EXAMPLE_CONTAINERS, MAX_CONTAINERS, count))
    if model_nodes == 1 or model_nodes < 0 or count + model_nodes > MAX_CONTAINERS:
        raise ValueError("SANDBOX_MODEL_NODES must be 0 (no multi-node model) or 2 to %d, not %d"
                         % (MAX_CONTAINERS - count, model_nodes))
    if pve_release not in DEBIAN_OF_PVE:
        raise ValueError("SANDBOX_PVE_RELEASE must be %s, not %r" % (" or ".join(sorted(DEBIAN_OF_PVE)), pve_release))
    debian = DEBIAN_OF_PVE[pve_release]
    model_nodes_debian = model_nodes_debian or debian
    if model_nodes_debian not in TEMPLATES:
        raise ValueError("SANDBOX_MODEL_NODES_DEBIAN must be %s, not %r" % (" or ".join(sorted(TEMPLATES)), model_nodes_debian))

    def on(release, variables):
        return dict(variables, pve_container_ostemplate=TEMPLATES[release]) if release != EXAMPLE_DEBIAN else variables

    # The example's own containers appear only to get another release's template.
    hosts = dict((name, on(debian, {})) for name, _variables in (container(index) for index in range(EXAMPLE_CONTAINERS))
                 if debian != EXAMPLE_DEBIAN)
    hosts.update((name, on(debian, variables)) for name, variables in (container(index) for index in range(EXAMPLE_CONTAINERS, count)))
    # Listed last and together: the rollout cuts a multi-node model's nodes over in one batch.
    nodes = dict((name, on(model_nodes_debian, variables))
                 for name, variables in (container(index) for index in range(count, count + model_nodes)))
    if not hosts and not nodes:
        return {}
    servers = {"hosts": hosts} if hosts else {}
    if nodes:
        servers["children"] = {MODEL_GROUP: {"hosts": nodes}}
    files = {GENERATED_NAME: {"all": {"children": {"sglang_servers": servers}}}}
    if count + model_nodes > EXAMPLE_CONTAINERS:
        files[os.path.join("host_vars", NODE, GENERATED_NAME)] = {"pve_gpu_host_expected_gpu_count": GPUS_PER_CONTAINER * (count + model_nodes)}
    if nodes:
        tp_size = GPUS_PER_CONTAINER * model_nodes
        files[os.path.join("group_vars", MODEL_GROUP + ".yml")] = dict(
            MODEL_VARS, sglang_service_tp_size=tp_size, sglang_tp_size=tp_size)
    return files


def generated_paths(inventory_dir):
    return [os.path.join(inventory_dir, GENERATED_NAME),
            os.path.join(inventory_dir, "host_vars", NODE, GENERATED_NAME),
            os.path.join(inventory_dir, "group_vars", MODEL_GROUP + ".yml")]


def write(inventory_dir, count, model_nodes=0, pve_release="9", model_nodes_debian=None):
    """Write the generated files (and remove those this variant does not have); returns the paths written."""
    files = generated(count, model_nodes, pve_release, model_nodes_debian)
    written = []
    for path in generated_paths(inventory_dir):
        relative = os.path.relpath(path, inventory_dir)
        if relative not in files:
            if os.path.exists(path):
                os.unlink(path)
            continue
        # JSON is YAML: no YAML library needed, and the files are for machines.
        text = ("---\n# Written by scripts/sandbox-inventory.py for SANDBOX_CONTAINERS=%d SANDBOX_MODEL_NODES=%d "
                "SANDBOX_PVE_RELEASE=%s SANDBOX_MODEL_NODES_DEBIAN=%s; removed by `make sandbox-down`.\n%s\n"
                % (count, model_nodes, pve_release, model_nodes_debian or "", json.dumps(files[relative], indent=2, sort_keys=True)))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, nargs="?")
    parser.add_argument("--templates", action="store_true",
                        help="print the file names of the containers' templates (scripts/sandbox.sh builds them) and exit")
    parser.add_argument("--model-nodes", type=int, default=0)
    parser.add_argument("--pve-release", default="9")
    parser.add_argument("--model-nodes-debian")
    parser.add_argument("--inventory", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                            "inventories", "sandbox"))
    options = parser.parse_args(argv)
    if options.templates:
        for volume in TEMPLATES.values():
            print(volume.split(":vztmpl/", 1)[1])
        return 0
    if options.count is None:
        parser.error("COUNT is required")
    try:
        paths = write(options.inventory, options.count, options.model_nodes, options.pve_release, options.model_nodes_debian)
    except ValueError as exc:
        sys.stderr.write("sandbox-inventory: %s\n" % exc)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
