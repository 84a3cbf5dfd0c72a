"""gpu_preflight: the whole module on a fake node (synthetic sysfs, procfs, dev and module trees; fake nvidia-smi,
lspci, dkms and journalctl that print files). Where a real output exists the fakes print it: the H200 VM's
/proc/devices, an ACSCtl line from NCCL issue 523, an Xid 79 line from NVSentinel issue 155, the LnkSta/LnkCap
lines of geerlingguy/raspberry-pi-pcie-devices issue 480 and LACT issue 593 (see
module_utils/data/gpu_preflight/README.md) and dkms's error lines from negativo17/nvidia-driver issue 56
(https://github.com/negativo17/nvidia-driver/issues/56); the rest is synthetic in the real formats."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import gpu_preflight
from ansible_collections.llmops.serving.tests.support.task_result import ansible_task_result
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import H200, captured, public

UUIDS = ["GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-1111-4111-8111-111111111111"]
ROOT_PORT, SWITCH_UP, DOWN = "0000:00:01.0", "0000:01:00.0", ["0000:02:08.0", "0000:02:10.0"]
GPUS = ["0000:03:00.0", "0000:04:00.0"]
ACS_ON = public("lspci-acsctl-nccl-523.txt").splitlines()[1]  # ReqRedir+ CmpltRedir+
ACS_OFF = public("lspci-acsctl-nccl-523.txt").splitlines()[4]
# Synthetic, in the H200's real layout (topo-m.txt): escapes around the header, padded rows, the legend.
TOPO_PXB = ("\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tPXB\t0-15\t0\t\tN/A\nGPU1\tPXB\t X \t0-15\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n")
RUNNING, NEXT = "6.8.12-4-pve", "6.8.12-9-pve"


def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class FakeNode:
    """Everything the module reads, under one tmp directory; each method breaks or heals one thing."""

    def __init__(self, root):
        self.root = root
        self.bin = root / "bin"
        self.out = root / "out"
        for directory in (self.bin, self.out, root / "sys", root / "proc", root / "dev", root / "boot", root / "etc/kernel"):
            directory.mkdir(parents=True, exist_ok=True)
        script(self.bin / "nvidia-smi", 'case "$1" in\n  --query-gpu=*) f=query;;\n  --query-compute-apps=*) f=apps;;\n  topo) f=topo;;\n  *) f=other;;\n'
                                        'esac\n/bin/cat "%s/$f.txt" 2>/dev/null\nexit $(/bin/cat "%s/$f.rc" 2>/dev/null || echo 0)\n' % (self.out, self.out))
        script(self.bin / "lspci", '/bin/cat "%s/lspci-$3.txt" 2>/dev/null\n' % self.out)
        script(self.bin / "dkms", '/bin/cat "%s/dkms.txt"\n' % self.out)
        script(self.bin / "journalctl", '/bin/cat "%s/kernel.txt"\n' % self.out)
        self.write("query.txt", "".join("%d, %s, 00000000:%s, NVIDIA H100 PCIe, Enabled, 5, 5, 16, 16, Enabled, [N/A], No, No\n" % (
            index, UUIDS[index], GPUS[index][5:].upper()) for index in range(2)))
        self.write("apps.txt", "")
        self.write("topo.txt", TOPO_PXB)
        self.write("dkms.txt", "nvidia/550.54.14, %s, x86_64: installed\nnvidia/550.54.14, %s, x86_64: installed\n" % (RUNNING, NEXT))
        self.write("kernel.txt", "[    0.137256] pve kernel: iommu: Default domain type: Passthrough\n")
        self.sysfs()
        for bdf in (ROOT_PORT, SWITCH_UP) + tuple(DOWN):
            self.acs(bdf, on=False)
        # The H200's real /proc/devices, with nvidia-uvm at the major of /dev/null, which stands in for the node.
        (root / "proc" / "devices").write_text(captured(H200 / "proc-devices.txt").replace("238 nvidia-uvm", "  1 nvidia-uvm"))
        (root / "proc" / "cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz-%s root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n" % RUNNING)
        os.symlink("/dev/null", root / "dev" / "nvidia-uvm")
        for kernel in (RUNNING, NEXT):
            (root / "lib/modules" / kernel / "updates/dkms").mkdir(parents=True)
            (root / "lib/modules" / kernel / "updates/dkms/nvidia.ko").write_text("")
            (root / "boot" / ("vmlinuz-" + kernel)).write_text("")

    def write(self, name, text):
        (self.out / name).write_text(text)

    def sysfs(self, width=16):
        sysfs = self.root / "sys"
        devices = sysfs / "bus/pci/devices"
        devices.mkdir(parents=True)
        chains = [[ROOT_PORT], [ROOT_PORT, SWITCH_UP]] + [[ROOT_PORT, SWITCH_UP, DOWN[i]] for i in range(2)] + \
                 [[ROOT_PORT, SWITCH_UP, DOWN[i], GPUS[i]] for i in range(2)]
        for chain in chains:
            directory = sysfs.joinpath("devices", "pci0000:00", *chain)
            directory.mkdir(parents=True, exist_ok=True)
            for name, value in (("current_link_width", width if chain[-1] == GPUS[1] else 16), ("max_link_width", 16),
                                ("current_link_speed", "32.0 GT/s PCIe"), ("max_link_speed", "32.0 GT/s PCIe")):
                (directory / name).write_text("%s\n" % value)
            os.symlink(os.path.relpath(directory, devices), devices / chain[-1])

    def set_width(self, bdf, width):
        link = self.root / "sys/bus/pci/devices" / bdf
        (link.resolve() / "current_link_width").write_text("%d\n" % width)

    def drop_link_attributes(self, bdf):
        """The GPU's sysfs directory stays, its link attributes go (as where the kernel does not expose them)."""
        device = (self.root / "sys/bus/pci/devices" / bdf).resolve()
        for name in ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed"):
            (device / name).unlink()

    def acs(self, bdf, on):
        self.write("lspci-%s.txt" % bdf, "%s PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch\n"
                   "\tCapabilities: [148 v1] Access Control Services\n"
                   "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+\n"
                   "%s\n" % (bdf[5:], ACS_ON if on else ACS_OFF))

    def iommu_group(self, bdf, group, group_type):
        directory = self.root / "sys/kernel/iommu_groups" / group
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "type").write_text(group_type + "\n")
        device = (self.root / "sys/bus/pci/devices" / bdf).resolve()
        os.symlink(os.path.relpath(directory, device), device / "iommu_group")

    def args(self, **changes):
        root = self.root
        args = {"scope": "node", "gpu_groups": [{"name": "tp2", "gpus": ["0", UUIDS[1]]}],
                "nvidia_smi": str(self.bin / "nvidia-smi"), "lspci": str(self.bin / "lspci"), "dkms": str(self.bin / "dkms"),
                "kernel_log_command": [str(self.bin / "journalctl"), "-k", "-b"], "sysfs_root": str(root / "sys"),
                "proc_root": str(root / "proc"), "dev_dir": str(root / "dev"), "modules_root": str(root / "lib/modules"),
                "boot_dir": str(root / "boot"), "boot_pin_file": str(root / "etc/kernel/proxmox-boot-pin"), "running_kernel": RUNNING}
        args.update(changes)
        return args


