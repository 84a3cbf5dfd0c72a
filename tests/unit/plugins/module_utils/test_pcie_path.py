"""pcie_path: the PCIe path of a GPU from a fake sysfs tree (synthetic, shaped like the kernel's: relative links
from bus/pci/devices into devices/pci0000:00/...), lspci -vvv parsing on real excerpts from public issues (sources in
data/gpu_preflight/README.md) and the acs_redirect, pcie_link_width and pcie_link_speed findings."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import pcie_path
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import H200, captured, public

ROOT_PORT, SWITCH_UP, DOWN_A, DOWN_B, GPU_A, GPU_B = ("0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:02:10.0",
                                                      "0000:03:00.0", "0000:04:00.0")


def make_device(sysfs, parts, bdf, link=None):
    """Synthetic: a device directory under devices/ and the kernel's relative link to it from bus/pci/devices."""
    directory = sysfs.joinpath("devices", *parts, bdf)
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in (link or {}).items():
        (directory / name).write_text(value + "\n")
    devices = sysfs / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(directory, devices), devices / bdf)
    return directory


def link(width, max_width, speed="16.0 GT/s PCIe", max_speed="16.0 GT/s PCIe"):
    return {"current_link_width": str(width), "max_link_width": str(max_width), "current_link_speed": speed, "max_link_speed": max_speed}


@pytest.fixture
def sysfs(tmp_path):
    """Two GPUs behind one PCIe switch under root port 00:01.0 (synthetic)."""
    root = tmp_path / "sys"
    make_device(root, ["pci0000:00"], ROOT_PORT, link(16, 16))
    make_device(root, ["pci0000:00", ROOT_PORT], SWITCH_UP, link(16, 16))
    make_device(root, ["pci0000:00", ROOT_PORT, SWITCH_UP], DOWN_A, link(16, 16))
    make_device(root, ["pci0000:00", ROOT_PORT, SWITCH_UP], DOWN_B, link(16, 16))
    make_device(root, ["pci0000:00", ROOT_PORT, SWITCH_UP, DOWN_A], GPU_A, link(16, 16))
    make_device(root, ["pci0000:00", ROOT_PORT, SWITCH_UP, DOWN_B], GPU_B, link(4, 16, "2.5 GT/s PCIe"))
    return root


def test_the_chain_runs_from_the_root_port_down_to_the_gpu(sysfs):
    chain = pcie_path.device_chain(str(sysfs), GPU_A)
    assert chain["root"] == "pci0000:00" and chain["chain"] == [ROOT_PORT, SWITCH_UP, DOWN_A, GPU_A]
    assert pcie_path.read_link(chain["dirs"][-1])["current_width"] == 16


def test_the_path_between_two_gpus_turns_at_the_switch(sysfs):
    a, b = pcie_path.device_chain(str(sysfs), GPU_A), pcie_path.device_chain(str(sysfs), GPU_B)
    between = pcie_path.path_between(a, b)
    assert between == {"common": SWITCH_UP, "bridges": [SWITCH_UP, DOWN_A, DOWN_B], "same_root": True}


def test_gpus_under_different_root_complexes_share_no_bridge(sysfs):
    make_device(sysfs, ["pci0000:80", "0000:80:01.0"], "0000:81:00.0", link(16, 16))
    make_device(sysfs, ["pci0000:80"], "0000:80:01.0", link(16, 16))
    between = pcie_path.path_between(pcie_path.device_chain(str(sysfs), GPU_A), pcie_path.device_chain(str(sysfs), "0000:81:00.0"))
    assert between["common"] is None and not between["same_root"]
    assert between["bridges"] == [ROOT_PORT, SWITCH_UP, DOWN_A, "0000:80:01.0"]


def test_the_real_h200_sysfs_link_attributes_parse(tmp_path):
    # The attribute values the H200 VM printed (sysfs-path.txt): "32.0 GT/s PCIe", "16".
    values = dict(line.split(": ", 1) for line in captured(H200 / "sysfs-path.txt").splitlines() if ": " in line)
    device = tmp_path / "dev"
    device.mkdir()
    for name in pcie_path.LINK_ATTRIBUTES:
        (device / name).write_text(values[name] + "\n")
    parsed = pcie_path.read_link(str(device))
    assert (parsed["current_speed"], parsed["max_speed"], parsed["current_width"], parsed["max_width"]) == (32.0, 32.0, 16, 16)
    assert pcie_path.generation(parsed["current_speed"]) == 5


def test_a_broken_tree_gives_an_empty_chain(tmp_path):
    devices = tmp_path / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    os.symlink("loop", devices / "loop")
    os.symlink("loop", devices / GPU_A)  # a link to a link that points at itself
    os.symlink("/nonexistent/devices/pci0000:00/" + GPU_B, devices / GPU_B)
    (devices / "0000:05:00.0").write_text("not a directory")
    assert pcie_path.device_chain(str(tmp_path), GPU_A)["chain"] == []
    assert pcie_path.device_chain(str(tmp_path), GPU_B)["chain"] == []
    assert pcie_path.device_chain(str(tmp_path), "0000:05:00.0")["chain"] == []
    assert pcie_path.device_chain(str(tmp_path / "missing"), GPU_A)["chain"] == []
    assert pcie_path.read_link(str(tmp_path / "missing"))["current_width"] is None


