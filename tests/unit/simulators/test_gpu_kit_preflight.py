# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU kit's node shows what the GPU preflight reads, healthy by default and each fault on demand (issue 29, item 4):
nvidia-smi topo -m and its query fields, a sysfs PCIe tree, lspci, the kernel log, dkms and the kernels, /proc/devices
and the uvm nodes. Each behaviour both ways, with the refusals of the real programs."""
from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

SIM_SOURCE = os.path.realpath(str(pathlib.Path(__file__).resolve().parents[3] / "simulators" / "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import cli, gpu_host, gpu_kit  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the GPU kit's device nodes need mknod (root)")

UVM = 238
QUERY = ("--query-gpu=index,uuid,pci.bus_id,name,persistence_mode,pcie.link.gen.gpucurrent,pcie.link.gen.max,"
         "pcie.link.width.current,pcie.link.width.max,ecc.mode.current,retired_pages.pending,remapped_rows.pending,"
         "remapped_rows.failure")


def make(tmp_path, *faults, **options):
    return gpu_kit.create_kit(str(tmp_path / "kit"), UVM, faults=faults, **options)


def run(kit, program, *args):
    result = subprocess.run([os.path.join(kit["root"], "usr", "bin", program)] + list(args), capture_output=True,
                            text=True, check=False, timeout=60)
    return result.returncode, result.stdout, result.stderr


def smi_rows(kit):
    code, out, _err = run(kit, "nvidia-smi", QUERY, "--format=csv,noheader,nounits")
    assert code == 0, out
    return [line.split(", ") for line in out.splitlines()]


def topo_cells(kit):
    code, out, _err = run(kit, "nvidia-smi", "topo", "-m")
    assert code == 0
    return [line.split("\t") for line in out.splitlines()[1:] if line.startswith("GPU")]


# ---- nvidia-smi -------------------------------------------------------------------------------------------------------
def test_healthy_query_fields_are_what_a_real_gpu_prints(tmp_path):
    rows = smi_rows(make(tmp_path))
    # As the H200 printed them (data/gpu_preflight/h200-vm-580.159.04/query-gpu-csv-nh.txt), at the A6000's Gen4.
    assert rows[0][4:] == ["Enabled", "4", "4", "16", "16", "Enabled", "[N/A]", "No", "No"]
    assert [row[2] for row in rows] == ["00000000:11:00.0", "00000000:18:00.0"]


def test_faults_change_the_query_fields(tmp_path):
    kit = make(tmp_path, "persistence-off", "ecc-off=0", "remap-pending", "remap-failure=1", "narrow-link=1:4", "slow-link=0:1")
    rows = smi_rows(kit)
    assert [row[4] for row in rows] == ["Disabled", "Disabled"]
    assert [row[9] for row in rows] == ["Disabled", "Enabled"]
    assert rows[1][11:] == ["Yes", "Yes"] and rows[0][11:] == ["No", "No"]
    assert (rows[1][7], rows[1][8]) == ("4", "16") and (rows[0][7], rows[0][8]) == ("16", "16")
    assert (rows[0][5], rows[0][6]) == ("1", "4")


def test_an_unknown_query_field_is_refused_as_the_real_one_refuses_it(tmp_path):
    code, out, _err = run(make(tmp_path), "nvidia-smi", "--query-gpu=index,no.such.field", "--format=csv")
    real = (pathlib.Path(__file__).resolve().parents[2] / "unit" / "plugins" / "module_utils" / "data" / "gpu_preflight"
            / "h200-vm-580.159.04" / "query-bad-field.txt").read_text().splitlines()
    assert (code, out.splitlines()) == (int(real[-1].strip("[exit ]")), real[1:-1])


@pytest.mark.parametrize("topology,code", [("switch", "PIX"), ("root-ports", "PHB"), ("host-bridges", "NODE"),
                                           ("sockets", "SYS"), ("nvlink", "NV4")])
def test_topo_matrix_follows_the_pcie_tree(tmp_path, topology, code):
    cells = topo_cells(make(tmp_path, topology=topology))
    assert cells[0][1:3] == [" X ", code] and cells[1][1:3] == [code, " X "]
    if topology == "sockets":
        assert (cells[0][3:5], cells[1][3:5]) == (["0-15", "0"], ["16-31", "1"])


def test_topo_matrix_is_laid_out_as_the_real_one(tmp_path):
    code, out, _err = run(make(tmp_path, gpus=1), "nvidia-smi", "topo", "-m")
    real = (pathlib.Path(__file__).resolve().parents[2] / "unit" / "plugins" / "module_utils" / "data" / "gpu_preflight"
            / "h200-vm-580.159.04" / "topo-m.txt").read_text().splitlines()[1:-1]
    # The same bytes as the real H200's, escapes and tabs included.
    assert (code, out.splitlines()) == (0, real)


def test_topo_refuses_what_the_real_one_refuses(tmp_path):
    kit = make(tmp_path)
    assert run(kit, "nvidia-smi", "topo", "-m", "-i", "0")[:2] == (
        2, "The -i command line argument must be used in conjunction with -n or -p.\n")
    assert run(kit, "nvidia-smi", "topo", "--nonsense")[0] == 2


# ---- sysfs ------------------------------------------------------------------------------------------------------------
def test_sysfs_links_and_attributes(tmp_path):
    kit = make(tmp_path)
    sys_root = pathlib.Path(kit["sysfs_root"])
    gpu = sys_root / "bus" / "pci" / "devices" / "0000:18:00.0"
    assert os.readlink(str(gpu)) == "../../../devices/pci0000:00/0000:00:01.1/0000:0f:00.0/0000:10:01.0/0000:18:00.0"
    assert (gpu / "current_link_width").read_text() == "16\n" and (gpu / "max_link_width").read_text() == "16\n"
    assert (gpu / "current_link_speed").read_text() == "16.0 GT/s PCIe\n"
    group = os.path.realpath(str(gpu / "iommu_group"))
    assert os.path.dirname(group) == str(sys_root / "kernel" / "iommu_groups")
    assert pathlib.Path(group, "type").read_text() == "identity\n"
    assert os.path.exists(os.path.join(group, "devices", "0000:18:00.0"))


def test_sysfs_narrow_link_translated_iommu_and_no_iommu(tmp_path):
    kit = make(tmp_path, "narrow-link=1:4", iommu="translated")
    gpu = pathlib.Path(kit["sysfs_root"], "bus", "pci", "devices", "0000:18:00.0")
    assert ((gpu / "current_link_width").read_text(), (gpu / "max_link_width").read_text()) == ("4\n", "16\n")
    assert pathlib.Path(os.path.realpath(str(gpu / "iommu_group")), "type").read_text() == "DMA-FQ\n"
    kit = gpu_kit.create_kit(kit["root"], UVM, iommu="off")
    assert not os.path.exists(os.path.join(kit["sysfs_root"], "kernel", "iommu_groups"))
    assert not os.path.lexists(os.path.join(kit["sysfs_root"], "bus", "pci", "devices", "0000:18:00.0", "iommu_group"))


# ---- lspci ------------------------------------------------------------------------------------------------------------
def test_lspci_gpu_and_bridges(tmp_path):
    kit = make(tmp_path)
    code, out, _err = run(kit, "lspci", "-vvv", "-s", "0000:18:00.0")
    assert code == 0
    assert out.startswith("18:00.0 VGA compatible controller: NVIDIA Corporation GA102GL [RTX A6000] (rev a1)")
    assert "\t\tLnkSta:\tSpeed 16GT/s, Width x16\n" in out and "\tIOMMU group: " in out
    code, out, _err = run(kit, "lspci", "-vvv", "-s", "10:01.0")
    assert out.startswith("10:01.0 PCI bridge: ") and "Downstream Port" in out
    assert "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n" in out
    # nvidia-smi's bus ID (8-digit domain) is a slot lspci takes.
    assert run(kit, "lspci", "-vvv", "-s", "00000000:18:00.0")[1].startswith("18:00.0 ")
    assert run(kit, "lspci", "-D", "-s", "18:00.0")[1].startswith("0000:18:00.0 VGA compatible controller")


def test_lspci_downgraded_link_and_acs_redirect(tmp_path):
    kit = make(tmp_path, "narrow-link=1:4", "acs-redirect")
    out = run(kit, "lspci", "-vvv", "-s", "18:00.0")[1]
    assert "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, " in out
    assert "\t\tLnkSta:\tSpeed 16GT/s, Width x4 (downgraded)\n" in out
    bridge = run(kit, "lspci", "-vvv", "-s", "10:01.0")[1]
    # A downstream port never says downgraded (pciutils link_compare).
    assert "\t\tLnkSta:\tSpeed 16GT/s, Width x4\n" in bridge
    assert "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n" in bridge


def test_lspci_unknown_and_malformed_slots(tmp_path):
    kit = make(tmp_path)
    assert run(kit, "lspci", "-vvv", "-s", "0000:99:00.0") == (0, "", "")
    assert run(kit, "lspci", "-vvv", "-s", "18:20.0") == (1, "", "lspci: -s: Invalid slot number\n")
    assert run(kit, "lspci", "-s", "1:2:3:4") == (1, "", "lspci: -s: Too many fields\n")
    assert run(kit, "lspci", "-tv")[0] == 2


# ---- kernel log ---------------------------------------------------------------------------------------------------------
def test_kernel_log_healthy_and_with_xid(tmp_path):
    kit = make(tmp_path)
    code, out, _err = run(kit, "dmesg")
    assert code == 0 and "Xid" not in out
    assert "] iommu: Default domain type: Passthrough (set via kernel command line)\n" in out
    assert "] nvidia-uvm: Loaded the UVM driver, major device number 238.\n" in out
    assert all(line.startswith("[") and line[13] == "]" for line in out.splitlines())
    gpu_kit.add_faults(kit["root"], ["xid=79:1"])
    out = run(kit, "dmesg")[1]
    assert "] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n" in out
    assert run(kit, "dmesg", "--bogus") == (1, "", "dmesg: unrecognized option '--bogus'\n"
                                                   "Try 'dmesg --help' for more information.\n")
    assert not os.path.exists(os.path.join(kit["root"], "usr", "bin", "journalctl"))


def test_translated_iommu_in_the_log_and_cmdline(tmp_path):
    kit = make(tmp_path, iommu="translated")
    out = run(kit, "dmesg")[1]
    assert "] iommu: Default domain type: Translated\n" in out and "Passthrough" not in out
    assert "iommu=pt" not in pathlib.Path(kit["proc_root"], "cmdline").read_text()


# ---- kernels and dkms ---------------------------------------------------------------------------------------------------
def test_dkms_and_kernels_healthy_and_module_missing_for_next_kernel(tmp_path):
    kit = make(tmp_path)
    assert run(kit, "dkms", "status") == (0, "nvidia/580.95.05, 6.14.8-2-pve, x86_64: installed\n", "")
    assert os.path.exists(os.path.join(kit["modules_root"], "6.14.8-2-pve", "updates", "dkms", "nvidia.ko"))
    kit = gpu_kit.add_faults(kit["root"], ["module-missing-next-kernel"])
    assert sorted(os.listdir(kit["boot_dir"])) == ["vmlinuz-6.14.11-4-pve", "vmlinuz-6.14.8-2-pve"]
    assert not os.path.exists(os.path.join(kit["modules_root"], "6.14.11-4-pve", "updates", "dkms", "nvidia.ko"))
    assert run(kit, "dkms", "status") == (0, "nvidia/580.95.05, 6.14.8-2-pve, x86_64: installed\n", "")
    assert run(kit, "dkms", "status", "-k", "6.14.11-4-pve") == (0, "", "")
    assert pathlib.Path(kit["proc_root"], "sys", "kernel", "osrelease").read_text() == "6.14.8-2-pve\n"
    assert run(kit, "dkms", "remove")[0] == 2


# ---- uvm after a reboot -------------------------------------------------------------------------------------------------
def uvm_state(kit):
    devices = pathlib.Path(kit["proc_root"], "devices").read_text().splitlines()
    major = [line.split()[0] for line in devices if line.endswith(" nvidia-uvm")]
    node = os.path.join(kit["dev_dir"], "nvidia-uvm")
    return major, (os.major(os.stat(node).st_rdev) if os.path.exists(node) else None)


def test_rebooted_uvm_nodes_gone_and_modprobe_brings_them_back(tmp_path):
    kit = make(tmp_path, "xid=79:0")
    assert uvm_state(kit) == (["238"], 238)
    kit = gpu_kit.add_faults(kit["root"], ["rebooted"])
    assert uvm_state(kit) == ([], None)
    assert "nvidia-uvm: Loaded" not in run(kit, "dmesg")[1]
    # nvidia-modprobe -u -c0 (the node's stand-in runs gpu-kit --modprobe): nodes back, other faults kept.
    assert cli.main(["gpu-kit", "--root", kit["root"], "--uvm-major", str(UVM), "--modprobe"]) == 0
    record = gpu_kit.read_record(kit["root"])
    assert uvm_state(kit) == (["238"], 238) and [fault["name"] for fault in record["faults"]] == ["xid"]


def test_a_reboot_gives_the_node_a_new_boot_id_and_nothing_else_does(tmp_path):
    kit = make(tmp_path)
    boot_file = pathlib.Path(kit["boot_id_file"])
    first = boot_file.read_text().strip()
    assert len(first) == 36 and first == kit["boot_id"]
    kit = gpu_kit.add_faults(kit["root"], ["ecc-off"])
    assert boot_file.read_text().strip() == first
    # nvidia-modprobe repairs the uvm nodes in the same boot.
    assert cli.main(["gpu-kit", "--root", kit["root"], "--uvm-major", str(UVM), "--modprobe"]) == 0
    assert boot_file.read_text().strip() == first
    version = pathlib.Path(kit["proc_version"]).read_text()
    kit = gpu_kit.add_faults(kit["root"], ["rebooted"])
    second = boot_file.read_text().strip()
    assert second != first and gpu_kit.read_record(kit["root"])["boot_id"] == second
    # The module's version file (its build date included) is the same after the reboot, as on a real node; another
    # driver version is another build.
    assert pathlib.Path(kit["proc_version"]).read_text() == version
    record = gpu_kit.read_record(kit["root"])
    other = gpu_kit.create_kit(kit["root"], **dict(record["description"], driver_version="580.105.08"))
    assert "580.105.08" in pathlib.Path(other["proc_version"]).read_text()


def test_the_nodes_systemctl_answers_daemon_reload_and_refuses_the_rest(tmp_path):
    root = tmp_path / "node-root"
    kit = make(tmp_path)
    gpu_kit.write_node_programs(str(root), kit["root"], UVM, 2, "580.95.05", kit["dev_dir"], False)
    systemctl = str(root / "usr" / "bin" / "systemctl")
    assert subprocess.run([systemctl, "daemon-reload"], capture_output=True, timeout=30, check=False).returncode == 0
    refused = subprocess.run([systemctl, "start", "llmops-gpu-boot-check.service"], capture_output=True, text=True,
                             timeout=30, check=False)
    assert refused.returncode == 1
    assert "System has not been booted with systemd as init system (PID 1). Can't operate." in refused.stderr
    assert (root / "systemctl.log").read_text() == "daemon-reload\nstart llmops-gpu-boot-check.service\n"


def test_uvm_major_changed_and_nodes_missing(tmp_path):
    kit = make(tmp_path, "uvm-major=511")
    assert uvm_state(kit) == (["511"], 511)
    kit = gpu_kit.clear_faults(kit["root"])
    assert uvm_state(kit) == (["238"], 238)
    kit = gpu_kit.add_faults(kit["root"], ["uvm-nodes-missing"])
    assert uvm_state(kit) == (["238"], None)
    assert stat.S_ISCHR(os.stat(os.path.join(kit["dev_dir"], "nvidiactl")).st_mode)


# ---- the switches themselves ----------------------------------------------------------------------------------------------
def test_fault_switches_refuse_what_they_cannot_do(tmp_path):
    for bad in ("no-such-fault", "narrow-link=5", "narrow-link=1:3", "xid=0", "uvm-major=195", "uvm-major", "rebooted=1"):
        with pytest.raises(gpu_host.GpuFaultError):
            make(tmp_path, bad)
    kit = make(tmp_path)
    assert cli.main(["gpu-fault", "--root", kit["root"], "add", "ecc-off=7"]) == 2
    assert cli.main(["gpu-fault", "--root", str(tmp_path / "none"), "add", "ecc-off"]) == 2
    assert cli.main(["gpu-kit", "--root", kit["root"], "--uvm-major", "238", "--fault", "bogus"]) == 2


def test_gpu_fault_cli_add_list_clear(tmp_path, capsys):
    kit = make(tmp_path)
    assert cli.main(["gpu-fault", "--root", kit["root"], "add", "ecc-off=1", "acs-redirect"]) == 0
    assert [fault["name"] for fault in json.loads(capsys.readouterr().out)["faults"]] == ["ecc-off", "acs-redirect"]
    assert [row[9] for row in smi_rows(kit)] == ["Enabled", "Disabled"]
    assert cli.main(["gpu-fault", "--root", kit["root"], "clear", "ecc-off"]) == 0
    assert [fault["name"] for fault in json.loads(capsys.readouterr().out)["faults"]] == ["acs-redirect"]
    assert [row[9] for row in smi_rows(kit)] == ["Enabled", "Enabled"]
    assert cli.main(["gpu-fault", "--root", kit["root"], "clear"]) == 0
    assert json.loads(capsys.readouterr().out)["faults"] == []
    assert "ReqRedir-" in run(kit, "lspci", "-vvv", "-s", "10:00.0")[1].split("ACSCtl:")[1].splitlines()[0]
