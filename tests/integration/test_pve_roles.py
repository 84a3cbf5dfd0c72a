# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles pve_gpu_host and pve_container, run by ansible-playbook against the Proxmox VE simulator on real LXC.

Why pytest and not molecule: the simulator realises containers as REAL LXC containers of this machine (devices cgroup,
bind mounts), which a molecule/docker platform cannot host (no --privileged here, and the container would need its own
LXC). So the "node" is this machine (connection local), its API is pve-sim on 127.0.0.1 (free port, self-signed
certificate verified with ca_path), its GPUs are the simulator's GPU kit (character nodes with NVIDIA's majors under
/dev/pvesim-<id>, a /proc/driver/nvidia/version stand-in, a stand-in nvidia-smi), and every path the roles write
(udev rule, modules-load.d, units) is below a stand-in root in the test's temporary directory.

The proof is made INSIDE each container (pve-sim pct exec = lxc-attach): opening a passed node fails with ENXIO when
the devices cgroup allows it (no driver behind the major) and with EPERM when no allow line covers it.

Order matters (module-scoped simulator, tests in file order): create both styles, rerun unchanged, change the uvm
major (a driver update), check mode with diff, rerun that fixes, rerun unchanged; then token auth for dev[n], a
failing PVE task, and the prerequisites of docs/proxmox-host.md each missing in turn (every one stops the run before
any change: a short run each, on the converged node). Needs root, lxc and the debootstrap template (built once into
.build/pve-sim-cache).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import uuid

import pytest

from ansible_collections.llmops.serving.tests.integration.pve_sim_support import (
    CACHE, OPEN_PROBE, REPO, TEMPLATE, PveSim, ensure_template, sim_cli, wait_task)
from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_module, ansible_playbook

BROKEN_TEMPLATE = "debian-12-truncated_12.7-1_amd64.tar.zst"
DRIVER = "580.95.05"
UVM_MAJOR, NEW_UVM_MAJOR = 508, 509
RAW_VMID, DEV_VMID, TOKEN_VMID, BROKEN_VMID, PREREQ_VMID = 201, 202, 203, 204, 205
# In the order gpu_device_nodes reports them (natural sort of the paths).
GPU_NODES = ("nvidia0", "nvidia1", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="real LXC containers and mknod in /dev need root"),
    pytest.mark.skipif(shutil.which("lxc-start") is None, reason="lxc-start is missing (apt-get install lxc)"),
]
pytest.importorskip("proxmoxer")

PLAYBOOK = """\
- name: Prepare the GPU node
  hosts: pve
  gather_facts: false
  roles:
    - role: llmops.serving.pve_gpu_host

- name: Create the GPU container
  hosts: pve
  gather_facts: false
  roles:
    - role: llmops.serving.pve_container
"""


