# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's node bridges (--bridge parsing and checks) and the LXC lines of net[n] and mp[n] (pure functions)."""
from __future__ import annotations

import ipaddress
import json
import os
import re
import sys

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import mounts, network, schema  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim import pct_config  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.runtime import TaskFailed, render_lxc_config  # noqa: E402  pylint: disable=wrong-import-position

HWADDR_RE = re.compile(r"^BC:24:11(?::[0-9A-F]{2}){3}$")


def net(network_text, dev):
    return (ipaddress.IPv4Network(network_text), dev)


def mtu_of(known):
    """A stand-in for read_bridge_mtu: the bridges in ``known`` exist with their MTU."""
    def read(bridge):
        if bridge not in known:
            raise TaskFailed("bridge '%s' does not exist" % (bridge or ""))
        return known[bridge]
    return read


def config(text):
    return pct_config.parse(text)


# -- --bridge NAME=GATEWAY/PREFIX ---------------------------------------------------------------------

def test_a_bridge_argument_names_the_bridge_and_the_hosts_address_on_it():
    spec = network.parse_bridge_arg("llmsbx0=10.213.0.1/24")
    assert (spec.name, spec.address, str(spec.network)) == ("llmsbx0", "10.213.0.1/24", "10.213.0.0/24")
    assert network.parse_bridge_arg("a" * 15 + "=192.168.77.1/30").name == "a" * 15
    assert str(network.parse_bridge_arg("br.lab-1=172.31.255.254/16").network) == "172.31.0.0/16"


@pytest.mark.parametrize("argument, message", [
    ("a" * 16 + "=10.213.0.1/24", "is longer than 15 characters"),
    ("llmsbx0", "expected NAME=GATEWAY/PREFIX"),
    ("=10.213.0.1/24", "expected NAME=GATEWAY/PREFIX"),
    ("llm/sbx=10.213.0.1/24", "may only contain letters, digits"),
    ("llmsbx0=10.213.0.1", "give the prefix length: 10.213.0.1/24"),
    ("llmsbx0=10.213.0.300/24", "is not an IPv4 address with a prefix length"),
    ("llmsbx0=8.8.8.1/24", "8.8.8.0/24 is not a private network (RFC 1918"),
    ("llmsbx0=172.32.0.1/24", "is not a private network"),
    ("llmsbx0=100.64.0.1/24", "is not a private network"),
    ("llmsbx0=10.0.0.1/7", "is not a private network"),
    ("llmsbx0=10.213.0.0/24", "is the network's network address"),
    ("llmsbx0=10.213.0.255/24", "is the network's broadcast address"),
    ("llmsbx0=10.213.0.1/31", "has no room for containers"),
])
def test_a_bad_bridge_argument_is_refused_with_what_is_wrong(argument, message):
    with pytest.raises(network.BridgeError) as info:
        network.parse_bridge_arg(argument)
    assert message in str(info.value)


def test_a_bridge_overlapping_a_route_on_another_interface_is_refused():
    spec = network.parse_bridge_arg("llmsbx0=10.213.0.1/24")
    with pytest.raises(network.BridgeError, match=r"10\.213\.0\.0/24 overlaps the host's route to 10\.0\.0\.0/8 on eth1"):
        network.check_bridges([spec], [net("10.0.0.0/8", "eth1")])
    with pytest.raises(network.BridgeError, match="overlaps the host's route to 10.213.0.128/25 on wg0"):
        network.check_bridges([spec], [net("10.213.0.128/25", "wg0")])
    # The bridge's own routes (a bridge that exists with that address) are no conflict; neither are other networks.
    network.check_bridges([spec], [net("10.213.0.0/24", "llmsbx0"), net("10.213.1.0/24", "eth0"), net("172.17.0.0/16", "docker0")])


def test_bridges_that_clash_among_themselves_are_refused():
    first = network.parse_bridge_arg("llmsbx0=10.213.0.1/24")
    with pytest.raises(network.BridgeError, match="--bridge llmsbx0 given twice"):
        network.check_bridges([first, network.parse_bridge_arg("llmsbx0=10.213.1.1/24")], [])
    with pytest.raises(network.BridgeError, match="overlaps --bridge llmsbx0=10.213.0.1/24"):
        network.check_bridges([first, network.parse_bridge_arg("llmsbx1=10.213.0.129/25")], [])


