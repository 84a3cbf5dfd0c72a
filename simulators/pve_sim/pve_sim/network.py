# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's bridges (``--bridge NAME=GATEWAY/PREFIX``, a vmbr of a real node) and the LXC lines of ``net[n]``.

pve-sim creates a bridge only when it does not exist, records in STATE/bridges.json that it did (with its ifindex,
so that ``pve-sim stop`` removes that bridge and never a later one of the same name), and seals it: no IPv6 on the
host side and no IPv4 forwarding of what arrives on it (net.ipv4.conf.NAME.forwarding=0, which holds even where
the host forwards for Docker), so a container reaches the host's address on the bridge and the other containers on
it, and nothing beyond this machine. It never enables ip_forward and never adds NAT.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import time

from pve_sim import schema
from pve_sim.tasks import TaskFailed

IFNAMSIZ = 16  # the kernel's interface name buffer, NUL included: names have at most 15 characters
_BRIDGE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PRIVATE_NETWORKS = tuple(ipaddress.IPv4Network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))  # RFC 1918
RECORD = "bridges.json"
SYS_NET = "/sys/class/net"
PROC_SYS_NET = "/proc/sys/net"


class BridgeError(ValueError):
    """A --bridge request pve-sim refuses (nothing has been created)."""


class BridgeSpec:
    """One --bridge NAME=GATEWAY/PREFIX: the bridge's name and the host's address on it."""

    def __init__(self, name, interface):
        self.name = name
        self.interface = interface

    @property
    def network(self):
        return self.interface.network

    @property
    def address(self):
        return str(self.interface)

    def __repr__(self):
        return "BridgeSpec(%s=%s)" % (self.name, self.interface)


def parse_bridge_arg(text):
    """``NAME=GATEWAY/PREFIX`` -> BridgeSpec, or BridgeError saying what is wrong with it."""
    name, sep, address = text.partition("=")
    if not sep or not name or not address:
        raise BridgeError("--bridge %s: expected NAME=GATEWAY/PREFIX, e.g. llmsbx0=10.213.0.1/24" % text)
    if len(name) >= IFNAMSIZ:
        raise BridgeError("--bridge %s: bridge name '%s' is longer than %d characters (the kernel's limit for interface names)"
                          % (text, name, IFNAMSIZ - 1))
    if not _BRIDGE_NAME_RE.match(name):
        raise BridgeError("--bridge %s: bridge name '%s' may only contain letters, digits, '_', '.' and '-'" % (text, name))
    if "/" not in address:
        raise BridgeError("--bridge %s: give the prefix length: %s/24" % (text, address))
    try:
        interface = ipaddress.IPv4Interface(address)
    except ValueError:
        raise BridgeError("--bridge %s: '%s' is not an IPv4 address with a prefix length" % (text, address)) from None
    network = interface.network
    if not any(network.subnet_of(private) for private in PRIVATE_NETWORKS):
        raise BridgeError("--bridge %s: %s is not a private network (RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)"
                          % (text, network))
    if network.prefixlen > 30:
        raise BridgeError("--bridge %s: a /%d network has no room for containers (use /30 or shorter)" % (text, network.prefixlen))
    if interface.ip in (network.network_address, network.broadcast_address):
        raise BridgeError("--bridge %s: %s is the network's %s address, not a host address"
                          % (text, interface.ip, "network" if interface.ip == network.network_address else "broadcast"))
    return BridgeSpec(name, interface)


def parse_ip_routes(routes_json):
    """``ip -j -4 route show table all`` -> [(network, dev)] of the unicast routes, default routes left out
    (every network overlaps 0.0.0.0/0; a route there is no claim on a network)."""
    found = []
    for route in json.loads(routes_json or "[]"):
        if route.get("type", "unicast") != "unicast" or route.get("dst") in (None, "default"):
            continue
        try:
            network = ipaddress.IPv4Network(route["dst"], strict=False)
        except ValueError:
            continue
        if network.prefixlen:
            found.append((network, route.get("dev")))
    return found


def parse_ip_addresses(addresses_json):
    """``ip -j -4 addr show`` -> [(network, dev)] of every IPv4 address of the host."""
    found = []
    for link in json.loads(addresses_json or "[]"):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and "local" in info:
                found.append((ipaddress.IPv4Interface("%s/%s" % (info["local"], info.get("prefixlen", 32))).network, link.get("ifname")))
    return found