class Node:
    """The simulated Proxmox node: pve-sim, the GPU kit, a stand-in root and the ansible-playbook runs against it."""

    def __init__(self, base):
        self.base = base
        self.sim = PveSim(base / "state")
        self.state = self.sim.state
        self.kit = base / "gpu-kit"
        self.root = base / "root"
        self.dev = pathlib.Path("/dev/pvesim-%s" % uuid.uuid4().hex[:8])
        self.api = None

    # -- setup ----------------------------------------------------------------------------------------

    def start(self):
        # A Proxmox VE 8 node (pve-sim --release 8; the sandbox runs PVE 9), so that every `make test` deploys on both.
        self.sim.start("--release", "8")
        self.set_uvm_major(UVM_MAJOR)
        self.api = self.sim.api()
        # A template cut short: its create task fails inside tar (an HTTP 200 with a UPID, then a failed task).
        with open(CACHE / TEMPLATE, "rb") as source:
            (self.state / "var" / "lib" / "vz" / "template" / "cache" / BROKEN_TEMPLATE).write_bytes(source.read(256 * 1024))
        for directory in ("etc/udev/rules.d", "etc/modules-load.d", "etc/systemd/system", "run/lock/lxc"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        # The controller's key pair: its public half goes into the containers (pve_container_ssh_public_key_files).
        (self.base / "ssh").mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pve-roles-test", "-f", str(self.key)],
                       check=True, capture_output=True, timeout=60)

    @property
    def key(self):
        return self.base / "ssh" / "id_ed25519"

    def set_uvm_major(self, major):
        """A driver or kernel update on the node: the uvm nodes get another dynamic major. The node's stand-in
        nvidia-modprobe (under the stand-in root, with udevadm; both log their calls there) recreates them with it."""
        kernel = sim_cli("release", "8", "--field", "kernel").stdout.strip()
        kit = sim_cli("gpu-kit", "--root", self.kit, "--uvm-major", major, "--gpus", 2, "--driver-version", DRIVER, "--kernel", kernel,
                      "--dev-dir", self.dev, "--real-dev", "--node-root", self.root)
        assert kit.returncode == 0, kit.stderr
        assert os.major(os.stat(self.dev / "nvidia-uvm").st_rdev) == major

    def stop(self):
        if self.api is not None:
            for vmid in (RAW_VMID, DEV_VMID, TOKEN_VMID, BROKEN_VMID, PREREQ_VMID):
                self.destroy(vmid)
        self.sim.stop()
        shutil.rmtree(self.dev, ignore_errors=True)

    def destroy(self, vmid):
        if not self.conf_path(vmid).exists():
            return
        container = self.api.nodes("pve").lxc(vmid)
        if container.status.current.get()["status"] == "running":
            self.wait_task(container.status.stop.post())
        self.wait_task(container.delete(purge=1))

    def wait_task(self, upid):
        wait_task(self.api, upid, timeout=120.0)

    # -- the playbook -----------------------------------------------------------------------------------

    def host_vars(self):
        dev = self.dev
        return {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "pve_gpu_host_proc_version_path": str(self.kit / "proc/driver/nvidia/version"),
            "pve_gpu_host_nvidia_smi": str(self.kit / "usr/bin/nvidia-smi"),
            "pve_gpu_host_expected_gpu_count": 2,
            "pve_gpu_host_nvidia_modprobe": str(self.root / "usr/bin/nvidia-modprobe"),
            "pve_gpu_host_uvm_devices": [str(dev / "nvidia-uvm"), str(dev / "nvidia-uvm-tools")],
            "pve_gpu_host_udev_rule_path": str(self.root / "etc/udev/rules.d/70-nvidia-uvm.rules"),
            "pve_gpu_host_udevadm": str(self.root / "usr/bin/udevadm"),
            "pve_gpu_host_modules_load_path": str(self.root / "etc/modules-load.d/nvidia-uvm.conf"),
            "pve_gpu_host_systemd_unit_dirs": [str(self.root / "etc/systemd/system")],
            "pve_gpu_host_systemctl": str(self.root / "usr/bin/systemctl"),
            "pve_gpu_host_boot_check_dir": str(self.root / "usr/local/lib/llmops-serving/gpu-boot-check"),
            "pve_gpu_host_boot_check_unit_dir": str(self.root / "etc/systemd/system"),
            "pve_gpu_host_boot_check_report": str(self.root / "run/llmops-serving/gpu-boot-check.json"),
            "pve_gpu_host_boot_id_path": str(self.kit / "proc/sys/kernel/random/boot_id"),
            "pve_gpu_host_device_patterns": [str(dev / "nvidia[0-9]*"), str(dev / "nvidiactl"), str(dev / "nvidia-modeset"),
                                             str(dev / "nvidia-uvm"), str(dev / "nvidia-uvm-tools"),
                                             str(dev / "nvidia-caps/nvidia-cap[0-9]*")],
            "pve_gpu_host_required_device_patterns": [str(dev / "nvidia[0-9]*"), str(dev / "nvidiactl"), str(dev / "nvidia-uvm"),
                                                      str(dev / "nvidia-uvm-tools")],
            # The preflight reads the kit's node (PCIe tree, lspci, kernel log, dkms, kernels, the driver's device list).
            "pve_gpu_host_preflight_lspci": str(self.kit / "usr/bin/lspci"),
            "pve_gpu_host_preflight_dkms": str(self.kit / "usr/bin/dkms"),
            "pve_gpu_host_preflight_kernel_log_command": [str(self.kit / "usr/bin/dmesg")],
            "pve_gpu_host_preflight_sysfs_root": str(self.kit / "sys"),
            "pve_gpu_host_preflight_proc_devices": str(self.kit / "proc/devices"),
            "pve_gpu_host_preflight_dev_dir": str(dev),
            "pve_gpu_host_preflight_modules_root": str(self.kit / "lib/modules"),
            "pve_gpu_host_preflight_boot_dir": str(self.kit / "boot"),
            "pve_gpu_host_preflight_boot_pin_file": str(self.root / "etc/kernel/proxmox-boot-pin"),
            "pve_gpu_host_preflight_running_kernel": (self.kit / "proc/sys/kernel/osrelease").read_text().strip(),
            "pve_gpu_host_preflight_gpu_groups": [{"name": "gpu-server", "gpus": ["0", "1"]}],
            "pve_gpu_host_preflight_container_config_dir": str(self.state / "etc/pve/lxc"),
            "pve_container_api_host": "127.0.0.1",
            "pve_container_api_port": self.sim.port,
            "pve_container_api_password": self.sim.root_password(),
            "pve_container_ca_path": str(self.sim.cert),
            "pve_container_node": "pve",
            "pve_container_storage": "local",
            "pve_container_rootfs_size_gb": 2,
            "pve_container_cores": 1,
            "pve_container_memory_mb": 512,
            "pve_container_net0": "",
            # Privileged containers: only there does the devices cgroup keep an allow list (LXC's common.conf), so that
            # a stale uvm allow line shows as EPERM inside. PVE makes an unprivileged container's devices cgroup a deny
            # list that allows every device (pve-sim does too), where the passthrough would open whatever the lines say.
            "pve_container_unprivileged": False,
            "pve_container_gpu_config_dir": str(self.state / "etc/pve/lxc"),
            # The simulated node mounts pure cgroup v2 (PVE 8's default); "auto" would read this machine's layout.
            "pve_container_gpu_cgroup_version": "v2",
            "pve_container_gpu_lock_dir": str(self.root / "run/lock/lxc"),
            "pve_container_node_ssh_host": "127.0.0.1",
            # pct exec over SSH needs an SSH server on the node, which this machine does not run: the proof runs with
            # pve-sim pct exec (lxc-attach) from the test instead.
            "pve_container_wait_for_connection": False,
        }

    def run_playbook(self, extra, check=False, diff=False, timeout=300):
        """Run the playbook with the json callback; an AnsibleRun (rc, results, stats, seconds)."""
        inventory = self.base / "inventory.json"
        inventory.write_text(json.dumps({"all": {"hosts": {"pve": self.host_vars()}}}))
        playbook = self.base / "site.yml"
        playbook.write_text(PLAYBOOK)
        extra_file = self.base / "extra.json"
        extra_file.write_text(json.dumps(extra))
        flags = (["--check"] if check else []) + (["--diff"] if diff else [])
        return ansible_playbook(playbook, "-e", "@%s" % extra_file, *flags, inventory=str(inventory), cwd=str(REPO),
                                timeout=timeout, environment={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})

    # -- inside the container --------------------------------------------------------------------------

    def open_inside(self, vmid, names=GPU_NODES, user=None):
        """{node name: "OK" or errno name} of opening each node inside the container, as root or as ``user``."""
        paths = [str(self.dev / name) for name in names]
        if user is None:
            seen = self.sim.open_inside(vmid, paths)
        else:
            result = self.sim.pct_exec(vmid, "setpriv", "--reuid=%s" % user, "--regid=%s" % user, "--clear-groups", "python3", "-c",
                                       OPEN_PROBE, *paths)
            assert result.returncode == 0, result.stdout + result.stderr
            seen = json.loads(result.stdout.strip().splitlines()[-1])
        return dict((pathlib.Path(path).name, value) for path, value in seen.items())

    def conf_path(self, vmid):
        return self.sim.conf_path(vmid)

    def conf(self, vmid):
        return self.conf_path(vmid).read_text()

    def status(self, vmid):
        return self.api.nodes("pve").lxc(vmid).status.current.get()

    def start_task_count(self, vmid):
        """How many times the container was started (vzstart/vzreboot task logs; pve-sim names them after the UPID with _ for :)."""
        return self.task_count(vmid, "vzstart", "vzreboot")

    def task_count(self, vmid, *types):
        found = 0
        for _directory, _dirs, files in os.walk(self.state / "var" / "log" / "pve" / "tasks"):
            found += sum(1 for name in files if any(("_%s_%d_" % (kind, vmid)) in name for kind in types))
        return found