@pytest.fixture
def node(tmp_path, monkeypatch):
    # The fallback `dmesg` and every other bare name resolve in the fake bin only, never on the test machine.
    fake = FakeNode(tmp_path)
    monkeypatch.setenv("PATH", str(fake.bin))
    return fake


def checks_of(result, severity=None):
    return sorted((f["check"], f["subject"]) for f in result["findings"] if severity is None or f["severity"] == severity)


def test_a_healthy_node_has_only_the_path_as_info(node):
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and result["changed"] is False
    assert (result["error_count"], result["warning_count"]) == (0, 0)
    # Not "warnings": Ansible reads that key of a result as its list of warning messages (an int fails the task).
    assert "warnings" not in result and "errors" not in result
    assert checks_of(result) == [("p2p_path", "server tp2")]
    assert result["summary"][0].startswith("INFO p2p_path server tp2: the worst link between the GPUs of server tp2 is PXB")
    assert result["topology"]["gpus"]["GPU1"]["links"]["GPU0"] == "PXB"
    assert [gpu["pcie_path"] for gpu in result["gpus"]] == [[ROOT_PORT, SWITCH_UP, DOWN[0]], [ROOT_PORT, SWITCH_UP, DOWN[1]]]
    assert result["gpus"][0]["sysfs_link"]["current_width"] == 16 and result["gpus"][0]["in_deployment"]
    assert result["uvm"] == {"major": 1, "node": {"exists": True, "char": True, "major": 1, "minor": 3}}
    assert result["kernels"]["next_boot"] == NEXT and result["skipped_checks"] == []
    task_result = ansible_task_result("pve", result)
    assert not task_result.is_skipped() and not task_result.is_failed() and not task_result.is_changed()


