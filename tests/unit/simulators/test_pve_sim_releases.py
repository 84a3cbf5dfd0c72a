# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim --release 8|9: what a node of each Proxmox VE release prints and the defaults it applies, and the cgroup
layouts each can boot (releases.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.test_pve_sim_api import Sim, create_ct

# This checkout's path, as the other simulator tests import pve_sim (not the collections/ link's).
SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)
from pve_sim import releases  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order


def pve_sim(*argv):
    env = dict(os.environ, PYTHONPATH=SIM_SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pve_sim"] + [str(item) for item in argv], capture_output=True, text=True,
                          timeout=60, check=False, env=env)


@pytest.fixture(scope="module", params=["8", "9"])
def node(request, tmp_path_factory):
    running = Sim(tmp_path_factory.mktemp("pve-sim-%s" % request.param), "--release", request.param)
    yield request.param, running
    running.stop()


def test_the_node_prints_its_releases_version_and_kernel(node):
    name, sim = node
    chosen = releases.release(name)
    api = sim.api()
    version = api.version.get()
    assert (version["version"], version["repoid"]) == (chosen.version, chosen.repoid)
    assert version["release"] == {"8": "8.3", "9": "9.1"}[name]
    status = api.nodes("pve").status.get()
    # As `pveversion` prints it, e.g. pve-manager/8.3.2/3e76eec21c4a14a7.
    assert status["pveversion"] == "pve-manager/%s/%s" % (chosen.version, chosen.repoid)
    assert status["current-kernel"]["release"] == chosen.kernel == {"8": "6.8.12-5-pve", "9": "6.17.13-2-pve"}[name]
    assert status["kversion"].startswith("Linux %s #1 SMP" % chosen.kernel)


def test_a_container_created_without_unprivileged_gets_the_releases_default(node):
    name, sim = node
    api = sim.api()
    vmid = 300 + int(name)
    _upid, status = create_ct(api, vmid)
    assert status["exitstatus"] == "OK"
    # PVE 9 makes it unprivileged (pve-container 6.0.6); PVE 8's default is a privileged container.
    assert ("unprivileged: %s\n" % {"8": "0", "9": "1"}[name]) in sim.config_text(vmid)
    api.nodes("pve").lxc(vmid).delete()


def test_a_release_without_the_hybrid_cgroup_layout_refuses_to_boot_it(tmp_path):
    refused = pve_sim("start", "--state-dir", tmp_path / "state", "--release", "9", "--cgroup-layout", "hybrid", "--no-lxc")
    assert refused.returncode == 2
    assert refused.stderr == ("pve-sim: Proxmox VE 9 boots only the unified cgroup layout: support for the hybrid cgroup "
                              "hierarchy is removed in Proxmox VE 9 (nothing started)\n")
    assert not (tmp_path / "state").exists()
    unknown = pve_sim("start", "--state-dir", tmp_path / "state", "--release", "7", "--no-lxc")
    assert unknown.returncode == 2 and "invalid choice: '7'" in unknown.stderr
    with pytest.raises(releases.ReleaseError, match="^pve-sim simulates Proxmox VE 8 and 9, not '10'$"):
        releases.release("10")
    assert releases.check_layout(releases.release("8"), "hybrid") == "hybrid"
    assert releases.node_cgroup_version("hybrid") == 1 and releases.node_cgroup_version("unified") == 2


def test_the_release_command_prints_what_scripts_set_up_the_nodes_other_stand_ins_with():
    shown = pve_sim("release", "8")
    assert shown.returncode == 0
    assert json.loads(shown.stdout) == releases.release("8")._asdict() | {"cgroup_layouts": ["unified", "hybrid"]}
    kernel = pve_sim("release", "9", "--field", "kernel")
    assert (kernel.returncode, kernel.stdout) == (0, "6.17.13-2-pve\n")