def container_vars(vmid, style, backend, **extra):
    result = {"pve_container_vmid": vmid, "pve_container_hostname": "gpu-%s" % style, "pve_container_gpu_style": style,
              "pve_container_gpu_backend": backend, "pve_container_inventory_name": "gpu-%s-%d" % (style, vmid)}
    result.update(extra)
    return result


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    ensure_template()
    simulated = Node(tmp_path_factory.mktemp("pve-roles"))
    try:
        simulated.start()
        yield simulated
    finally:
        simulated.stop()


ALL_ENXIO = dict((name, "ENXIO") for name in GPU_NODES)


def test_check_mode_on_a_new_container_creates_nothing(node):
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"), check=True, diff=True)
    assert run.rc == 0, run.summary()
    create = run.task_results("Create or update the container", "pve")[0]
    assert create["changed"] and create["created"] and create["status"] == "absent"
    diff = create["diff"][0] if isinstance(create["diff"], list) else create["diff"]
    assert diff["before"] == "" and "hostname: gpu-raw\n" in diff["after"] and "memory: 512\n" in diff["after"]
    assert run.task_results("Pass the GPU device nodes into the container", "pve")[0].get("skipped")
    assert not node.conf_path(RAW_VMID).exists()
    assert not (node.root / "etc/udev/rules.d/70-nvidia-uvm.rules").exists()