def test_acs_redirect_with_a_translating_iommu_fails_and_names_both(node):
    node.acs(DOWN[0], on=True)
    node.acs(DOWN[1], on=True)
    for index, bdf in enumerate(GPUS):
        node.iommu_group(bdf, str(30 + index), "DMA-FQ")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert failed
    assert checks_of(result, "error") == [("acs_redirect", "server tp2"), ("iommu_translated", "server tp2")]
    acs = [f for f in result["findings"] if f["check"] == "acs_redirect"][0]
    assert DOWN[0] in acs["what"] and DOWN[1] in acs["what"] and SWITCH_UP not in acs["what"]
    assert acs["evidence"][0] == "%s %s" % (DOWN[0], ACS_ON.strip())
    assert result["msg"].splitlines()[0] == "GPU preflight found 2 errors:"
    assert [line[2:] for line in result["msg"].splitlines()[1:]] == result["summary"][:2]
    assert result["gpus"][1]["iommu_mode"] == "translated" and result["gpus"][1]["iommu_group"] == "31"


def test_acs_redirect_alone_is_a_warning_and_passthrough_is_fine(node):
    node.acs(SWITCH_UP, on=True)
    for index, bdf in enumerate(GPUS):
        node.iommu_group(bdf, str(30 + index), "identity")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and checks_of(result, "warning") == [("acs_redirect", "server tp2")]


def test_gpus_over_nvlink_skip_acs_and_iommu(node):
    node.write("topo.txt", TOPO_PXB.replace("PXB", "NV12"))
    node.acs(DOWN[0], on=True)
    node.iommu_group(GPUS[0], "30", "DMA")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and checks_of(result) == [("p2p_path", "server tp2")]


def test_a_narrow_link_the_missing_uvm_node_a_stray_process_and_an_xid(node, tmp_path):
    node.set_width(GPUS[1], 4)
    os.unlink(tmp_path / "dev" / "nvidia-uvm")
    node.write("apps.txt", "4242, %s, 70000, python3\n" % UUIDS[1])
    (tmp_path / "proc/4242").mkdir()
    (tmp_path / "proc/4242/cgroup").write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    (tmp_path / "proc/4242/cmdline").write_bytes(b"/usr/bin/python3\0-m\0sglang.launch_server\0")
    # The real Xid 79 line (NVSentinel issue 155) moved onto GPU1's bus.
    node.write("kernel.txt", "[  88.1] pve kernel: " + public("xid-79-nvsentinel-155.txt").replace("0000:44:00", "0000:04:00"))
    result, failed = run_module(gpu_preflight.main, node.args())
    assert failed
    assert checks_of(result, "error") == [("gpu_memory_without_unit", "GPU1 0000:04:00.0"), ("pcie_link_width", "GPU1 0000:04:00.0"),
                                          ("uvm_node", str(tmp_path / "dev" / "nvidia-uvm")), ("xid_event", "GPU1 0000:04:00.0")]
    width = [f for f in result["findings"] if f["check"] == "pcie_link_width"][0]
    assert "x4" in width["what"] and "(sysfs)" in width["what"]