def test_the_iommu_group_and_its_type(sysfs):
    group = sysfs / "kernel" / "iommu_groups" / "17"
    (group / "devices").mkdir(parents=True)
    (group / "type").write_text("DMA-FQ\n")
    os.symlink(os.path.relpath(group, sysfs / "devices/pci0000:00" / ROOT_PORT / SWITCH_UP / DOWN_A / GPU_A),
               sysfs / "devices/pci0000:00" / ROOT_PORT / SWITCH_UP / DOWN_A / GPU_A / "iommu_group")
    assert pcie_path.read_iommu_group(str(sysfs), GPU_A) == ("17", "DMA-FQ")
    assert pcie_path.read_iommu_group(str(sysfs), GPU_B) == (None, None)


@pytest.mark.parametrize("text, expected", [
    ("00000000:3B:00.0", "0000:3b:00.0"), ("0000:3b:00.0", "0000:3b:00.0"), ("3b:00.0", "0000:3b:00.0"),
    ("GPU-1234", None), ("", None), (None, None)])
def test_normalise_bdf(text, expected):
    assert pcie_path.normalise_bdf(text) == expected


@pytest.mark.parametrize("line_number", range(1, 13))
def test_each_real_acsctl_line_of_nccl_issue_523(line_number):
    line = public("lspci-acsctl-nccl-523.txt").splitlines()[line_number]
    flags = pcie_path.parse_flags(line.split("ACSCtl:", 1)[1])
    assert set(flags) == {"SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"}
    assert pcie_path.acs_redirects({"acsctl": flags}) == ("ReqRedir+" in line)


def test_real_acsctl_lines_with_tabs_from_nccl_issue_629():
    lines = public("lspci-acsctl-nccl-629.txt").splitlines()
    verdicts = [pcie_path.acs_redirects(pcie_path.parse_lspci(line)[None]) for line in lines]
    assert verdicts == [False, False, True, False]


def test_a_device_block_with_header_lnkcap_lnksta_and_acs():
    # Synthetic, in lspci -vvv's layout (tabs, "Capabilities:" lines), for the header-to-device mapping.
    text = ("00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])\n"
            "\tCapabilities: [58] Express (v2) Root Port (Slot+), MSI 00\n"
            "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <64us\n"
            "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x8 (downgraded)\n"
            "\tCapabilities: [2a0 v1] Access Control Services\n"
            "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
            "\n41:00.0 VGA compatible controller: NVIDIA Corporation Device 26b2 (rev a1)\n"
            "\tCapabilities: <access denied>\n")
    devices = pcie_path.parse_lspci(text)
    bridge = devices["0000:00:01.1"]
    assert bridge["lnkcap"] == {"speed": 16.0, "width": 16, "speed_downgraded": False, "width_downgraded": False}
    assert bridge["lnksta"] == {"speed": 2.5, "width": 8, "speed_downgraded": True, "width_downgraded": True}
    assert pcie_path.acs_redirects(bridge) is True and bridge["acscap"]["DirectTrans"] is True
    assert devices["0000:41:00.0"]["access_denied"] and pcie_path.acs_redirects(devices["0000:41:00.0"]) is None
    finding = pcie_path.lspci_width_finding("bridge 0000:00:01.1", bridge)
    assert finding.severity == "warning" and "x8" in finding.what and "x16" in finding.what


def test_real_lnksta_downgraded_and_a_real_full_width_link():
    downgraded = pcie_path.parse_lspci(public("lspci-lnksta-downgraded-geerlingguy-480.txt"))[None]
    assert downgraded["lnksta"] == {"speed": 5.0, "width": 1, "speed_downgraded": True, "width_downgraded": True}
    finding = pcie_path.lspci_width_finding("GPU0 0000:01:00.0", downgraded)
    assert finding.check == "pcie_link_width" and "x1" in finding.what
    full = pcie_path.parse_lspci(public("lspci-lnkcap-lnksta-lact-593.txt"))[None]
    assert full["lnkcap"]["width"] == full["lnksta"]["width"] == 16
    assert pcie_path.lspci_width_finding("GPU0", full) is None


@pytest.mark.parametrize("current, capable, severity", [(16, 16, None), (8, 16, "warning"), (12, 16, "warning"),
                                                        (4, 16, "error"), (1, 16, "error"), (2, 8, "error"), (4, 8, "warning"),
                                                        (None, 16, None)])
def test_width_below_half_is_an_error_and_half_a_warning(current, capable, severity):
    finding = pcie_path.width_finding("GPU0", current, capable, [], "sysfs")
    assert (finding.severity if finding else None) == severity


def test_a_lower_link_speed_is_only_info():
    assert pcie_path.speed_finding("GPU0", 2.5, 32.0, [], "sysfs").severity == "info"
    assert pcie_path.speed_finding("GPU0", 32.0, 32.0, [], "sysfs") is None


def test_acs_redirect_is_an_error_only_with_a_translating_iommu():
    gpus = [{"index": 0, "bus_id": GPU_A}, {"index": 1, "bus_id": GPU_B}]
    redirecting = [(DOWN_A, "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-")]
    warning = pcie_path.acs_finding("tp2", gpus, redirecting, iommu_translating=False)
    error = pcie_path.acs_finding("tp2", gpus, redirecting, iommu_translating=True)
    assert (warning.check, warning.severity, error.severity) == ("acs_redirect", "warning", "error")
    assert DOWN_A in warning.what and "setpci -s <bridge> ECAP_ACS+0x6.w=0000" in warning.fix
    assert "NCCL_P2P_DISABLE=1" in warning.fix and "(ACS)" in warning.consequence
    assert warning.evidence[0].startswith(DOWN_A + " ACSCtl:")