def test_raw_style_creates_the_container_and_passes_both_gpus(node):
    key_file = "%s.pub" % node.key
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file", pve_container_ssh_public_key_files=[key_file]))
    assert run.rc == 0, run.summary()
    assert run.stats["pve"]["changed"] > 0
    facts = run.task_results("Publish the driver version, the GPUs and the device nodes", "pve")[0]["ansible_facts"]
    assert facts["pve_gpu_host_driver_version"] == DRIVER
    assert [device["path"] for device in facts["pve_gpu_host_devices"]] == [str(node.dev / name) for name in GPU_NODES]
    assert facts["pve_gpu_host_device_majors"] == [195, UVM_MAJOR]
    # The boot persistence files, under the stand-in root, and the udev reload they triggered.
    rule = (node.root / "etc/udev/rules.d/70-nvidia-uvm.rules").read_text()
    assert 'KERNEL=="nvidia_uvm", RUN+="%s -c0 -u"' % (node.root / "usr/bin/nvidia-modprobe") in rule
    assert (node.root / "etc/modules-load.d/nvidia-uvm.conf").read_text().splitlines()[-2:] == ["nvidia", "nvidia-uvm"]
    assert (node.root / "udevadm.log").read_text() == "control --reload-rules\n"

    text = node.conf(RAW_VMID)
    allow = "lxc.cgroup2.devices.allow"
    assert "%s: c 195:* rwm\n" % allow in text and "%s: c %d:* rwm\n" % (allow, UVM_MAJOR) in text
    for name in GPU_NODES:
        assert "lxc.mount.entry: %s %s none bind,optional,create=file\n" % (node.dev / name, str(node.dev / name).lstrip("/")) in text
    assert node.status(RAW_VMID)["status"] == "running"
    info = run.task_results("Publish the container's state", "pve")[0]["ansible_facts"]["pve_container_info"]
    assert info["created"] and info["status"] == "running" and info["gpu_changed"] and not info["restarted"]
    added = run.task_results("Add the container to the in-memory inventory", "pve")[0]["add_host"]
    assert added["host_name"] == "gpu-raw-%d" % RAW_VMID and added["groups"] == ["sglang"]
    assert added["host_vars"]["ansible_connection"] == "community.proxmox.proxmox_pct_remote"
    assert added["host_vars"]["proxmox_vmid"] == RAW_VMID

    assert node.open_inside(RAW_VMID) == ALL_ENXIO
    # The controller's public key, read from pve_container_ssh_public_key_files, is root's in the new container.
    rootfs = node.state / "var/lib/vz/images" / str(RAW_VMID) / ("subvol-%d-disk-0.subvol" % RAW_VMID)
    assert pathlib.Path(key_file).read_text().strip() in (rootfs / "root/.ssh/authorized_keys").read_text().splitlines()


def test_dev_style_through_the_api_passes_both_gpus_openable_by_any_user(node):
    run = node.run_playbook(container_vars(DEV_VMID, "dev", "api", pve_container_gpu_dev_gid=44))
    assert run.rc == 0, run.summary()
    text = node.conf(DEV_VMID)
    entries = sorted(line for line in text.splitlines() if line.startswith("dev"))
    assert entries == sorted("dev%d: %s,gid=44,mode=0666" % (index, node.dev / name) for index, name in enumerate(GPU_NODES))
    assert "lxc." not in text
    assert node.open_inside(DEV_VMID) == ALL_ENXIO
    # A service user that is not in group 44 opens them too: Proxmox's own default (0660 root) would refuse it (EACCES).
    assert node.open_inside(DEV_VMID, user=65534) == ALL_ENXIO  # nobody:nogroup


@pytest.mark.parametrize("vmid,style,backend", [(RAW_VMID, "raw", "file"), (DEV_VMID, "dev", "api")])
def test_an_unchanged_rerun_changes_nothing(node, vmid, style, backend):
    before = node.conf(vmid)
    starts = node.start_task_count(vmid)
    extra = {"pve_container_gpu_dev_gid": 44} if style == "dev" else {}
    run = node.run_playbook(container_vars(vmid, style, backend, **extra))
    assert run.rc == 0, run.summary()
    assert run.stats["pve"]["changed"] == 0, run.changed_tasks()
    assert node.conf(vmid) == before
    assert starts >= 1 and node.start_task_count(vmid) == starts


