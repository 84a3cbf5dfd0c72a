# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE simulator on real LXC: a container created through the API, GPU kit nodes passed in both styles,
and the devices cgroup proved from INSIDE the container (ENXIO = allowed, no driver; EPERM = no allow line).

Needs root, lxc (lxc-start) and the local debootstrap template (built once into .build/pve-sim-cache, or taken
from PVE_SIM_TEMPLATE_CACHE). Everything it creates lives in a temporary state dir and /dev/pvesim-<id>/, both removed.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SIM_SOURCE = REPO / "simulators" / "pve_sim"
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
CACHE = pathlib.Path(os.environ.get("PVE_SIM_TEMPLATE_CACHE") or REPO / ".build" / "pve-sim-cache")
UVM_MAJOR = 508

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="real LXC containers and mknod in /dev need root"),
    pytest.mark.skipif(shutil.which("lxc-start") is None, reason="lxc-start is missing (apt-get install lxc)"),
]
proxmoxer = pytest.importorskip("proxmoxer")
from proxmoxer import ProxmoxAPI  # noqa: E402  pylint: disable=wrong-import-position

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


def sim_cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(SIM_SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pve_sim"] + [str(arg) for arg in args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def ensure_template():
    if (CACHE / TEMPLATE).exists():
        return
    if shutil.which("debootstrap") is None or shutil.which("zstd") is None:
        pytest.skip("no template in %s and no debootstrap/zstd to build one" % CACHE)
    CACHE.mkdir(parents=True, exist_ok=True)
    built = sim_cli("template", "build", "--output", CACHE / TEMPLATE, timeout=1200)
    if built.returncode != 0:
        pytest.skip("could not build the debootstrap template (Debian mirror unreachable?): %s" % built.stderr[-500:])


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    ensure_template()
    state = tmp_path_factory.mktemp("pve-sim-lxc")
    dev_dir = pathlib.Path("/dev/pvesim-%s" % uuid.uuid4().hex[:8])
    started = sim_cli("start", "--state-dir", state, "--listen", "127.0.0.1:0", "--template-cache", CACHE, "--wait", 60)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        endpoint = json.loads((state / "endpoint.json").read_text())
        kit = sim_cli("gpu-kit", "--root", state / "gpu-kit", "--uvm-major", UVM_MAJOR, "--gpus", 2, "--driver-version", "580.95.05",
                      "--dev-dir", dev_dir, "--real-dev")
        assert kit.returncode == 0, kit.stderr
        api = ProxmoxAPI("127.0.0.1", port=endpoint["port"], user="root@pam", password=(state / "root-password").read_text().strip(),
                         verify_ssl=str(state / "etc" / "pve" / "local" / "pve-ssl.pem"), timeout=60)
        yield {"api": api, "state": state, "dev": dev_dir}
    finally:
        lxcpath = state / "lxc"
        if lxcpath.is_dir():
            for name in os.listdir(lxcpath):
                if (lxcpath / name / "config").exists():
                    subprocess.run(["lxc-stop", "-P", str(lxcpath), "-n", name, "-k"], capture_output=True, timeout=60, check=False)
                    subprocess.run(["lxc-destroy", "-P", str(lxcpath), "-n", name], capture_output=True, timeout=60, check=False)
        sim_cli("stop", "--state-dir", state, timeout=60)
        shutil.rmtree(dev_dir, ignore_errors=True)


def wait_task(api, upid, timeout=180.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = api.nodes("pve").tasks(upid).status.get()
        if status["status"] == "stopped":
            if status["exitstatus"] != "OK":
                lines = [line["t"] for line in api.nodes("pve").tasks(upid).log.get()]
                raise AssertionError("task %s failed: %s\n%s" % (upid, status["exitstatus"], "\n".join(lines[-15:])))
            return status
        time.sleep(0.25)
    raise AssertionError("task %s still running after %ss" % (upid, timeout))


def open_inside(state, vmid, paths):
    result = sim_cli("pct", "--state-dir", state, "exec", vmid, "--", "python3", "-c", OPEN_PROBE, *paths, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gpu_passthrough_in_both_styles_is_proved_inside_the_container(node):
    api, state, dev = node["api"], node["state"], node["dev"]
    vmid = int(api.cluster.nextid.get())
    # dev[n] style through the API, as root@pam with a ticket.
    upid = api.nodes("pve").lxc.post(vmid=vmid, ostemplate="local:vztmpl/" + TEMPLATE, hostname="gpu-sim", cores=1, memory=768,
                                     dev0="%s/nvidia0" % dev, dev1="%s/nvidia-uvm" % dev)
    wait_task(api, upid)
    # Raw style: lines written into the config file on the node, as the collection's file backend does.
    conf = state / "etc" / "pve" / "lxc" / ("%d.conf" % vmid)
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup2.devices.allow: c 195:* rwm\n")
        for name in ("nvidia1", "nvidiactl", "nvidia-uvm-tools"):
            handle.write("lxc.mount.entry: %s/%s %s/%s none bind,optional,create=file\n" % (dev, name, str(dev).lstrip("/"), name))
    wait_task(api, api.nodes("pve").lxc(vmid).status.start.post())
    assert api.nodes("pve").lxc(vmid).status.current.get()["status"] == "running"

    hostname = sim_cli("pct", "--state-dir", state, "exec", vmid, "--", "hostname", timeout=60)
    assert hostname.stdout.strip() == "gpu-sim"
    limit = sim_cli("pct", "--state-dir", state, "exec", vmid, "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes", timeout=60)
    if limit.returncode == 0:  # cgroup v1 host: memory becomes the v1 limit
        assert int(limit.stdout.strip()) == 768 * 1024 * 1024

    paths = ["%s/%s" % (dev, name) for name in ("nvidia0", "nvidia-uvm", "nvidia1", "nvidiactl", "nvidia-uvm-tools")]
    seen = open_inside(state, vmid, paths)
    assert seen == {
        paths[0]: "ENXIO",  # dev0: PVE-style allow of 195:0
        paths[1]: "ENXIO",  # dev1: allow of the uvm major's minor 0
        paths[2]: "ENXIO",  # raw: c 195:* rwm
        paths[3]: "ENXIO",  # raw: c 195:* rwm covers nvidiactl (195:255)
        paths[4]: "EPERM",  # raw mount of nvidia-uvm-tools (508:1) without an allow line for its major
    }

    # The missing allow line, added in the file, takes effect at the next start.
    with conf.open("a", encoding="utf-8") as handle:
        handle.write("lxc.cgroup2.devices.allow: c %d:* rwm\n" % UVM_MAJOR)
    wait_task(api, api.nodes("pve").lxc(vmid).status.reboot.post(timeout=30))
    assert open_inside(state, vmid, [paths[4]]) == {paths[4]: "ENXIO"}

    wait_task(api, api.nodes("pve").lxc(vmid).status.stop.post())
    assert api.nodes("pve").lxc(vmid).status.current.get()["status"] == "stopped"
    wait_task(api, api.nodes("pve").lxc(vmid).delete())
    assert not conf.exists()
    assert not any((state / "lxc").iterdir())
