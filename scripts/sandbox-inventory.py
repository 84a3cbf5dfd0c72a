#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox's containers beyond the two of inventories/sandbox/hosts.yml (`make sandbox SANDBOX_CONTAINERS=N`).

    sandbox-inventory.py COUNT [--inventory inventories/sandbox]

Writes <inventory>/sandbox-containers.yml with sandbox-llm-c, -d, ... (COUNT - 2 hosts) in the group sglang_servers,
each with the variables the two tracked ones have in host_vars/ (its address on the sandbox bridge, VMID, hostname,
instance and port), following their numbering; removes the file for COUNT 2. Ansible reads every file of an inventory
directory, so `ansible-playbook -i inventories/sandbox` sees them all; scripts/sandbox.sh down removes the file.
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
MAX_CONTAINERS = 26              # one letter each
FIRST_VMID = 301
FIRST_ADDRESS = 11               # 10.213.0.11 on the bridge llmsbx0 (10.213.0.0/24, pve-sim's gateway .1)
FIRST_PORT = 30000


def container(index):
    """Host name and variables of the index-th container (0 is sandbox-llm-a)."""
    letter = string.ascii_lowercase[index]
    return "sandbox-llm-%s" % letter, {
        "sandbox_container_ip": "10.213.0.%d" % (FIRST_ADDRESS + index),
        "pve_container_vmid": FIRST_VMID + index,
        "pve_container_hostname": "llm-%s" % letter,
        "sglang_service_instance": "qwen36-%s" % letter,
        "sglang_service_port": FIRST_PORT + index,
    }


def generated_inventory(count):
    """The inventory (a dict) of the containers past the tracked two; None when there are none."""
    if not TRACKED <= count <= MAX_CONTAINERS:
        raise ValueError("SANDBOX_CONTAINERS must be between %d and %d, not %d (for one container, keep two and run "
                         "ansible-playbook with --limit sandbox-llm-a)" % (TRACKED, MAX_CONTAINERS, count))
    hosts = dict(container(index) for index in range(TRACKED, count))
    if not hosts:
        return None
    return {"all": {"children": {"sglang_servers": {"hosts": hosts}}}}


def write(inventory_dir, count):
    """Write (or remove) the generated file; returns its path or None."""
    path = os.path.join(inventory_dir, GENERATED_NAME)
    inventory = generated_inventory(count)
    if inventory is None:
        if os.path.exists(path):
            os.unlink(path)
        return None
    # JSON is YAML: no YAML library needed, and the file is for machines.
    text = ("---\n# Written by scripts/sandbox-inventory.py for SANDBOX_CONTAINERS=%d; removed by `make sandbox-down`.\n%s\n"
            % (count, json.dumps(inventory, indent=2, sort_keys=True)))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int)
    parser.add_argument("--inventory", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                            "inventories", "sandbox"))
    options = parser.parse_args(argv)
    try:
        path = write(options.inventory, options.count)
    except ValueError as exc:
        sys.stderr.write("sandbox-inventory: %s\n" % exc)
        return 2
    if path:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