def test_a_new_uvm_major_breaks_raw_style_until_the_rerun_fixes_it(node):
    node.set_uvm_major(NEW_UVM_MAJOR)
    # The container keeps the old allow line: after a restart (a node reboot after the driver update) the new uvm
    # nodes are refused by the devices cgroup.
    node.wait_task(node.api.nodes("pve").lxc(RAW_VMID).status.reboot.post(timeout=30))
    seen = node.open_inside(RAW_VMID)
    assert seen["nvidia-uvm"] == "EPERM" and seen["nvidia-uvm-tools"] == "EPERM" and seen["nvidia0"] == "ENXIO"

    # Check mode with a diff shows the fix and makes none. The node's preflight names the stale allow line (a warning:
    # this same run's container play is what corrects it).
    before = node.conf(RAW_VMID)
    starts = node.start_task_count(RAW_VMID)
    configs = {"pve_gpu_host_preflight_container_configs": [str(node.conf_path(RAW_VMID)), str(node.conf_path(DEV_VMID))]}
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file", **configs), check=True, diff=True)
    assert run.rc == 0, run.summary()
    preflight = run.task_results("Check the GPUs, their PCIe path, the IOMMU, the kernel log and the NVIDIA module builds", "pve")[0]
    stale = [finding for finding in preflight["findings"] if finding["check"] == "uvm_major_mismatch"]
    assert [(finding["severity"], finding["subject"]) for finding in stale] == [("warning", str(node.conf_path(RAW_VMID)))], stale
    assert "c %d:* rwm" % UVM_MAJOR in " ".join(stale[0]["evidence"]) and "c %d:* rwm" % NEW_UVM_MAJOR in stale[0]["fix"]
    passthrough = run.task_results("Pass the GPU device nodes into the container", "pve")[0]
    assert passthrough["changed"]
    assert any(change.get("value") == "c %d:* rwm" % NEW_UVM_MAJOR for change in passthrough["changes"]), passthrough["changes"]
    diff = passthrough["diff"]
    diff = diff[0] if isinstance(diff, list) else diff
    assert "c %d:* rwm" % UVM_MAJOR in diff["before"] and "c %d:* rwm" % NEW_UVM_MAJOR in diff["after"]
    assert "c %d:* rwm" % NEW_UVM_MAJOR not in diff["before"]
    assert run.task_results("Restart the container to apply the changed GPU passthrough", "pve")[0]["changed"]
    assert node.conf(RAW_VMID) == before
    assert node.start_task_count(RAW_VMID) == starts

    # The real run fixes the line in place, restarts the container, and the nodes open again.
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    assert run.rc == 0, run.summary()
    after = node.conf(RAW_VMID)
    assert "c %d:* rwm" % NEW_UVM_MAJOR in after
    # Every other line stays byte for byte.
    assert set(line for line in before.splitlines() if "c %d:* rwm" % UVM_MAJOR not in line) <= set(after.splitlines())
    assert list((node.state / "etc/pve/lxc").glob("%d.conf.*.bak" % RAW_VMID)), "the previous config is kept as a backup"
    info = run.task_results("Publish the container's state", "pve")[0]["ansible_facts"]["pve_container_info"]
    assert info["gpu_changed"] and info["restarted"]
    assert node.start_task_count(RAW_VMID) == starts + 1
    assert node.open_inside(RAW_VMID) == ALL_ENXIO

    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    assert run.rc == 0, run.summary()
    assert run.stats["pve"]["changed"] == 0


def test_the_stale_uvm_line_is_replaced_in_place(node):
    text = node.conf(RAW_VMID)
    assert "c %d:* rwm" % NEW_UVM_MAJOR in text
    assert "c %d:* rwm" % UVM_MAJOR not in text


def test_dev_style_needs_no_config_change_for_a_new_uvm_major(node):
    # Proxmox stats each dev[n] node at start and allows its current major: the config stays as it is, and the
    # container sees the new nodes after its next start.
    before = node.conf(DEV_VMID)
    run = node.run_playbook(container_vars(DEV_VMID, "dev", "api", pve_container_gpu_dev_gid=44))
    assert run.rc == 0, run.summary()
    assert run.stats["pve"]["changed"] == 0
    assert node.conf(DEV_VMID) == before
    node.wait_task(node.api.nodes("pve").lxc(DEV_VMID).status.reboot.post(timeout=30))
    assert node.open_inside(DEV_VMID) == ALL_ENXIO


