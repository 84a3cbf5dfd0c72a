# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox deploys inventories/example through the overlay inventories/sandbox, and the overlay holds only what
the sandbox alone needs. Every variable it sets is listed here with its kind: how the sandbox reaches the hosts
(connection), where they are on its bridge (address), where things are on this machine (path) and the stand-ins' own
settings (simulator). Anything else - a GPU assignment, a sizing, a flag, a timer the tests would like shorter - fails
here: the configuration the tests deploy is the example's, as a user copies it.
"""
from __future__ import annotations

import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
CONNECTION, ADDRESS, PATH, SIMULATOR = "connection", "address", "path", "simulator"
# Written by scripts/sandbox-inventory.py for test-scale variants (SANDBOX_CONTAINERS, SANDBOX_MODEL_NODES), removed by
# `make sandbox-down`; not part of the tracked overlay (tests/unit/scripts/test_sandbox_inventory.py covers them).
GENERATED = ("sandbox-containers.yml", "host_vars/pve1/sandbox-containers.yml",
             "group_vars/sandbox_multinode_model.yml")

OVERLAY = {
    "ansible_connection": CONNECTION,                 # the node is this machine
    "ansible_python_interpreter": CONNECTION,         # ... and runs the controller's Python
    "ansible_ssh_common_args": CONNECTION,            # the sandbox's own known_hosts
    "ansible_ssh_private_key_file": CONNECTION,
    "pve_container_api_port": CONNECTION,             # pve-sim's port
    "ansible_host": ADDRESS,                          # the node on loopback, the containers on the bridge llmsbx0
    "pve_container_net0": ADDRESS,                    # the bridge and its gateway
    "sglang_router_environment": ADDRESS,             # HF_ENDPOINT: no hub to reach from the sandbox
    "pve_container_ca_path": PATH,                    # pve-sim's certificate
    "pve_container_ssh_public_key_files": PATH,       # the sandbox's key
    "pve_container_extra_config": PATH,               # the mirror
    "sglang_hf_endpoint": ADDRESS,                    # the Hub stand-in on the bridge
    "pve_container_gpu_config_dir": PATH,             # pve-sim's /etc/pve/lxc
    "pve_container_gpu_lock_dir": PATH,
    "cuda_toolkit_repo_url": PATH,                    # the site mirror
    "nvidia_userspace_installer_url": PATH,
    "nvidia_userspace_proc_version_path": PATH,       # where pve-sim shows a container the node's /proc/driver/nvidia
    "sglang_find_links": PATH,
    "sglang_no_index": PATH,
    "sglang_router_find_links": PATH,
    "sglang_router_no_index": PATH,
    "sglang_router_dependency_pins": PATH,            # read from the mirror's wheels
    "pve_gpu_host_modules_load_path": PATH,           # the stand-in root of the node's /etc
    "pve_gpu_host_nvidia_modprobe": PATH,
    "pve_gpu_host_nvidia_smi": PATH,                  # the GPU kit's
    "pve_gpu_host_proc_version_path": PATH,
    "pve_gpu_host_systemd_unit_dirs": PATH,
    "pve_gpu_host_udev_rule_path": PATH,
    "pve_gpu_host_udevadm": PATH,
    "pve_gpu_host_systemctl": PATH,
    "pve_gpu_host_boot_check_dir": PATH,              # the boot check in the stand-in root, reading the kit's boot ID
    "pve_gpu_host_boot_check_unit_dir": PATH,
    "pve_gpu_host_boot_check_report": PATH,
    "pve_gpu_host_boot_id_path": PATH,
    "pve_gpu_host_preflight_lspci": PATH,             # the GPU kit's node: lspci, dkms, dmesg, sysfs, kernels
    "pve_gpu_host_preflight_dkms": PATH,
    "pve_gpu_host_preflight_kernel_log_command": PATH,
    "pve_gpu_host_preflight_sysfs_root": PATH,
    "pve_gpu_host_preflight_proc_devices": PATH,      # the kit's driver device list (the processes are real)
    "pve_gpu_host_preflight_modules_root": PATH,
    "pve_gpu_host_preflight_boot_dir": PATH,
    "pve_gpu_host_preflight_boot_pin_file": PATH,
    "pve_gpu_host_preflight_running_kernel": SIMULATOR,  # the kit's kernel, not this machine's
    "pve_gpu_host_preflight_container_config_dir": PATH,  # pve-sim's /etc/pve/lxc
    "nvidia_userspace_preflight_proc_devices": PATH,  # where a sandbox container sees the kit's /proc/devices
    "sglang_verify_boot_id_file": PATH,               # ... and the kit's boot ID
    "sandbox_dir": PATH,
    "sandbox_gpu_kit": PATH,
    "sandbox_pve_state": PATH,
    "sglang_verify_summary_dir": PATH,                # reports in the sandbox, not in the example's directory
    "llmops_rollout_report_dir": PATH,
    "llmops_deploy_lease_dir": PATH,                  # the stand-in root's /run/lock
    "sglang_router_report_dir": PATH,
    "pve_container_gpu_cgroup_version": SIMULATOR,    # the simulated node's cgroup layout, not this machine's
    "cuda_toolkit_repo_options": SIMULATOR,           # the stand-in repository is unsigned
    "sglang_service_server_command": SIMULATOR,       # sglang-sim
    "sglang_service_environment": SIMULATOR,          # SGLANG_SIM_* beside the example's own
    "sglang_service_read_write_paths": SIMULATOR,     # the driver stand-in's GPU memory ledger
}
# A variable about GPUs, their passthrough or the server's sizing.
GPU_RELATED = ("gpu", "nvidia", "cuda", "passthrough", "device", "tp_size", "mem_fraction", "running_requests",
               "context_length", "memory_ratio")


def variables(inventory):
    """{name: value} that an inventory directory sets, in hosts.yml (hosts and groups) and group_vars/host_vars."""
    root = REPO / "inventories" / inventory
    found = {}
    for path in sorted(root.rglob("*.yml")):
        if str(path.relative_to(root)) in GENERATED:
            continue
        data = yaml.safe_load(path.read_text()) or {}
        if path.name == "hosts.yml":
            groups = [data["all"]]
            while groups:
                group = groups.pop() or {}
                for host_vars in (group.get("hosts") or {}).values():
                    found.update(host_vars or {})
                found.update(group.get("vars") or {})
                groups.extend((group.get("children") or {}).values())
        else:
            found.update(data)
    return found


def hosts(inventory):
    data = yaml.safe_load((REPO / "inventories" / inventory / "hosts.yml").read_text())
    names, groups = set(), [data["all"]]
    while groups:
        group = groups.pop() or {}
        names.update(group.get("hosts") or {})
        groups.extend((group.get("children") or {}).values())
    return names


def test_every_variable_of_the_overlay_is_listed_with_its_kind():
    overlay = set(variables("sandbox"))
    assert sorted(overlay - set(OVERLAY)) == [], "set by the overlay and not listed here"
    assert sorted(set(OVERLAY) - overlay) == [], "listed here but no longer set by the overlay"
    assert set(OVERLAY.values()) == {CONNECTION, ADDRESS, PATH, SIMULATOR}


def test_the_overlay_adds_no_host_and_no_group_and_every_file_of_it_is_for_a_host_or_group_of_the_example():
    assert hosts("sandbox") == set()
    example_hosts = hosts("example")
    assert example_hosts >= {"pve1", "llm-qwen-a", "llm-qwen-b"}
    root = REPO / "inventories" / "sandbox"
    for path in root.glob("host_vars/*"):
        assert path.name.removesuffix(".yml") in example_hosts, path
    for path in root.glob("group_vars/*"):
        if str(path.relative_to(root)) not in GENERATED:
            assert path.name.removesuffix(".yml") in ("all", "pve_nodes", "sglang_servers", "sglang_routers"), path


def test_no_gpu_or_sizing_variable_of_the_example_is_changed_unless_it_says_where_something_is():
    for name, kind in OVERLAY.items():
        if any(word in name for word in GPU_RELATED):
            assert kind in (PATH, SIMULATOR, CONNECTION), name
    example = variables("example")
    for name in ("pve_container_gpus", "pve_gpu_host_expected_gpu_count", "pve_container_gpu_style",
                 "pve_container_gpu_backend", "sglang_service_tp_size", "sglang_service_max_running_requests",
                 "sglang_service_mamba_full_memory_ratio", "sglang_service_context_length", "sglang_service_extra_flags",
                 "sglang_service_api_key", "pve_container_api_password", "sglang_router_api_key"):
        assert name in example, name
        assert name not in OVERLAY, name


def test_a_mapping_the_example_sets_keeps_the_examples_entries_in_the_overlay():
    example, overlay = variables("example"), variables("sandbox")
    environment = overlay["sglang_service_environment"]
    assert {key: environment.get(key) for key in example["sglang_service_environment"]} == \
        example["sglang_service_environment"]
    assert all(key.startswith("SGLANG_SIM_") for key in set(environment) - set(example["sglang_service_environment"]))
    # The example's own mount points stay as they are (the mirror is one more).
    for key, value in (example.get("pve_container_extra_config") or {}).items():
        assert overlay["pve_container_extra_config"][key] == value, key


def test_the_sandbox_downloads_the_examples_model_from_its_hub_stand_in():
    example, overlay = variables("example"), variables("sandbox")
    assert example["sglang_model_download"] is True and example["sglang_model_repo"] == "Qwen/Qwen3.6-27B"
    assert not any(name.startswith("sglang_model") for name in overlay)
    script = (REPO / "scripts" / "sandbox.sh").read_text()
    host, port = overlay["sglang_hf_endpoint"].removeprefix("http://").split(":")
    assert "HUB_HOST=%s\n" % host in script and "HUB_PORT=%s\n" % port in script


def test_the_secrets_come_from_the_environment_as_in_the_example():
    # scripts/sandbox.sh exports PVE_ROOT_PASSWORD and SGLANG_API_KEY; the overlay never holds or reads a secret.
    overlay_text = "".join(path.read_text() for path in (REPO / "inventories" / "sandbox").rglob("*.yml"))
    assert "secrets" not in overlay_text and "root-password" not in overlay_text