def test_the_next_boot_kernel_without_module_and_a_container_config_with_an_old_major(node, tmp_path):
    os.unlink(tmp_path / "lib/modules" / NEXT / "updates/dkms/nvidia.ko")
    node.write("dkms.txt", "nvidia/550.54.14, %s, x86_64: installed\n" % RUNNING)
    config = tmp_path / "105.conf"
    config.write_text("lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 508:* rwm\n")
    result, failed = run_module(gpu_preflight.main, node.args(container_configs=[str(config)]))
    assert failed
    assert checks_of(result, "error") == [("nvidia_module_not_built", "kernel %s (next boot)" % NEXT)]
    # A warning: the node is checked before pve_container rewrites the line, and an error would stop that fix.
    assert checks_of(result, "warning") == [("uvm_major_mismatch", str(config))]


def test_fail_on_error_false_reports_without_failing(node, tmp_path):
    os.unlink(tmp_path / "dev" / "nvidia-uvm")
    result, failed = run_module(gpu_preflight.main, node.args(fail_on_error=False))
    assert not failed and result["error_count"] == 1 and "msg" not in result


def test_missing_programs_are_findings_not_failures(node):
    node.acs(DOWN[0], on=True)
    for name in ("lspci", "dkms", "journalctl"):
        os.unlink(node.bin / name)
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed
    assert checks_of(result) == [("kernel_log_unreadable", "kernel log"), ("p2p_path", "server tp2"),
                                 ("program_missing", str(node.bin / "dkms")), ("program_missing", str(node.bin / "lspci"))]
    unreadable = [f for f in result["findings"] if f["check"] == "kernel_log_unreadable"][0]
    assert unreadable["severity"] == "info" and unreadable["evidence"][1] == "dmesg: dmesg: not found"


def test_without_nvidia_smi_the_node_checks_still_run(node):
    os.unlink(node.bin / "nvidia-smi")
    result, failed = run_module(gpu_preflight.main, node.args(gpu_groups=[]))
    assert failed and checks_of(result, "error") == [("nvidia_smi_failed", "nvidia-smi")]
    assert result["gpus"] == [] and result["kernels"]["running"] == RUNNING


def test_an_older_driver_is_asked_again_without_gpucurrent(node):
    node.write("query.rc", "2")
    node.write("query.txt", captured(H200 / "query-bad-field.txt").replace("no.such.field", "pcie.link.gen.gpucurrent"))
    result, failed = run_module(gpu_preflight.main, node.args(gpu_groups=[]))
    # The fake answers the fallback with the same refusal: one error, named with nvidia-smi's own line.
    assert failed and checks_of(result, "error") == [("nvidia_smi_failed", "nvidia-smi")]
    assert 'Field "pcie.link.gen.gpucurrent" is not a valid field to query.' in result["findings"][0]["what"]


def test_an_unknown_gpu_in_a_group_is_an_error(node):
    result, failed = run_module(gpu_preflight.main, node.args(gpu_groups=[{"name": "big", "gpus": ["0", "7"]}]))
    assert failed and checks_of(result, "error") == [("gpu_unknown", "server big")]


def test_the_container_scope_skips_what_only_the_node_sees(node, tmp_path):
    node.set_width(GPUS[1], 4)
    result, failed = run_module(gpu_preflight.main, {"scope": "container", "nvidia_smi": str(node.bin / "nvidia-smi"),
                                                     "proc_root": str(tmp_path / "proc"), "dev_dir": str(tmp_path / "dev"),
                                                     "kernel_log_command": [str(node.bin / "journalctl")]}, check_mode=True)
    assert not failed and result["changed"] is False
    assert [entry["check"] for entry in result["skipped_checks"]] == ["topology", "acs", "iommu", "kernel_module_build"]
    assert result["topology"] is None and result["kernels"] is None and "pcie_path" not in result["gpus"][0]
    assert checks_of(result) == []  # nvidia-smi says x16: the container judges the link by nvidia-smi only
    task_result = ansible_task_result("ct", result)
    assert not task_result.is_skipped()


def test_hostile_outputs_are_bounded_and_made_visible(node, tmp_path):
    node.write("kernel.txt", "NVRM: Xid (PCI:0000:03:00): 79, pid=1, name=\x1b]2;pwned\x07, GPU has fallen off the bus\n" + "A" * 9000000)
    node.write("topo.txt", "\x1b[2J" * 1000 + "\n")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert failed and checks_of(result, "error") == [("xid_event", "GPU0 0000:03:00.0")]
    assert checks_of(result, "warning") == [("topology_unreadable", "nvidia-smi topo -m")]
    text = repr(result["findings"])
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]2;pwned\\x07" in result["findings"][0]["what"]
    assert max(len(line) for line in result["summary"]) < 5000


