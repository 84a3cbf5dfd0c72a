# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE simulator on real LXC: a privileged container created through the API, GPU kit nodes passed in both
styles, and the devices cgroup proved from INSIDE the container (ENXIO = allowed, no driver; EPERM = no allow line);
an unprivileged container (PVE's id map, deny-list devices cgroup) where the device nodes' owners and modes decide
instead, and systemd's LoadCredential works; and two unprivileged containers on the node's bridge, reached over SSH
at their own addresses, each with its own host keys and a read-only bind mount of a host directory.

Needs root, lxc (lxc-start) and the local debootstrap template (built into .build/pve-sim-cache, or taken from
PVE_SIM_TEMPLATE_CACHE, and rebuilt there when its recipe is stale); the SSH test also needs ssh and ssh-keygen.
Everything it creates lives in temporary state dirs (below /tmp, searchable for the containers' root uid 100000),
/dev/pvesim-<id>/ and a bridge pvst<id> on a free 10.213.X.0/24, all removed.
"""
from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import random
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.llmops.serving.tests.integration.pve_sim_support import (
    OPEN_PROBE, SIM_SOURCE, TEMPLATE, PveSim, ensure_template, running_pve_sim, searchable_directory, sim_cli, wait_system_running,
    wait_task)

UVM_MAJOR = 508

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="real LXC containers and mknod in /dev need root"),
    pytest.mark.skipif(shutil.which("lxc-start") is None, reason="lxc-start is missing (apt-get install lxc)"),
]
pytest.importorskip("proxmoxer")


@pytest.fixture(scope="module")
def node():
    dev_dir = pathlib.Path("/dev/pvesim-%s" % uuid.uuid4().hex[:8])
    try:
        with searchable_directory("pve-sim-lxc.") as base, running_pve_sim(base / "state") as sim:
            kit = sim_cli("gpu-kit", "--root", sim.state / "gpu-kit", "--uvm-major", UVM_MAJOR, "--gpus", 2, "--driver-version", "580.95.05",
                          "--dev-dir", dev_dir, "--real-dev")
            assert kit.returncode == 0, kit.stderr
            yield {"api": sim.api(), "state": sim.state, "dev": dev_dir, "sim": sim}
    finally:
        shutil.rmtree(dev_dir, ignore_errors=True)


def test_gpu_passthrough_in_both_styles_is_proved_inside_the_container(node):
    api, state, dev, sim = node["api"], node["state"], node["dev"], node["sim"]
    vmid = int(api.cluster.nextid.get())
    # dev[n] style through the API, as root@pam with a ticket. PRIVILEGED: only there does the devices cgroup keep its
    # allow list (common.conf), so that a missing allow line shows as EPERM; an unprivileged container allows every
    # device (see the next test).
    upid = api.nodes("pve").lxc.post(vmid=vmid, ostemplate="local:vztmpl/" + TEMPLATE, hostname="gpu-sim", cores=1, memory=768,
                                     unprivileged=0, dev0="%s/nvidia0" % dev, dev1="%s/nvidia-uvm" % dev)
    wait_task(api, upid)
    # Raw style: lines written into the config file on the node, as the collection's file backend does.
    conf = state / "etc" / "pve" / "lxc" / ("%d.conf" % vmid)
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup2.devices.allow: c 195:* rwm\n")
        for name in ("nvidia1", "nvidiactl", "nvidia-uvm-tools"):
            handle.write("lxc.mount.entry: %s/%s %s/%s none bind,optional,create=file\n" % (dev, name, str(dev).lstrip("/"), name))
    wait_task(api, api.nodes("pve").lxc(vmid).status.start.post())
    assert api.nodes("pve").lxc(vmid).status.current.get()["status"] == "running"

    hostname = sim.pct_exec(vmid, "hostname")
    assert hostname.stdout.strip() == "gpu-sim"
    limit = sim.pct_exec(vmid, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit.returncode == 0:  # cgroup v1 host: memory becomes the v1 limit
        assert int(limit.stdout.strip()) == 768 * 1024 * 1024

    paths = ["%s/%s" % (dev, name) for name in ("nvidia0", "nvidia-uvm", "nvidia1", "nvidiactl", "nvidia-uvm-tools")]
    seen = sim.open_inside(vmid, paths)
    assert seen == {
        paths[0]: "ENXIO",  # dev0: PVE-style allow of 195:0
        paths[1]: "ENXIO",  # dev1: allow of the uvm major's minor 0
        paths[2]: "ENXIO",  # raw: c 195:* rwm
        paths[3]: "ENXIO",  # raw: c 195:* rwm covers nvidiactl (195:255)
        paths[4]: "EPERM",  # raw mount of nvidia-uvm-tools (508:1) without an allow line for its major
    }

    # The missing allow line as a cgroup v1 key: the node is pure cgroup v2 (every PVE 9 node, a PVE 8 node unless booted
    # hybrid), where LXC ignores every v1 setting with a warning, so the node stays refused.
    start_log = next((state / "lxc").glob("*%d/start.log" % vmid))
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup.devices.allow: c %d:* rwm\n" % UVM_MAJOR)
    wait_task(api, api.nodes("pve").lxc(vmid).status.reboot.post(timeout=30))
    assert sim.open_inside(vmid, [paths[4]]) == {paths[4]: "EPERM"}
    assert "Ignoring legacy cgroup limits on pure cgroup2 system" in start_log.read_text()
    # The same line as a cgroup v2 key takes effect at the next start.
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup2.devices.allow: c %d:* rwm\n" % UVM_MAJOR)
    wait_task(api, api.nodes("pve").lxc(vmid).status.reboot.post(timeout=30))
    assert sim.open_inside(vmid, [paths[4]]) == {paths[4]: "ENXIO"}

    wait_task(api, api.nodes("pve").lxc(vmid).status.stop.post())
    assert api.nodes("pve").lxc(vmid).status.current.get()["status"] == "stopped"
    wait_task(api, api.nodes("pve").lxc(vmid).delete())
    assert not conf.exists()
    assert not any((state / "lxc").iterdir())


# Run as root inside: the id map and, for each path, its (uid, gid, mode) as the container sees them.
OWNER_PROBE = r"""
import json, os, sys
seen = {"uid_map": open("/proc/self/uid_map").read().split()}
for path in sys.argv[1:]:
    info = os.stat(path)
    seen[path] = [info.st_uid, info.st_gid, "%04o" % (info.st_mode & 0o7777)]
print(json.dumps(seen))
"""
VIDEO_GID = 44  # Debian's video group (the template's /etc/group)


def test_an_unprivileged_container_runs_in_the_id_map_and_device_nodes_decide_by_owner_and_mode(node):
    api, state, dev, sim = node["api"], node["state"], node["dev"], node["sim"]
    vmid = int(api.cluster.nextid.get())
    upid = api.nodes("pve").lxc.post(vmid=vmid, ostemplate="local:vztmpl/" + TEMPLATE, hostname="unpriv-sim", cores=1, memory=512,
                                     unprivileged=1, dev0="%s/nvidia0" % dev, dev1="%s/nvidia1,mode=0666" % dev,
                                     dev2="%s/nvidiactl,gid=%d" % (dev, VIDEO_GID))
    wait_task(api, upid)
    # The raw style too: the host node itself, bound in, no allow line at all.
    raw = "%s/nvidia-uvm-tools" % dev
    conf = state / "etc" / "pve" / "lxc" / ("%d.conf" % vmid)
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.mount.entry: %s %s none bind,optional,create=file\n" % (raw, raw.lstrip("/")))
    # On the host, the template's files belong to the mapped ids (setuid bits kept).
    rootfs = state / "var" / "lib" / "vz" / "images" / str(vmid) / ("subvol-%d-disk-0.subvol" % vmid)
    su = os.lstat(rootfs / "usr" / "bin" / "su")
    assert (su.st_uid, su.st_gid, stat.S_IMODE(su.st_mode)) == (100000, 100000, 0o4755)
    wait_task(api, api.nodes("pve").lxc(vmid).status.start.post())
    booted = wait_system_running(sim, vmid)
    assert booted in ("running", "degraded"), booted

    passed = ["%s/%s" % (dev, name) for name in ("nvidia0", "nvidia1", "nvidiactl")] + [raw]
    files = ["/etc", "/etc/passwd", "/etc/hostname", "/etc/ssh/ssh_host_ed25519_key", "/usr/bin/su"]
    probe = sim.pct_exec(vmid, "python3", "-c", OWNER_PROBE, *(files + passed))
    assert probe.returncode == 0, probe.stdout + probe.stderr
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen.pop("uid_map") == ["0", "100000", "65536"]  # container uid 0 is host uid 100000
    for path in files[:-1]:
        assert seen[path][:2] == [0, 0], (path, seen[path])  # root's, as the container sees them (pve-sim's own files too)
    assert seen["/usr/bin/su"] == [0, 0, "4755"]
    # dev[n]: PVE's copies with the entry's mode and ids; raw: the host node, whose root is nobody in here.
    assert [seen[path] for path in passed] == [[0, 0, "0660"], [0, 0, "0666"], [0, VIDEO_GID, "0660"], [65534, 65534, "0666"]]

    # The devices cgroup allows everything: root opens them all (ENXIO: no driver), a user what owner and mode let it.
    assert sim.open_inside(vmid, passed) == dict((path, "ENXIO") for path in passed)
    added = sim.pct_exec(vmid, "useradd", "--no-create-home", "--groups", "video", "gpuuser")
    assert added.returncode == 0, added.stderr
    as_user = sim.pct_exec(vmid, "setpriv", "--reuid=gpuuser", "--regid=gpuuser", "--init-groups", "python3", "-c", OPEN_PROBE, *passed)
    assert as_user.returncode == 0, as_user.stdout + as_user.stderr
    assert json.loads(as_user.stdout.strip().splitlines()[-1]) == {
        passed[0]: "EACCES",  # dev0 without options: 0660 root:root
        passed[1]: "ENXIO",   # mode=0666
        passed[2]: "ENXIO",   # gid=44: the user is in video
        passed[3]: "ENXIO",   # raw bind of the 0666 host node; no allow line needed in a deny-list cgroup
    }

    # systemd's LoadCredential (the collection's server units use it) in the user namespace.
    credential = sim.pct_exec(vmid, "systemd-run", "--wait", "--pipe", "--quiet", "-p", "LoadCredential=key:/etc/hostname",
                              "/bin/sh", "-c", 'cat "$CREDENTIALS_DIRECTORY/key"')
    assert (credential.returncode, credential.stdout) == (0, "unpriv-sim\n"), credential.stderr

    wait_task(api, api.nodes("pve").lxc(vmid).status.stop.post())
    wait_task(api, api.nodes("pve").lxc(vmid).delete())
    assert not conf.exists() and not rootfs.exists()


# -- the node's bridge: containers reached over SSH ---------------------------------------------------

SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3",
               "-o", "LogLevel=ERROR"]


def free_test_network():
    """A 10.213.X.0/24 that overlaps none of this host's routes and addresses (pve-sim would refuse it)."""
    if str(SIM_SOURCE) not in sys.path:
        sys.path.insert(0, str(SIM_SOURCE))
    from pve_sim.network import host_networks  # pylint: disable=import-outside-toplevel

    taken = [network for network, _dev in host_networks()]
    thirds = list(range(100, 250))
    random.shuffle(thirds)
    free = [candidate for candidate in (ipaddress.IPv4Network(("10.213.%d.0" % third, 24)) for third in thirds)
            if not any(candidate.overlaps(network) for network in taken)]
    if not free:
        pytest.skip("no free 10.213.X.0/24 on this host")
    return free[0]


def ifindex(name):
    try:
        return int(pathlib.Path("/sys/class/net/%s/ifindex" % name).read_text().strip())
    except (OSError, ValueError):
        return None


@pytest.fixture
def bridged_node():
    """pve-sim with its own bridge pvst<id> on a free 10.213.X.0/24; containers, server and bridge removed afterwards.
    ``base``: a directory the containers' root can reach (for the state dir and host directories to mount)."""
    for tool in ("ssh", "ssh-keygen", "ssh-keyscan"):
        if shutil.which(tool) is None:
            pytest.skip("%s is missing" % tool)
    network = free_test_network()
    bridge = "pvst%s" % uuid.uuid4().hex[:8]
    gateway = "%s/%d" % (network.network_address + 1, network.prefixlen)
    ensure_template()
    with searchable_directory("pve-sim-bridge.") as base:
        sim = PveSim(base / "state")
        created_index = None
        try:
            try:
                sim.start("--bridge", "%s=%s" % (bridge, gateway))
            finally:
                created_index = ifindex(bridge)
            yield {"api": sim.api(), "state": sim.state, "bridge": bridge, "network": network, "ifindex": created_index, "sim": sim,
                   "base": base}
        finally:
            sim.stop()
            # Only the bridge this fixture's pve-sim created (same ifindex), should its stop have failed.
            if created_index is not None and ifindex(bridge) == created_index:
                subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30, check=False)


def ssh(key, address, command, timeout=20):
    return subprocess.run(["ssh", "-i", str(key)] + SSH_OPTIONS + ["root@%s" % address, command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def free_vmids(count):
    """High vmids: a container's host-side veth is veth<vmid>i<N>, global on this machine, so avoid the usual 100..."""
    start = random.randrange(900000000, 999999000)
    return [start + offset for offset in range(count) if not pathlib.Path("/sys/class/net/veth%di0" % (start + offset)).exists()]


def test_containers_on_the_node_bridge_answer_ssh_with_their_own_host_keys_and_a_read_only_bind_mount(bridged_node, tmp_path):
    # Unprivileged, as the API creates them by default: sshd accepts root's authorized_keys that pve-sim wrote as the
    # container's root (host uid 100000), and the bind-mounted host directory shows as nobody's, read through "other".
    api, state, bridge, network = bridged_node["api"], bridged_node["state"], bridged_node["bridge"], bridged_node["network"]
    gateway = network.network_address + 1
    assert bridged_node["ifindex"] is not None and ifindex(bridge) == bridged_node["ifindex"]
    assert pathlib.Path("/proc/sys/net/ipv4/conf/%s/forwarding" % bridge).read_text().strip() == "0"
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pve-sim-test", "-f", str(key)], check=True, timeout=30)
    mirror = bridged_node["base"] / "mirror"
    mirror.mkdir(mode=0o755)
    token = uuid.uuid4().hex
    (mirror / "served.txt").write_text(token + "\n")

    containers = {}
    for vmid, host in zip(free_vmids(2), (11, 12)):
        address = str(network.network_address + host)
        upid = api.nodes("pve").lxc.post(vmid=vmid, ostemplate="local:vztmpl/" + TEMPLATE, hostname="sshct%d" % host, cores=1, memory=512,
                                         unprivileged=1,
                                         net0="name=eth0,bridge=%s,ip=%s/%d,gw=%s" % (bridge, address, network.prefixlen, gateway),
                                         mp0="%s,mp=/srv/llmops-mirror,ro=1" % mirror,
                                         **{"ssh-public-keys": (tmp_path / "id_ed25519.pub").read_text()})
        wait_task(api, upid)
        net0 = api.nodes("pve").lxc(vmid).config.get()["net0"]
        containers[vmid] = {"address": address, "hwaddr": re.search(r"hwaddr=([0-9A-F:]{17})", net0).group(1), "net0": net0}
    assert len(containers) == 2

    # What pve-sim cannot realise fails the start task, with PVE's words where PVE has them.
    vmid, container = next(iter(containers.items()))
    refused = {
        container["net0"].replace("bridge=%s," % bridge, "bridge=%sx," % bridge): "bridge '%sx' does not exist" % bridge,
        re.sub(r"ip=[^,]+", "ip=dhcp", container["net0"]): "pve-sim has no DHCP server: give net0 ip=<address>/<prefix>",
    }
    for value, message in refused.items():
        api.nodes("pve").lxc(vmid).config.put(net0=value)
        with pytest.raises(AssertionError, match="failed: %s" % re.escape(message)):
            wait_task(api, api.nodes("pve").lxc(vmid).status.start.post())
        assert api.nodes("pve").lxc(vmid).status.current.get()["status"] == "stopped"
    api.nodes("pve").lxc(vmid).config.put(net0=container["net0"])

    for vmid in containers:
        wait_task(api, api.nodes("pve").lxc(vmid).status.start.post())

    deadline = time.time() + 60
    for vmid, container in containers.items():
        while True:
            result = ssh(key, container["address"], "cat /srv/llmops-mirror/served.txt /sys/class/net/eth0/address && "
                                                    "stat -c %U:%G /srv/llmops-mirror/served.txt && cat /proc/self/uid_map")
            if result.returncode == 0 or time.time() > deadline:
                break
            time.sleep(1)
        assert result.returncode == 0, "CT %d at %s: %s" % (vmid, container["address"], result.stderr)
        assert result.stdout.split() == [token, container["hwaddr"].lower(), "nobody:nogroup", "0", "100000", "65536"]
        written = ssh(key, container["address"], "touch /srv/llmops-mirror/written")
        assert written.returncode != 0 and "Read-only file system" in written.stderr
        scanned = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", container["address"]], capture_output=True, text=True,
                                 timeout=30, check=False).stdout.split()
        rootfs = state / "var" / "lib" / "vz" / "images" / str(vmid) / ("subvol-%d-disk-0.subvol" % vmid)
        on_disk = (rootfs / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        assert scanned[1:3] == on_disk[:2] and on_disk[2] == "root@sshct%s" % container["address"].rsplit(".", 1)[1]
        container["host_key"] = on_disk[1]
    assert not (mirror / "written").exists()
    first, second = list(containers.values())
    assert first["host_key"] != second["host_key"] and first["hwaddr"] != second["hwaddr"]

    for vmid in containers:
        wait_task(api, api.nodes("pve").lxc(vmid).status.stop.post())
        wait_task(api, api.nodes("pve").lxc(vmid).delete())
    stopped = bridged_node["sim"].stop()
    assert stopped.returncode == 0 and "removed bridge %s" % bridge in stopped.stdout, stopped.stdout + stopped.stderr
    assert ifindex(bridge) is None