def test_host_routes_are_read_from_ip_json_without_default_local_and_broadcast_routes():
    # Constructed input in the shape of `ip -j -4 route show table all` (iproute2's JSON: dst, dev, type for non-unicast).
    routes = json.dumps([
        {"dst": "default", "gateway": "10.9.8.1", "dev": "eth0", "flags": []},
        {"dst": "10.9.8.0/24", "dev": "eth0", "protocol": "kernel", "scope": "link", "prefsrc": "10.9.8.7", "flags": []},
        {"dst": "192.168.50.4", "dev": "tun0", "flags": []},
        {"type": "local", "dst": "10.9.8.7", "dev": "eth0", "table": "local", "flags": []},
        {"type": "broadcast", "dst": "10.9.8.255", "dev": "eth0", "table": "local", "flags": []},
        {"type": "blackhole", "dst": "10.66.0.0/16", "flags": []},
    ])
    assert network.parse_ip_routes(routes) == [net("10.9.8.0/24", "eth0"), net("192.168.50.4/32", "tun0")]
    # Constructed input in the shape of `ip -j -4 addr show`.
    addresses = json.dumps([{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "10.9.8.7", "prefixlen": 24}]},
                            {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]}])
    assert network.parse_ip_addresses(addresses) == [net("10.9.8.0/24", "eth0"), net("127.0.0.0/8", "lo")]


# -- net[n]: stored value ----------------------------------------------------------------------------

def test_a_stored_netn_gets_a_generated_hwaddr_and_type_like_print_lxc_network():
    stored = schema.normalise("net0", "name=eth0,bridge=llmsbx0,ip=10.213.0.11/24,gw=10.213.0.1,firewall=true")
    items = dict(part.split("=", 1) for part in stored.split(","))
    assert stored.startswith("name=eth0,")
    assert list(items) == ["name", "bridge", "firewall", "gw", "hwaddr", "ip", "type"]
    assert items["firewall"] == "1" and items["type"] == "veth" and HWADDR_RE.match(items["hwaddr"])
    # Stable once stored: normalising it again keeps the address.
    assert schema.normalise("net0", stored) == stored
    given = schema.normalise("net1", "bridge=vmbr0,name=eth1,hwaddr=BC:24:11:AA:BB:CC")
    assert given == "name=eth1,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,type=veth"


def test_generated_hwaddrs_are_unicast_with_the_proxmox_prefix_and_differ():
    addresses = set(schema.random_hwaddr() for _index in range(64))
    assert len(addresses) == 64 and all(HWADDR_RE.match(address) for address in addresses)
    assert all(not int(address[:2], 16) & 1 for address in (schema.random_hwaddr(prefix="") for _index in range(16)))


def test_mount_point_paths_with_dot_segments_are_refused_like_verify_lxc_mp_string():
    with pytest.raises(schema.ParamError) as info:
        schema.verify({"mp0": "/srv/data,mp=/srv/../etc"}, {}, container_options=True)
    assert info.value.errors["mp0"].startswith("invalid format - format error\nmp: invalid format - /srv/../etc contains illegal character sequences\n")


# -- net[n] -> lxc.net.N.* --------------------------------------------------------------------------

def test_no_netn_keeps_the_container_on_loopback_only():
    assert network.render_net_lines(100, config("hostname: a\n"), mtu_of({})) == ["lxc.net.0.type = empty"]


def test_netn_becomes_a_veth_on_the_bridge_with_pves_names_and_the_static_address():
    lines = network.render_net_lines(120, config(
        "net1: name=eth1,bridge=lab1,hwaddr=BC:24:11:00:00:02,ip=192.168.77.5/24,mtu=1400,type=veth\n"
        "net0: name=eth0,bridge=llmsbx0,gw=10.213.0.1,hwaddr=BC:24:11:00:00:01,ip=10.213.0.11/24,type=veth\n"),
        mtu_of({"llmsbx0": 1500, "lab1": 9000}))
    assert lines == [
        "lxc.net.0.type = veth", "lxc.net.0.veth.pair = veth120i0", "lxc.net.0.hwaddr = BC:24:11:00:00:01", "lxc.net.0.name = eth0",
        "lxc.net.0.mtu = 1500", "lxc.net.0.link = llmsbx0", "lxc.net.0.ipv4.address = 10.213.0.11/24",
        "lxc.net.0.ipv4.gateway = 10.213.0.1", "lxc.net.0.flags = up",
        "lxc.net.1.type = veth", "lxc.net.1.veth.pair = veth120i1", "lxc.net.1.hwaddr = BC:24:11:00:00:02", "lxc.net.1.name = eth1",
        "lxc.net.1.mtu = 1400", "lxc.net.1.link = lab1", "lxc.net.1.ipv4.address = 192.168.77.5/24", "lxc.net.1.flags = up",
    ]


