# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the integration tests against pve-sim share: its command line, the cached container template, one running
pve-sim (started on a free port with its own state dir, stopped with every container it realised), and a directory
that an unprivileged container's root can reach."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SIM_SOURCE = REPO / "simulators" / "pve_sim"
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
CACHE = pathlib.Path(os.environ.get("PVE_SIM_TEMPLATE_CACHE") or REPO / ".build" / "pve-sim-cache")

# Run inside a container with pve-sim pct exec: opens each path and prints {path: "OK" or the errno name}. ENXIO means
# the devices cgroup allows the node (no driver behind it), EPERM that no allow line covers it.
OPEN_PROBE = r"""
import errno, json, os, sys
result = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        result[path] = "OK"
    except OSError as error:
        result[path] = errno.errorcode.get(error.errno, str(error.errno))
print(json.dumps(result))
"""


def sim_command(*args):
    """(argv, env) of a pve-sim command run from this checkout's source."""
    env = dict(os.environ, PYTHONPATH=str(SIM_SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return [sys.executable, "-m", "pve_sim"] + [str(arg) for arg in args], env


def sim_cli(*args, timeout=120):
    argv, env = sim_command(*args)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def ensure_template():
    """The cached template, rebuilt when it is missing or was built from another recipe (`template check`)."""
    if sim_cli("template", "check", "--output", CACHE / TEMPLATE).returncode == 0:
        return
    if shutil.which("debootstrap") is None or shutil.which("zstd") is None:
        pytest.skip("no current template in %s and no debootstrap/zstd to build one" % CACHE)
    CACHE.mkdir(parents=True, exist_ok=True)
    built = sim_cli("template", "build", "--output", CACHE / TEMPLATE, timeout=1200)
    if built.returncode != 0:
        pytest.skip("could not build the debootstrap template (Debian mirror unreachable?): %s" % built.stderr[-500:])


class PveSim:
    """A pve-sim started by this test run: its state dir, endpoint, credentials, API client and pct exec."""

    def __init__(self, state):
        self.state = pathlib.Path(state)
        self.endpoint = None

    def start(self, *options):
        started = sim_cli("start", "--state-dir", self.state, "--listen", "127.0.0.1:0", "--template-cache", CACHE, *options, "--wait", 60)
        assert started.returncode == 0, started.stdout + started.stderr
        self.endpoint = json.loads((self.state / "endpoint.json").read_text())

    @property
    def port(self):
        return self.endpoint["port"]

    @property
    def cert(self):
        return self.state / "etc" / "pve" / "local" / "pve-ssl.pem"

    def root_password(self):
        return (self.state / "root-password").read_text().strip()

    def token_secret(self):
        return (self.state / "token-root@pam!ansible").read_text().strip()

    def api(self):
        """A proxmoxer client as root@pam with a ticket, verifying the simulator's certificate."""
        # Imported here: the test modules skip themselves (pytest.importorskip) where proxmoxer is missing.
        from proxmoxer import ProxmoxAPI  # pylint: disable=import-outside-toplevel

        return ProxmoxAPI("127.0.0.1", port=self.port, user="root@pam", password=self.root_password(), verify_ssl=str(self.cert), timeout=60)

    def conf_path(self, vmid):
        return self.state / "etc" / "pve" / "lxc" / ("%d.conf" % vmid)

    def pct_exec(self, vmid, *argv, timeout=60):
        return sim_cli("pct", "--state-dir", self.state, "exec", vmid, "--", *argv, timeout=timeout)

    def open_inside(self, vmid, paths):
        """{path: "OK" or errno name} for opening each path inside the container."""
        result = self.pct_exec(vmid, "python3", "-c", OPEN_PROBE, *paths)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    def stop(self):
        """Stop and destroy every container realised in the state dir, then stop the simulator; the stop's result."""
        lxcpath = self.state / "lxc"
        if lxcpath.is_dir():
            for name in os.listdir(lxcpath):
                if (lxcpath / name / "config").exists():
                    subprocess.run(["lxc-stop", "-P", str(lxcpath), "-n", name, "-k"], capture_output=True, timeout=60, check=False)
                    subprocess.run(["lxc-destroy", "-P", str(lxcpath), "-n", name], capture_output=True, timeout=60, check=False)
        return sim_cli("stop", "--state-dir", self.state, timeout=60)


def wait_task(api, upid, timeout=180.0):
    """Wait for a PVE task to stop; its status, or AssertionError with the end of its log when it did not end OK."""
    deadline = time.monotonic() + timeout
    # The node that runs the task is the UPID's second field (UPID:node:pid:pstart:starttime:type:id:user:).
    node = api.nodes(upid.split(":")[1])
    while time.monotonic() < deadline:
        status = node.tasks(upid).status.get()
        if status["status"] == "stopped":
            if status["exitstatus"] != "OK":
                lines = [line["t"] for line in node.tasks(upid).log.get()]
                raise AssertionError("task %s failed: %s\n%s" % (upid, status["exitstatus"], "\n".join(lines[-15:])))
            return status
        time.sleep(0.25)
    raise AssertionError("task %s still running after %ss" % (upid, timeout))


def wait_system_running(sim, vmid, timeout=90.0):
    """Wait for systemd in the container to finish booting; what ``systemctl is-system-running`` last answered
    ("running" or "degraded" once booted; "starting" while it boots)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = sim.pct_exec(vmid, "systemctl", "is-system-running").stdout.strip()
        if answer in ("running", "degraded") or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


@contextlib.contextmanager
def searchable_directory(prefix):
    """A new directory below /tmp that every user may search (0711), removed afterwards. LXC mounts an unprivileged
    container's rootfs, device copies and mount points as the container's root (host uid 100000), so a state dir or a
    mounted host directory must lie where that uid can reach it; pytest's tmp_path is below /tmp/pytest-of-root (0700)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    try:
        path.chmod(0o711)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def running_pve_sim(state, *options):
    """A started PveSim (the template checked or built first), stopped on exit whatever happened."""
    ensure_template()
    sim = PveSim(state)
    try:
        sim.start(*options)
        yield sim
    finally:
        sim.stop()