def check_bridges(specs, host_networks):
    """Refuse bridges whose network overlaps one of the host's routes or addresses on another interface, and
    requests that clash among themselves. ``host_networks``: [(network, dev)]. Pure."""
    seen = {}
    for spec in specs:
        if spec.name in seen:
            raise BridgeError("--bridge %s given twice" % spec.name)
        for other in seen.values():
            if spec.network.overlaps(other.network):
                raise BridgeError("--bridge %s=%s overlaps --bridge %s=%s" % (spec.name, spec.address, other.name, other.address))
        seen[spec.name] = spec
        for network, dev in host_networks:
            if dev != spec.name and spec.network.overlaps(network):
                raise BridgeError("--bridge %s=%s: %s overlaps the host's route to %s on %s; choose another network"
                                  % (spec.name, spec.address, spec.network, network, dev or "(no interface)"))


def _ip_json(*args):
    result = subprocess.run(["ip", "-j", "-4"] + list(args), capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise BridgeError("ip -j -4 %s failed: %s" % (" ".join(args), result.stderr.strip()))
    return result.stdout


def host_networks():
    """The host's IPv4 routes (all tables) and addresses, as [(network, dev)]."""
    return parse_ip_routes(_ip_json("route", "show", "table", "all")) + parse_ip_addresses(_ip_json("addr", "show"))


def validate_bridge_args(args, state_dir):
    """Parse and check every --bridge against this host; raise BridgeError before anything is created."""
    specs = [parse_bridge_arg(arg) for arg in args or ()]
    if specs:
        check_bridges(specs, host_networks())
        created = load_record_of(state_dir)
        for spec in specs:
            _check_existing(spec, created)
    return specs


# -- the host's links --------------------------------------------------------------------------

def link_exists(name):
    return os.path.exists(os.path.join(SYS_NET, name))


def _ifindex(name):
    try:
        with open(os.path.join(SYS_NET, name, "ifindex"), encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _is_bridge(name):
    return os.path.isdir(os.path.join(SYS_NET, name, "bridge"))


def _addresses_of(name):
    return [ipaddress.IPv4Interface("%s/%s" % (info["local"], info["prefixlen"]))
            for link in json.loads(_ip_json("addr", "show", "dev", name) or "[]")
            for info in link.get("addr_info", []) if info.get("family") == "inet"]


def _write_sysctl(path, value):
    with open(os.path.join(PROC_SYS_NET, path), "w", encoding="ascii") as handle:
        handle.write(value)


def _ip(*args):
    result = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise BridgeError("ip %s failed: %s" % (" ".join(args), result.stderr.strip()))


def seal(name):
    """What keeps a bridge's traffic on this machine: nothing arriving on it is forwarded; no IPv6 on the host side."""
    _write_sysctl("ipv4/conf/%s/forwarding" % name, "0")
    if os.path.exists(os.path.join(PROC_SYS_NET, "ipv6", "conf", name)):
        _write_sysctl("ipv6/conf/%s/disable_ipv6" % name, "1")


# Docker sets the FORWARD policy to DROP, and with br_netfilter loaded (bridge-nf-call-iptables = 1) frames between two
# ports of one bridge pass that chain too: containers on the bridge could reach the host but not each other. A Proxmox
# node's bridge passes them; this rule does the same for traffic that enters and leaves the same bridge, nothing more.
BRIDGE_NF_CALL_IPTABLES = "/proc/sys/net/bridge/bridge-nf-call-iptables"


def _intra_bridge_rule(name):
    return ["FORWARD", "-i", name, "-o", name, "-j", "ACCEPT"]


def _iptables(*args):
    return subprocess.run(["iptables", "-w"] + list(args), capture_output=True, text=True, timeout=30, check=False)


def bridge_netfilter_active():
    try:
        with open(BRIDGE_NF_CALL_IPTABLES, encoding="ascii") as handle:
            return handle.read().strip() == "1"
    except OSError:
        return False


def allow_intra_bridge(name, log=print):
    """Let the bridge's ports reach each other where br_netfilter filters them; True when this call added the rule."""
    if not bridge_netfilter_active() or shutil.which("iptables") is None:
        return False
    if _iptables("-C", *_intra_bridge_rule(name)).returncode == 0:
        return False
    result = _iptables("-I", *_intra_bridge_rule(name))
    if result.returncode != 0:
        raise BridgeError("iptables -I %s failed: %s" % (" ".join(_intra_bridge_rule(name)), result.stderr.strip()))
    log("pve-sim: bridge %s: its ports may reach each other (iptables FORWARD -i %s -o %s ACCEPT; br_netfilter is on)"
        % (name, name, name))
    return True


def remove_intra_bridge_rule(name):
    while shutil.which("iptables") is not None and _iptables("-C", *_intra_bridge_rule(name)).returncode == 0:
        if _iptables("-D", *_intra_bridge_rule(name)).returncode != 0:
            break


# -- the record in the state dir ----------------------------------------------------------------

def _record_path(state_dir):
    return os.path.join(state_dir, RECORD)


def load_record_of(state_dir):
    """{name: {"address", "ifindex"}} of the bridges this state dir's pve-sim created."""
    try:
        with open(_record_path(state_dir), encoding="utf-8") as handle:
            return json.load(handle).get("created", {})
    except (OSError, ValueError):
        return {}


def _save_record(state_dir, created):
    path = _record_path(state_dir)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"created": created}, handle, indent=1, sort_keys=True)
    os.replace(temporary, path)