def test_missing_uvm_nodes_are_created_now_with_nvidia_modprobe(node):
    # After a boot without the udev rule, /dev/nvidia-uvm does not exist until something creates it.
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        os.unlink(node.dev / name)
    before = node.conf(RAW_VMID)
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    assert run.rc == 0, run.summary()
    assert (node.root / "nvidia-modprobe.log").read_text() == "-c0 -u\n"
    assert run.task_results("Create the nvidia-uvm nodes now", "pve")[0]["changed"]
    assert os.major(os.stat(node.dev / "nvidia-uvm").st_rdev) == NEW_UVM_MAJOR
    assert node.conf(RAW_VMID) == before
    assert run.stats["pve"]["changed"] == 1


def test_the_preflight_stops_the_run_naming_each_fault_before_any_container_changes(node):
    # An Xid 79 on GPU1 since boot, a riser trained at x4, and a newer kernel that boots next without the NVIDIA module.
    faults = sim_cli("gpu-fault", "--root", node.kit, "add", "xid=79:1", "narrow-link=1:4", "module-missing-next-kernel")
    assert faults.returncode == 0, faults.stderr
    before = node.conf(RAW_VMID)
    try:
        run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    finally:
        cleared = sim_cli("gpu-fault", "--root", node.kit, "clear")
    assert cleared.returncode == 0, cleared.stderr
    assert run.rc != 0
    [message] = [failure for failure in run.failures() if failure.startswith("Stop on the preflight's errors")]
    for expected in ("ERROR xid_event GPU1 ", "GPU has fallen off the bus", "ERROR pcie_link_width GPU1",
                     "ERROR nvidia_module_not_built kernel 6.14.11-4-pve (next boot)", "proxmox-headers-6.14.11-4-pve"):
        assert expected in message, message
    # Printed first, with the warnings, so that one run names everything; the container play never started.
    printed = run.task_results("Print the preflight", "pve")[0]["msg"]
    assert any(line.startswith("ERROR xid_event") for line in printed), printed
    assert run.task_results("Create or update the container", "pve") == []
    assert node.conf(RAW_VMID) == before
    # Healthy again: the same run passes, with the path between the server's GPUs as information.
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    assert run.rc == 0, run.summary()
    printed = run.task_results("Print the preflight", "pve")[0]["msg"]
    assert [line.split(":")[0] for line in printed] == ["INFO p2p_path server gpu-server"], printed


def test_a_node_without_the_driver_fails_with_the_reason(node):
    missing = node.base / "no-driver" / "version"
    run = node.run_playbook(dict(container_vars(RAW_VMID, "raw", "file"), pve_gpu_host_proc_version_path=str(missing)))
    assert run.rc != 0
    messages = run.failures()
    assert messages == [
        "Fail when the NVIDIA kernel driver is not loaded on pve: The NVIDIA kernel driver is not loaded on pve: %s "
        "does not exist. Install the driver on the Proxmox node itself (the .run installer with --dkms or Debian's "
        "nvidia-kernel-dkms, with the headers of the running kernel: proxmox-headers-$(uname -r)), load it with "
        "'modprobe nvidia' (or reboot) and run this role again. Containers use the node's kernel module; they cannot "
        "load one themselves. See docs/proxmox-host.md#the-nvidia-driver." % missing], messages
    assert run.stats["pve"]["changed"] == 0


def test_a_token_cannot_set_dev_entries_and_the_play_says_why(node):
    extra = container_vars(TOKEN_VMID, "dev", "api", pve_container_api_token_id="ansible", pve_container_api_token_secret=node.sim.token_secret())
    run = node.run_playbook(extra)
    assert run.rc != 0
    messages = run.failures()
    assert len(messages) == 1, messages
    assert messages[0].startswith("Refuse a dev[n] passthrough through the API with credentials Proxmox refuses it to on pve: ")
    assert "an API token is never root@pam, even one owned by root@pam (it authenticates as root@pam!ansible)" in messages[0]
    assert "configuring device passthrough is only allowed for root@pam" in messages[0]
    assert "Use pve_container_api_user=root@pam with pve_container_api_password" in messages[0]
    assert "pve_container_gpu_backend=cli" in messages[0]
    assert not node.conf_path(TOKEN_VMID).exists(), "nothing is created before the credentials are known to work"
    assert node.sim.token_secret() not in run.stdout + run.stderr


def test_the_module_itself_refuses_a_token_for_dev_entries(node):
    # The same check without the role's guard: lxc_gpu_passthrough fails before any request and says what to use.
    args = {"vmid": RAW_VMID, "style": "dev", "backend": "api", "node": "pve", "api_host": "127.0.0.1", "api_port": node.sim.port,
            "api_user": "root@pam", "api_token_id": "ansible", "api_token_secret": node.sim.token_secret(),
            "devices": [{"path": str(node.dev / "nvidia0"), "major": 195, "minor": 0, "type": "c"}]}
    result = ansible_module("localhost", "llmops.serving.lxc_gpu_passthrough", args, cwd=str(REPO), timeout=120,
                            environment={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}).module_result("localhost")
    assert result["failed"]
    assert result["msg"].startswith("dev[n] passthrough can only be set by root@pam")
    assert "Use api_user=root@pam with api_password (a ticket), or backend=cli/file over SSH on the node." in result["msg"]