def test_a_translated_default_domain_without_iommu_groups_is_not_translation(node):
    # The real H200 VM logs "iommu: Default domain type: Translated" and has no IOMMU group: nothing translates.
    node.write("kernel.txt", (H200 / "dmesg-nvidia-iommu.txt").read_text())
    node.acs(DOWN[0], on=True)
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and [gpu["iommu_mode"] for gpu in result["gpus"]] == ["off", "off"]
    assert checks_of(result, "warning") == [("acs_redirect", "server tp2")]


def test_a_pid_that_is_another_process_here_is_not_blamed(node, tmp_path):
    # NVML numbers processes in the node's PID namespace: inside a container the same number can be anything else.
    node.write("apps.txt", "4242, %s, 70000, python3\n" % UUIDS[1])
    (tmp_path / "proc/4242").mkdir()
    (tmp_path / "proc/4242/cgroup").write_text("0::/user.slice/user-0.slice/session-3.scope\n")
    (tmp_path / "proc/4242/cmdline").write_bytes(b"/usr/sbin/sshd\0-D\0")
    (tmp_path / "proc/4242/stat").write_text("4242 (sshd) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed, result.get("msg")
    assert ("gpu_process_unattributed", "GPU1 0000:04:00.0") in checks_of(result)
    assert "gpu_memory_without_unit" not in [check for check, _subject in checks_of(result)]


def test_a_container_config_not_written_yet_is_skipped_and_an_unreadable_one_is_a_warning(node, tmp_path):
    # The first deployment checks the node before it creates the containers.
    result, failed = run_module(gpu_preflight.main, node.args(container_configs=[str(tmp_path / "301.conf")]))
    assert not failed and checks_of(result) == [("p2p_path", "server tp2")]
    assert {"check": "uvm_major_mismatch", "reason": "%s does not exist (yet)" % (tmp_path / "301.conf")} in result["skipped_checks"]
    (tmp_path / "302.conf").mkdir()
    result, failed = run_module(gpu_preflight.main, node.args(container_configs=[str(tmp_path / "302.conf")]))
    assert not failed and checks_of(result, "warning") == [("container_config_unreadable", str(tmp_path / "302.conf"))]


# --------------------------------------------------------------------------- the link from lspci where sysfs has none

def link_findings(result):
    return [f for f in result["findings"] if f["check"].startswith("pcie_link")]


def test_a_gpu_without_sysfs_link_attributes_is_judged_by_lspci(node):
    node.drop_link_attributes(GPUS[1])
    # The real LnkSta of geerlingguy/raspberry-pi-pcie-devices issue 480 (a Quadro RTX 8000 at x1), as lspci prints
    # it for the GPU; nvidia-smi still says x16 of x16, which the module no longer uses for this GPU.
    node.write("lspci-%s.txt" % GPUS[1], public("lspci-lnksta-downgraded-geerlingguy-480.txt"))
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed
    [width] = link_findings(result)
    assert (width["check"], width["severity"], width["subject"]) == ("pcie_link_width", "warning", "GPU1 0000:04:00.0")
    assert width["what"] == "lspci marks the PCIe link width x1 as downgraded"
    assert width["evidence"] == ["lspci -vvv -s 0000:04:00.0: LnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)"]
    assert result["gpus"][1]["lspci_link"] == {"current_speed": 5.0, "max_speed": None, "current_width": 1, "max_width": None}
    assert result["gpus"][1]["sysfs_link"]["current_width"] is None and "lspci_link" not in result["gpus"][0]
    # The same when sysfs has no entry for the GPU at all.
    os.unlink(node.root / "sys/bus/pci/devices" / GPUS[1])
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and [(f["check"], f["severity"], f["subject"], f["evidence"]) for f in link_findings(result)] == [
        ("pcie_link_width", "warning", "GPU1 0000:04:00.0", width["evidence"])]


def test_lspci_gives_the_same_finding_as_sysfs_for_the_same_link(node):
    node.set_width(GPUS[1], 4)
    by_sysfs, _failed = run_module(gpu_preflight.main, node.args())
    node.set_width(GPUS[1], 16)
    node.drop_link_attributes(GPUS[1])
    # Synthetic, in lspci -vvv's layout: the same x4 of x16 link as the sysfs attributes above.
    node.write("lspci-%s.txt" % GPUS[1], "04:00.0 3D controller: NVIDIA Corporation GH100 [H100 PCIe] (rev a1)\n"
               "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
               "\t\tLnkSta:\tSpeed 32GT/s, Width x4 (downgraded)\n")
    by_lspci, failed = run_module(gpu_preflight.main, node.args())
    assert failed
    [sysfs_width], [lspci_width] = link_findings(by_sysfs), link_findings(by_lspci)
    assert [(f["check"], f["severity"], f["subject"]) for f in (sysfs_width, lspci_width)] == [("pcie_link_width", "error", "GPU1 0000:04:00.0")] * 2
    assert lspci_width["what"] == sysfs_width["what"].replace("(sysfs)", "(lspci)") == "the PCIe link runs at x4, but both ends can do x16 (lspci)"
    assert lspci_width["evidence"] == ["lspci -vvv -s 0000:04:00.0: LnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported",
                                       "lspci -vvv -s 0000:04:00.0: LnkSta:\tSpeed 32GT/s, Width x4 (downgraded)"]
    assert lspci_width["consequence"] == sysfs_width["consequence"] and lspci_width["fix"] == sysfs_width["fix"]


def test_a_healthy_real_lspci_link_gives_no_finding(node):
    node.drop_link_attributes(GPUS[1])
    # The real full-width LnkCap/LnkSta of LACT issue 593 (an AMD GPU: the format is lspci's), with its command line.
    node.write("lspci-%s.txt" % GPUS[1], public("lspci-lnkcap-lnksta-lact-593.txt"))
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and checks_of(result) == [("p2p_path", "server tp2")]
    assert result["gpus"][1]["lspci_link"] == {"current_speed": 32.0, "max_speed": 32.0, "current_width": 16, "max_width": 16}


def test_without_sysfs_link_attributes_or_lspci_nvidia_smi_judges_and_says_so(node):
    node.drop_link_attributes(GPUS[1])
    os.unlink(node.bin / "lspci")
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and checks_of(result) == [("p2p_path", "server tp2"), ("program_missing", str(node.bin / "lspci"))]
    [missing] = [f for f in result["findings"] if f["check"] == "program_missing"]
    assert missing["severity"] == "warning" and missing["fix"] == "install it (Debian: apt install pciutils)"
    # One finding for both checks that needed lspci: the link (first) and ACS.
    assert missing["consequence"] == ("the PCIe link of a GPU without sysfs link attributes is judged from nvidia-smi alone; "
                                      "ACS redirect on the PCIe path between GPUs is not checked")
    assert "lspci_link" not in result["gpus"][1] and result["skipped_checks"] == []
    # nvidia-smi without the width either: nothing judges the link, and the result says so.
    node.write("query.txt", "".join("%d, %s, 00000000:%s, NVIDIA H100 PCIe, Enabled, 5, 5, %s, Enabled, [N/A], No, No\n" % (
        index, UUIDS[index], GPUS[index][5:].upper(), "16, 16" if index == 0 else "[N/A], [N/A]") for index in range(2)))
    result, failed = run_module(gpu_preflight.main, node.args())
    assert not failed and link_findings(result) == []
    assert result["skipped_checks"] == [{"check": "pcie_link_width",
                                         "reason": "GPU1 0000:04:00.0: neither sysfs, lspci nor nvidia-smi gives its link width"}]


def test_dkms_error_lines_on_stderr_are_the_evidence(node, tmp_path):
    os.unlink(tmp_path / "lib/modules" / RUNNING / "updates/dkms/nvidia.ko")
    # dkms's real error lines (negativo17/nvidia-driver issue 56) on stderr; the exit status 1 is synthetic.
    node.write("dkms-err.txt", "".join(line + "\n" for line in public("dkms-status-error-negativo17-56.txt").splitlines()[1:3]))
    script(node.bin / "dkms", '/bin/cat "%s/dkms-err.txt" >&2\nexit 1\n' % node.out)
    result, failed = run_module(gpu_preflight.main, node.args())
    assert failed and checks_of(result, "error") == [("nvidia_module_not_built", "kernel %s (running)" % RUNNING)]
    assert result["findings"][0]["evidence"] == [
        "dkms status lists no nvidia module", "Error! Could not locate dkms.conf file.",
        "File: /var/lib/dkms/nvidia/390.48/source/dkms.conf does not exist.", "no nvidia.ko* or nvidia-current*.ko* under the module tree of %s" % RUNNING]


BOOT_ID = "0f5c3c8e-5a57-4c8b-9d1e-2f3a4b5c6d7e"


def boot_files(node, tmp_path):
    """This boot's ID and the start of PID 1 (btime 2025-12-04T16:00:00Z plus 500 ticks)."""
    boot_id = tmp_path / "boot_id"
    boot_id.write_text(BOOT_ID + "\n")
    (node.root / "proc" / "stat").write_text("cpu  1 2 3 4\nbtime 1764864000\nprocesses 10\n")
    (node.root / "proc" / "1").mkdir()
    (node.root / "proc" / "1" / "stat").write_text("1 (systemd) S 0 1 1 0 -1 4194560 100 200 0 0 10 20 0 0 20 0 1 0 500 "
                                                   "1000 100 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 "
                                                   "0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    return str(boot_id)


def test_the_boot_facts_and_the_boot_checks_report(node, tmp_path):
    boot_id = boot_files(node, tmp_path)
    report = tmp_path / "gpu-boot-check.json"
    args = node.args(boot_id_file=boot_id, boot_check_report=str(report))
    # No report in this boot: the unit did not run (a warning, not an error).
    result, failed = run_module(gpu_preflight.main, args)
    assert not failed
    assert result["boot"] == {"boot_id": BOOT_ID, "init_started": "2025-12-04T16:00:05Z"}
    (finding,) = [f for f in result["findings"] if f["check"] == "boot_check"]
    assert (finding["severity"], finding["subject"], finding["what"]) == ("warning", str(report), "no boot check report for this boot")
    # This boot's clean report: nothing to say.
    report.write_text(json.dumps({"boot_id": BOOT_ID, "checked_at": "2025-12-04T16:00:03Z", "problems": []}))
    result, _failed = run_module(gpu_preflight.main, args)
    assert "boot_check" not in [f["check"] for f in result["findings"]]
    # Another boot's: the check did not run in this one.
    report.write_text(json.dumps({"boot_id": "another", "checked_at": "2025-12-01T09:00:00Z", "problems": []}))
    result, _failed = run_module(gpu_preflight.main, args)
    (finding,) = [f for f in result["findings"] if f["check"] == "boot_check"]
    assert finding["what"] == "the boot check report is from another boot (this boot: %s)" % BOOT_ID
    # A FIFO where the report should be is not opened (it would hang the run): as if there were none.
    report.unlink()
    os.mkfifo(report)
    result, _failed = run_module(gpu_preflight.main, args)
    assert [f["what"] for f in result["findings"] if f["check"] == "boot_check"] == ["no boot check report for this boot"]
    # A container does not read the node's report, but says when its PID 1 started.
    result, _failed = run_module(gpu_preflight.main, node.args(scope="container", boot_id_file=boot_id, boot_check_report=str(report)))
    assert "boot_check" not in [f["check"] for f in result["findings"]]
    assert result["boot"]["init_started"] == "2025-12-04T16:00:05Z"


def test_without_a_boot_id_or_pid_1_the_boot_facts_are_null_not_a_failure(node, tmp_path):
    result, failed = run_module(gpu_preflight.main, node.args(boot_id_file=str(tmp_path / "none")))
    assert not failed and result["boot"] == {"boot_id": None, "init_started": None}
    assert "boot_check" not in [f["check"] for f in result["findings"]]