def created_here(state_dir, name):
    """True when this state dir's pve-sim created the bridge ``name`` that exists now (same ifindex)."""
    entry = load_record_of(state_dir).get(name)
    return bool(entry) and _ifindex(name) == entry.get("ifindex")


def _check_existing(spec, created):
    """An existing interface of that name is used only when it is a bridge that already carries the address."""
    if not link_exists(spec.name):
        return False
    if not _is_bridge(spec.name):
        raise BridgeError("--bridge %s: %s exists and is not a bridge" % (spec.name, spec.name))
    entry = created.get(spec.name)
    if entry and entry.get("ifindex") == _ifindex(spec.name):
        return True
    if spec.interface not in _addresses_of(spec.name):
        raise BridgeError("--bridge %s=%s: bridge %s exists without address %s (pve-sim does not change interfaces it did not create)"
                          % (spec.name, spec.address, spec.name, spec.address))
    return True


def ensure_bridges(state_dir, specs, log=print):
    """Create the bridges that do not exist (recorded as created here) and seal them; use existing ones as they are."""
    created = load_record_of(state_dir)
    for spec in specs:
        entry = created.get(spec.name)
        if _check_existing(spec, created):
            if entry and entry.get("ifindex") == _ifindex(spec.name):
                if spec.interface not in _addresses_of(spec.name):
                    _ip("addr", "add", spec.address, "dev", spec.name)
                seal(spec.name)
                if allow_intra_bridge(spec.name, log=log) or entry.get("intra_bridge_rule"):
                    entry["intra_bridge_rule"] = True
                    _save_record(state_dir, created)
                _ip("link", "set", spec.name, "up")
                log("pve-sim: bridge %s (%s) created earlier by this node" % (spec.name, spec.address))
            else:
                if created.pop(spec.name, None):  # recorded, but the bridge of that name now is another one
                    _save_record(state_dir, created)
                log("pve-sim: bridge %s (%s) exists: used as it is, not removed at stop" % (spec.name, spec.address))
            continue
        _ip("link", "add", spec.name, "type", "bridge", "stp_state", "0", "forward_delay", "0")
        created[spec.name] = {"address": spec.address, "ifindex": _ifindex(spec.name)}
        _save_record(state_dir, created)
        try:
            seal(spec.name)
            if allow_intra_bridge(spec.name, log=log):
                created[spec.name]["intra_bridge_rule"] = True
                _save_record(state_dir, created)
            _ip("addr", "add", spec.address, "dev", spec.name)
            _ip("link", "set", spec.name, "up")
        except (BridgeError, OSError):
            remove_created_bridges(state_dir, names=[spec.name], log=lambda _text: None)
            raise
        log("pve-sim: created bridge %s with %s (no forwarding, no NAT)" % (spec.name, spec.address))


def remove_created_bridges(state_dir, names=None, log=print):
    """Delete the bridges this state dir's pve-sim created (all, or those in ``names``); others are never touched."""
    created = load_record_of(state_dir)
    for name in sorted(created):
        if names is not None and name not in names:
            continue
        entry = created.pop(name)
        if not link_exists(name):
            log("pve-sim: bridge %s is already gone" % name)
        elif _ifindex(name) != entry.get("ifindex"):
            log("pve-sim: left %s alone: it is not the bridge pve-sim created (ifindex changed)" % name)
        else:
            ports = sorted(os.listdir(os.path.join(SYS_NET, name, "brif"))) if os.path.isdir(os.path.join(SYS_NET, name, "brif")) else []
            if ports:
                log("pve-sim: bridge %s still has ports %s (running containers lose their network)" % (name, ", ".join(ports)))
            _ip("link", "del", name)
            log("pve-sim: removed bridge %s" % name)
        # The rule this node added goes with its bridge; a bridge of that name that is not ours keeps its rules.
        if entry.get("intra_bridge_rule") and not link_exists(name):
            remove_intra_bridge_rule(name)
        _save_record(state_dir, created)