def test_a_failed_pve_task_fails_the_play_at_once_with_its_exit_status(node):
    extra = container_vars(BROKEN_VMID, "raw", "file", pve_container_ostemplate="local:vztmpl/" + BROKEN_TEMPLATE,
                           pve_container_task_timeout=300)
    run = node.run_playbook(extra)
    assert run.rc != 0
    create = run.task_results("Create or update the container", "pve")[0]
    assert create["failed"]
    assert create["msg"].startswith("creating CT %d failed: unable to create CT %d - " % (BROKEN_VMID, BROKEN_VMID))
    assert "tar xpf" in create["task_exitstatus"]
    assert create["task_log_tail"][-1].startswith("TASK ERROR: unable to create CT %d" % BROKEN_VMID)
    seconds = run.task_seconds("Create or update the container", "pve")[0]
    assert seconds < 15, "the task failure must fail the play at once, not after task_timeout=300 (took %.1f s)" % seconds
    assert not node.conf_path(BROKEN_VMID).exists()


# -- what the node and the controller must have before the first run (docs/proxmox-host.md) -------------------------
# Each run below lacks one prerequisite and must stop before anything changes, naming the fix and its section.

def test_a_node_without_nvidia_modprobe_fails_before_writing_anything(node):
    fresh = node.base / "fresh-root"
    absent = node.base / "no/nvidia-modprobe"
    extra = dict(container_vars(RAW_VMID, "raw", "file"), pve_gpu_host_nvidia_modprobe=str(absent),
                 pve_gpu_host_udev_rule_path=str(fresh / "70-nvidia-uvm.rules"),
                 pve_gpu_host_modules_load_path=str(fresh / "nvidia-uvm.conf"))
    run = node.run_playbook(extra)
    assert run.rc != 0
    messages = run.failures()
    assert len(messages) == 1 and messages[0].startswith(
        "Fail when nvidia-modprobe is not installed on pve: %s does not exist on pve: the udev rule this role installs "
        "runs it to create %s and %s whenever the nvidia modules load, at every boot."
        % (absent, node.dev / "nvidia-uvm", node.dev / "nvidia-uvm-tools")), messages
    assert "Debian has it as the package nvidia-modprobe" in messages[0]
    assert messages[0].endswith(
        "Nothing was changed. See docs/proxmox-host.md#nvidia-modprobe-and-the-uvm-device-nodes.")
    assert not fresh.exists() and run.stats["pve"]["changed"] == 0


def test_missing_controller_files_fail_before_any_change_naming_each_fix(node):
    ca = node.base / "controller" / "pve-root-ca.pem"
    missing_key = node.base / "controller" / "id_rsa.pub"
    extra = container_vars(PREREQ_VMID, "raw", "file", pve_container_ca_path=str(ca),
                           pve_container_ssh_public_key_files=[str(missing_key), str(node.key), "id_ed25519.pub"])
    run = node.run_playbook(extra)
    assert run.rc != 0
    messages = run.failures()
    assert len(messages) == 1, messages
    message = messages[0]
    assert message.startswith(
        "Check the CA file and the SSH public key files on the controller on pve: pve_container_ca_path %s does not "
        "exist on the controller, which verifies the Proxmox API's certificate with it: copy the cluster's CA there "
        "from any node (scp root@<node>:/etc/pve/pve-root-ca.pem %s)" % (ca, ca)), message
    assert "See docs/proxmox-host.md#api-access-the-ca-file-and-the-credentials." in message
    key_problem = "The SSH public key file %s (pve_container_ssh_public_key_files) "
    assert key_problem % missing_key + "does not exist: make a key pair" in message
    assert key_problem % node.key + ("is a private key: give its public half (the .pub file beside it); the private "
                                     "key must not leave the controller") in message
    assert key_problem % "id_ed25519.pub" + "is not an absolute path" in message
    assert message.count("See docs/proxmox-host.md#the-ssh-key.") == 3
    assert node.key.read_text().strip().splitlines()[1] not in run.stdout + run.stderr, "the private key is never shown"
    assert run.task_results("Create or update the container", "pve") == []
    assert not node.conf_path(PREREQ_VMID).exists() and run.stats["pve"]["changed"] == 0


