# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's API for net[n], mp[n] and ssh-public-keys (--no-lxc), and the refusal of bad --bridge requests."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.test_pve_sim_api import (  # pylint: disable=unused-import
    SIM_SOURCE, TEMPLATE, Sim, create_ct, raised, wait_task)

HWADDR_ITEM_RE = re.compile(r"(?:^|,)hwaddr=(BC:24:11(?::[0-9A-F]{2}){3})(?:,|$)")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    running = Sim(tmp_path_factory.mktemp("pve-sim-net"))
    yield running
    running.stop()


def sim_cli(*args):
    env = dict(os.environ, PYTHONPATH=SIM_SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pve_sim"] + [str(arg) for arg in args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def rootfs(sim, vmid):
    return os.path.join(sim.state_dir, "var", "lib", "vz", "images", str(vmid), "subvol-%d-disk-0.subvol" % vmid)


def test_netn_is_stored_with_a_generated_hwaddr_that_stays(sim):
    api = sim.api()
    _upid, status = create_ct(api, 301, net0="name=eth0,bridge=llmsbx0,ip=10.213.0.11/24,gw=10.213.0.1")
    assert status["exitstatus"] == "OK"
    stored = api.nodes("pve").lxc(301).config.get()["net0"]
    hwaddr = HWADDR_ITEM_RE.search(stored).group(1)
    assert stored == "name=eth0,bridge=llmsbx0,gw=10.213.0.1,hwaddr=%s,ip=10.213.0.11/24,type=veth" % hwaddr
    assert "net0: %s\n" % stored in sim.config_text(301)
    # An update that carries the address keeps it; one without gets a new one, as on PVE.
    api.nodes("pve").lxc(301).config.put(net0="name=eth0,bridge=llmsbx0,ip=10.213.0.12/24,hwaddr=%s" % hwaddr)
    assert HWADDR_ITEM_RE.search(api.nodes("pve").lxc(301).config.get()["net0"]).group(1) == hwaddr
    api.nodes("pve").lxc(301).config.put(net1="name=eth1,bridge=llmsbx0,ip=10.213.0.13/24")
    assert HWADDR_ITEM_RE.search(api.nodes("pve").lxc(301).config.get()["net1"])


def test_a_bind_mount_point_is_root_pam_only(sim):
    create_ct(sim.api(), 302)
    message = "Permission check failed (mount point type bind is only allowed for root@pam)"
    for client in (sim.token_api(), sim.api("ops@pve")):
        error = raised(lambda client=client: client.nodes("pve").lxc(302).config.put(mp0="/srv,mp=/srv/mirror"))
        assert (error.status_code, error.content) == (403, message)
        params = {"vmid": 303, "ostemplate": "local:vztmpl/" + TEMPLATE, "mp0": "/srv,mp=/srv/mirror"}
        error = raised(lambda client=client, params=params: client.nodes("pve").lxc.post(**params))
        assert (error.status_code, error.content) == (403, message)
    sim.api().nodes("pve").lxc(302).config.put(mp0="/srv,mp=/srv/mirror,ro=1")
    assert "mp0: /srv,mp=/srv/mirror,ro=1\n" in sim.config_text(302)


def test_storage_backed_mount_points_fail_clearly_at_create_update_and_start(sim):
    api = sim.api()
    upid = api.nodes("pve").lxc.post(vmid=304, ostemplate="local:vztmpl/" + TEMPLATE, mp0="local-lvm:8,mp=/srv/data")
    status = wait_task(api, upid)
    assert status["exitstatus"] == ("unable to create CT 304 - pve-sim does not implement storage-backed mount points "
                                    "(mp0: local-lvm:8,mp=/srv/data): use a bind mount of a host directory, mp0: /host/dir,mp=/path")
    assert 304 not in [item["vmid"] for item in api.nodes("pve").lxc.get()]
    create_ct(api, 305)
    error = raised(lambda: api.nodes("pve").lxc(305).config.put(mp0="local-lvm:8,mp=/srv/data"))
    assert error.status_code == 500 and error.content.startswith("pve-sim does not implement storage-backed mount points (mp0: ")
    # Written into the file on the node: the start task fails instead.
    with open(os.path.join(sim.state_dir, "etc", "pve", "lxc", "305.conf"), "a", encoding="utf-8") as handle:
        handle.write("mp1: /dev/sdz1,mp=/srv/disk\n")
    status = wait_task(api, api.nodes("pve").lxc(305).status.start.post())
    assert status["exitstatus"].startswith("pve-sim does not implement device mount points (mp1: /dev/sdz1,mp=/srv/disk)")


def test_a_bind_mount_of_a_missing_directory_fails_the_start_like_pve(sim, tmp_path):
    api = sim.api()
    missing = str(tmp_path / "not-there")
    create_ct(api, 306, mp0="%s,mp=/srv/mirror" % missing)
    status = wait_task(api, api.nodes("pve").lxc(306).status.start.post())
    assert status["exitstatus"] == "directory '%s' does not exist" % missing
    os.mkdir(missing)
    assert wait_task(api, api.nodes("pve").lxc(306).status.start.post())["exitstatus"] == "OK"


def make_key(directory, name):
    path = os.path.join(str(directory), name)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", path], check=True, timeout=30)
    with open(path + ".pub", encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_ssh_public_keys_one_per_line_land_in_roots_authorized_keys_in_pves_section(sim, tmp_path):
    keys = make_key(tmp_path, "ops") + make_key(tmp_path, "ci")
    create_ct(sim.api(), 307, **{"ssh-public-keys": keys})
    path = os.path.join(rootfs(sim, 307), "root", ".ssh", "authorized_keys")
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == "# --- BEGIN PVE ---\n%s# --- END PVE ---\n" % keys
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_a_line_that_is_no_public_key_fails_validation_like_pve(sim, tmp_path):
    keys = make_key(tmp_path, "ops") + "ssh-ed25519 not-base64 broken@example\n"
    error = raised(lambda: sim.api().nodes("pve").lxc.post(vmid=308, ostemplate="local:vztmpl/" + TEMPLATE, **{"ssh-public-keys": keys}))
    assert (error.status_code, error.content) == (500, "SSH public key validation error")
    assert 308 not in [item["vmid"] for item in sim.api().nodes("pve").lxc.get()]


@pytest.mark.parametrize("bridge, message", [
    ("pvesim%s0123456789=10.213.251.1/24", "is longer than 15 characters"),
    ("pvs%s=203.0.113.1/24", "203.0.113.0/24 is not a private network"),
])
@pytest.mark.parametrize("command", ["serve", "start"])
def test_a_refused_bridge_creates_nothing(tmp_path, command, bridge, message):
    name_part = uuid.uuid4().hex[:6]
    state = tmp_path / "state"
    result = sim_cli(command, "--state-dir", state, "--listen", "127.0.0.1:0", "--no-lxc", "--bridge", bridge % name_part)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.rstrip().endswith("(nothing created)")
    assert not state.exists()
    assert not [name for name in os.listdir("/sys/class/net") if name_part in name]
