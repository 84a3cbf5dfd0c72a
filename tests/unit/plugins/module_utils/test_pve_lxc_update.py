"""pve_lxc_update: send only what differs, compare as Proxmox stores values."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_update import (
    PlanError,
    apply_changes,
    create_params,
    device_keys,
    plan_update,
    property_items,
    render_options,
    values_equal,
)

# Built by hand in the shape of a GET /nodes/{node}/lxc/{vmid}/config answer (not captured from a node) for a container
# created with net0 name=eth0,bridge=vmbr0,ip=dhcp: PVE adds hwaddr and type=veth to net0 itself; integers are JSON numbers.
CURRENT = {
    "arch": "amd64", "cores": 4, "memory": 8192, "swap": 512, "hostname": "sglang", "ostype": "debian", "unprivileged": 1,
    "onboot": 1, "features": "nesting=1", "rootfs": "local-lvm:vm-120-disk-0,size=32G",
    "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:2A:01,ip=dhcp,type=veth", "tags": "gpu;llm",
    "description": "SGLang server\n", "digest": "5f2c1e0c8a3d9b7e6f4a2c1b0d9e8f7a6b5c4d3e",
    "lxc": [["lxc.cgroup2.devices.allow", "c 195:* rwm"]],
}


def test_an_unchanged_config_sends_nothing():
    wanted = {"hostname": "sglang", "cores": 4, "memory": "8192", "onboot": True, "features": "nesting=true",
              "net0": "ip=dhcp,bridge=vmbr0,name=eth0", "rootfs": "local-lvm:32", "unprivileged": True, "description": "SGLang server",
              "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    assert plan_update(CURRENT, wanted) == ({}, [])


def test_only_what_differs_is_sent_and_null_deletes():
    params, changes = plan_update(CURRENT, {"cores": 8, "memory": 8192, "tags": None, "swap": None, "nameserver": None,
                                            "net0": "name=eth0,bridge=vmbr1,ip=dhcp"})
    assert params == {"cores": "8", "net0": "name=eth0,bridge=vmbr1,ip=dhcp", "delete": "swap,tags"}
    assert changes == [
        {"key": "cores", "action": "set", "old": "4", "new": "8"},
        {"key": "net0", "action": "set", "old": CURRENT["net0"], "new": "name=eth0,bridge=vmbr1,ip=dhcp"},
        {"key": "swap", "action": "delete", "old": "512", "new": None},
        {"key": "tags", "action": "delete", "old": "gpu;llm", "new": None},
    ]
    after = apply_changes(CURRENT, changes)
    assert after["cores"] == "8" and "swap" not in after and "tags" not in after and "digest" not in after and "lxc" not in after


def test_unprivileged_cannot_change_and_says_why():
    with pytest.raises(PlanError, match="option 'unprivileged' is 1 on the existing container and cannot change after creation"):
        plan_update(CURRENT, {"unprivileged": False})
    with pytest.raises(PlanError, match="cannot be removed"):
        plan_update(CURRENT, {"rootfs": None})


def test_property_strings_compare_items_order_free_and_only_the_given_ones():
    assert values_equal("features", "keyctl=1,nesting=1", "nesting=1,keyctl=1")
    assert not values_equal("features", "keyctl=1,nesting=1", "nesting=1")
    assert values_equal("dev0", "path=/dev/nvidia0,gid=44", "/dev/nvidia0,gid=44")
    assert not values_equal("dev0", "/dev/nvidia1", "/dev/nvidia0")
    assert values_equal("description", "a\nb\n\n", "a\nb")
    assert values_equal("cpulimit", 2.0, 2) and not values_equal("cpulimit", 1.5, 2)
    assert not values_equal("hostname", "a", None)
    assert property_items("name=eth0, ip=dhcp ,firewall=yes") == {"name": "eth0", "ip": "dhcp", "firewall": "1"}


def test_create_params_carry_options_and_create_only_values():
    params = create_params(120, {"hostname": "sglang", "onboot": True, "tags": None},
                           {"ostemplate": "local:vztmpl/x.tar.zst", "password": None, "storage": "", "unprivileged": True})
    assert params == {"vmid": 120, "hostname": "sglang", "onboot": "1", "ostemplate": "local:vztmpl/x.tar.zst", "unprivileged": "1"}


def test_render_options_looks_like_the_config_file():
    text = render_options({"memory": "8192", "cores": "4", "description": "SGLang server\nline two\n"}, [["lxc.mount.entry", "a b none bind"]])
    assert text == "#SGLang server\n#line two\ncores: 4\nmemory: 8192\nlxc.mount.entry: a b none bind\n"


def test_device_keys():
    assert device_keys({"dev10": "/dev/a", "dev2": "/dev/b", "devices": "x", "net0": "y"}) == ["dev10", "dev2"]