def test_a_template_the_storage_does_not_hold_fails_before_the_create(node):
    missing = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
    run = node.run_playbook(container_vars(PREREQ_VMID, "raw", "file", pve_container_ostemplate=missing))
    assert run.rc != 0
    messages = run.failures()
    assert len(messages) == 1, messages
    assert messages[0].startswith("Create or update the container on pve: CT %d on node pve: the container template %s "
                                  "is not on storage 'local' (it holds " % (PREREQ_VMID, missing)), messages
    assert "local:vztmpl/%s" % TEMPLATE in messages[0]
    assert "'pveam update', then 'pveam download local ubuntu-24.04-standard_24.04-2_amd64.tar.zst'" in messages[0]
    assert messages[0].endswith("See docs/proxmox-host.md#the-container-template (llmops.serving).")
    assert not node.conf_path(PREREQ_VMID).exists() and node.task_count(PREREQ_VMID, "vzcreate") == 0
    assert run.stats["pve"]["changed"] == 0


BOOT_CHECK_UNIT = "llmops-gpu-boot-check.service"


def boot_check_argv(node):
    """The installed unit's ExecStart, as systemd would run it at boot (the words here need no systemd unquoting: the
    test's paths hold no quotes, spaces, % or $)."""
    unit = (node.root / "etc/systemd/system" / BOOT_CHECK_UNIT).read_text()
    line = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(line) == 1, unit
    return line[0][len("ExecStart="):].split()


def test_after_a_reboot_into_a_new_uvm_major_the_boot_check_makes_the_nodes_and_names_the_raw_container(node):
    # Installed and enabled by the runs above (what systemctl enable does), ordered before the guests start.
    units = node.root / "etc/systemd/system"
    assert os.readlink(units / "multi-user.target.wants" / BOOT_CHECK_UNIT) == str(units / BOOT_CHECK_UNIT)
    unit_text = (units / BOOT_CHECK_UNIT).read_text()
    assert "Before=pve-guests.service" in unit_text and "After=systemd-modules-load.service" in unit_text
    report_path = node.root / "run/llmops-serving/gpu-boot-check.json"
    boot_id = (node.kit / "proc/sys/kernel/random/boot_id").read_text().strip()
    assert json.loads(report_path.read_text())["boot_id"] == boot_id, "the role ran it in this boot"
    assert sim_cli("gpu-fault", "--root", node.kit, "clear").returncode == 0

    # The node reboots into a driver update: the guests are down, nvidia-uvm registers 510 when it loads, no uvm node.
    api = node.api.nodes("pve").lxc
    for vmid in (RAW_VMID, DEV_VMID):
        node.wait_task(api(vmid).status.stop.post())
    faults = sim_cli("gpu-fault", "--root", node.kit, "add", "rebooted", "uvm-major=510")
    assert faults.returncode == 0, faults.stderr
    assert not (node.dev / "nvidia-uvm").exists()
    calls_before = (node.root / "nvidia-modprobe.log").read_text().count("\n")

    # systemd runs the boot check before pve-guests.
    check = subprocess.run(boot_check_argv(node), capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 1, check.stdout + check.stderr
    report = json.loads(report_path.read_text())
    assert report["boot_id"] != boot_id and report["uvm_major"] == 510
    assert report["created"] == [str(node.dev / "nvidia-uvm"), str(node.dev / "nvidia-uvm-tools")]
    assert (node.root / "nvidia-modprobe.log").read_text().count("\n") == calls_before + 1
    access = dict((entry["vmid"], entry["access"]) for entry in report["containers"])
    assert access[RAW_VMID] == "none" and access[DEV_VMID] == "dev", report["containers"]
    assert "container %d: %s passes NVIDIA devices but allows no character devices of major 510" % (
        RAW_VMID, node.conf_path(RAW_VMID)) in check.stderr
    assert "container %d" % DEV_VMID not in check.stderr

    # pve-guests starts them anyway: the dev-style container has its GPUs, the raw one is refused the uvm node - as the
    # boot check said.
    for vmid in (RAW_VMID, DEV_VMID):
        node.wait_task(api(vmid).status.start.post())
    assert node.open_inside(DEV_VMID) == ALL_ENXIO
    seen = node.open_inside(RAW_VMID)
    assert seen["nvidia-uvm"] == "EPERM" and seen["nvidia0"] == "ENXIO"

    # The next deploy rewrites the raw line; the boot check then finds nothing.
    run = node.run_playbook(container_vars(RAW_VMID, "raw", "file"))
    assert run.rc == 0, run.summary()
    assert "c 510:* rwm" in node.conf(RAW_VMID)
    assert node.open_inside(RAW_VMID) == ALL_ENXIO
    check = subprocess.run(boot_check_argv(node), capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0 and check.stderr == "", check.stderr
    assert json.loads(report_path.read_text())["problems"] == []