# -- net[n] -> LXC ---------------------------------------------------------------------------------

def read_bridge_mtu(bridge):
    """PVE::Network::read_bridge_mtu: the bridge's MTU, or the error a start task dies with."""
    try:
        with open(os.path.join(SYS_NET, bridge or "", "mtu"), encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        raise TaskFailed("bridge '%s' does not exist" % (bridge or "")) from None


def veth_name(vmid, index):
    """PVE's host side of a container's netN: veth<vmid>i<N>."""
    return "veth%di%d" % (int(vmid), int(index))


def net_keys(config):
    """The netN keys of a config, by index."""
    return sorted((key for key in config.keys() if re.match(r"^net\d+$", key)), key=lambda key: int(key[3:]))


def render_net_lines(vmid, config, bridge_mtu=read_bridge_mtu):
    """The lxc.net.N.* lines of PVE's update_lxc_config for every netN (as a host-managed network: pve-sim sets the
    address from outside instead of writing the guest's /etc/network/interfaces), or ``lxc.net.0.type = empty``
    when the container has no network. Raises TaskFailed with what a start task dies with."""
    keys = net_keys(config)
    if not keys:
        return ["lxc.net.0.type = empty"]
    lines = []
    for key in keys:
        index = int(key[3:])
        try:
            net = schema.parse_net(config.get(key))
        except schema.FormatError as error:
            raise TaskFailed("unable to parse value of '%s' - %s" % (key, str(error).strip())) from None
        ip = net.get("ip")
        if ip in ("dhcp", "manual"):
            raise TaskFailed("pve-sim has no DHCP server: give %s ip=<address>/<prefix>" % key)
        ip6 = net.get("ip6")
        if ip6 in ("dhcp", "auto"):
            raise TaskFailed("pve-sim has no DHCPv6 or SLAAC: give %s ip6=<address>/<prefix> or leave ip6 out" % key)
        for option in ("tag", "trunks"):
            if net.get(option):
                raise TaskFailed("pve-sim does not implement VLANs: remove %s from %s" % (option, key))
        prefix = "lxc.net.%d." % index
        lines.append(prefix + "type = veth")
        lines.append(prefix + "veth.pair = %s" % veth_name(vmid, index))
        if net.get("hwaddr"):
            lines.append(prefix + "hwaddr = %s" % net["hwaddr"])
        lines.append(prefix + "name = %s" % net["name"])
        bridge = net.get("bridge")
        mtu_of_bridge = bridge_mtu(bridge)
        mtu = int(net.get("mtu") or mtu_of_bridge)
        if mtu > mtu_of_bridge:
            raise TaskFailed("%s: MTU size '%d' is bigger than bridge MTU '%d'" % (key, mtu, mtu_of_bridge))
        lines.append(prefix + "mtu = %d" % mtu)
        lines.append(prefix + "link = %s" % bridge)
        if schema.parse_boolean(net.get("link_down", "0")):
            continue
        if ip:
            lines.append(prefix + "ipv4.address = %s" % ip)
        if net.get("gw"):
            lines.append(prefix + "ipv4.gateway = %s" % net["gw"])
        if ip6 and ip6 != "manual":
            lines.append(prefix + "ipv6.address = %s" % ip6)
        if net.get("gw6"):
            lines.append(prefix + "ipv6.gateway = %s" % net["gw6"])
        lines.append(prefix + "flags = up")
    return lines


def wait_veths_gone(vmid, config, timeout=5.0):
    """Before a start: the host side of every netN must not exist (a reboot waits for the old one to go; another
    node's container with the same vmid on this machine is an error, not a takeover)."""
    names = [veth_name(vmid, int(key[3:])) for key in net_keys(config)]
    deadline = time.monotonic() + timeout
    while True:
        present = [name for name in names if link_exists(name)]
        if not present:
            return
        if time.monotonic() >= deadline:
            raise TaskFailed("network interface '%s' already exists on this host (another container with vmid %d?)"
                             % (present[0], int(vmid)))
        time.sleep(0.1)