def test_a_link_down_netn_is_attached_but_not_brought_up():
    lines = network.render_net_lines(7, config("net0: name=eth0,bridge=b0,ip=10.1.0.2/24,link_down=1\n"), mtu_of({"b0": 1500}))
    assert "lxc.net.0.link = b0" in lines and not [line for line in lines if "flags" in line or "ipv4" in line]


@pytest.mark.parametrize("value, message", [
    ("name=eth0,bridge=vmbr9,ip=10.1.0.2/24", "bridge 'vmbr9' does not exist"),
    ("name=eth0,ip=10.1.0.2/24", "bridge '' does not exist"),
    ("name=eth0,bridge=b0,ip=dhcp", "pve-sim has no DHCP server: give net0 ip=<address>/<prefix>"),
    ("name=eth0,bridge=b0,ip=manual", "pve-sim has no DHCP server: give net0 ip=<address>/<prefix>"),
    ("name=eth0,bridge=b0,ip=10.1.0.2/24,ip6=auto", "pve-sim has no DHCPv6 or SLAAC: give net0 ip6=<address>/<prefix> or leave ip6 out"),
    ("name=eth0,bridge=b0,ip=10.1.0.2/24,tag=20", "pve-sim does not implement VLANs: remove tag from net0"),
    ("name=eth0,bridge=b0,ip=10.1.0.2/24,mtu=9000", "net0: MTU size '9000' is bigger than bridge MTU '1500'"),
])
def test_a_netn_pve_sim_cannot_realise_fails_the_start_with_a_clear_message(value, message):
    with pytest.raises(TaskFailed) as info:
        network.render_net_lines(5, config("net0: %s\n" % value), mtu_of({"b0": 1500}))
    assert str(info.value) == message


def test_read_bridge_mtu_of_a_missing_bridge_is_pves_error():
    with pytest.raises(TaskFailed, match=r"^bridge 'pvesim-nobr0' does not exist$"):
        network.read_bridge_mtu("pvesim-nobr0")
    assert network.read_bridge_mtu("lo") > 0


# -- mp[n] -> lxc.mount.entry ----------------------------------------------------------------------

def test_bind_mount_points_become_mount_entries_in_index_order(tmp_path):
    mirror = tmp_path / "mirror dir"
    mirror.mkdir()
    text = ("mp10: %s,mp=/srv/llmops-mirror/extra,mountoptions=noatime;nosuid\n" % tmp_path
            + "mp0: %s,mp=/srv/llmops-mirror,ro=1,backup=0\n" % mirror)
    assert mounts.render_mount_lines(config(text)) == [
        "lxc.mount.entry = %s/mirror\\040dir srv/llmops-mirror none bind,create=dir,ro 0 0" % tmp_path,
        "lxc.mount.entry = %s srv/llmops-mirror/extra none bind,create=dir,noatime,nosuid 0 0" % tmp_path,
    ]


@pytest.mark.parametrize("value, message", [
    ("/pve-sim/no/such/dir,mp=/srv/x", "directory '/pve-sim/no/such/dir' does not exist"),
    ("local-lvm:8,mp=/srv/x", "pve-sim does not implement storage-backed mount points (mp0: local-lvm:8,mp=/srv/x): use a bind mount"),
    ("local:120/vm-120-disk-1.raw,mp=/srv/x", "pve-sim does not implement storage-backed mount points"),
    ("/dev/sdb1,mp=/srv/x", "pve-sim does not implement device mount points (mp0: /dev/sdb1,mp=/srv/x)"),
])
def test_a_mount_point_pve_sim_cannot_realise_fails_the_start(value, message):
    with pytest.raises(TaskFailed) as info:
        mounts.render_mount_lines(config("mp0: %s\n" % value))
    assert str(info.value).startswith(message)


def test_the_whole_lxc_config_carries_net_and_mount_lines(tmp_path):
    text = ("hostname: web1\nmemory: 512\nmp0: %s,mp=/srv/llmops-mirror,ro=1\n" % tmp_path
            + "net0: name=eth0,bridge=llmsbx0,gw=10.213.0.1,hwaddr=BC:24:11:12:34:56,ip=10.213.0.11/24,type=veth\n")
    lines = render_lxc_config(130, config(text), "/r", 1, bridge_mtu=mtu_of({"llmsbx0": 1500})).splitlines()
    assert "lxc.net.0.type = empty" not in lines
    assert "lxc.net.0.link = llmsbx0" in lines and "lxc.net.0.veth.pair = veth130i0" in lines
    assert "lxc.mount.entry = %s srv/llmops-mirror none bind,create=dir,ro 0 0" % tmp_path in lines
    assert "lxc.net.0.type = empty" in render_lxc_config(130, config("hostname: web1\n"), "/r", 1).splitlines()
