# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/nvidia_gpus: a GPU's identities (index, minor, UUID) and the assignment of a node's GPUs to containers."""
from __future__ import annotations

import os
import stat

import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus as ng

# /proc/driver/nvidia/gpus/0000:62:00.0/information of an H100, from https://landontclipp.github.io/sysadmin/gpu
# (the page renders the driver's tabs as spaces). Its Device Minor is 5: the minor is not the nvidia-smi index.
H100_INFORMATION = """Model:           NVIDIA H100 80GB HBM3
IRQ:             10
GPU UUID:        GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b
Video BIOS:      96.00.99.00.01
Bus Type:        PCIe
DMA Size:        52 bits
DMA Mask:        0xfffffffffffff
Bus Location:    0000:62:00.0
Device Minor:    5
GPU Firmware:    535.129.03
GPU Excluded:    No
"""
# The same file with the driver's own separators (tabs), as the GPU kit writes it.
TABBED_INFORMATION = ("Model: \t\t NVIDIA RTX A6000\nIRQ:   \t\t 180\nGPU UUID: \t GPU-5e1d0000-5e1d-4c0a-9b7e-000000000000\n"
                      "Video BIOS: \t 94.02.5c.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"
                      "Bus Location: \t 0000:11:00.0\nDevice Minor: \t 1\nGPU Firmware: \t 580.95.05\nGPU Excluded:\t No\n")
# Made up for the test, in the shape of an old driver's file: no GPU UUID or Device Minor line.
OLD_INFORMATION = "Model: \t\t Some GPU\nIRQ:   \t\t 16\nCard Type: \t PCI-E\nBus Location: \t 01.00.0\n"

FOUR = [{"index": index, "uuid": "GPU-%08x-5e1d-4c0a-9b7e-%012x" % (index, index), "minor": index ^ 1,
         "bus_id": "0000:%02x:00.0" % (0x11 + index * 7), "memory_total_mib": 49140, "name": "NVIDIA RTX A6000"}
        for index in range(4)]


def test_information_files_give_the_three_identities():
    assert ng.parse_information(H100_INFORMATION) == {"bus_id": "0000:62:00.0", "uuid": "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b",
                                                      "name": "NVIDIA H100 80GB HBM3", "minor": 5}
    assert ng.parse_information(TABBED_INFORMATION)["minor"] == 1


def test_an_old_drivers_information_file_is_refused_by_what_it_lacks():
    with pytest.raises(ng.GpuError, match="'GPU UUID:' or 'Device Minor:'"):
        ng.parse_information(OLD_INFORMATION)


def test_the_driver_list_is_indexed_in_pci_order_whatever_the_minors():
    gpus = ng.index_driver_gpus([{"bus_id": "0000:62:00.0", "uuid": "GPU-b", "minor": 0},
                                 {"bus_id": "0000:1a:00.0", "uuid": "GPU-a", "minor": 3}])
    assert [(gpu["index"], gpu["uuid"], gpu["minor"]) for gpu in gpus] == [(0, "GPU-a", 3), (1, "GPU-b", 0)]


def test_nvidia_smi_rows_parse_with_a_comma_in_the_name_and_na_fields():
    text = ("0, GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b, 00000000:62:00.0, 81559, NVIDIA H100 80GB HBM3\n"
            "1, GPU-00000001-5e1d-4c0a-9b7e-000000000001, 00000000:18:00.0, [N/A], A GPU, with a comma\n")
    gpus = ng.parse_gpu_query(text)
    assert gpus[0] == {"index": 0, "uuid": "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b", "bus_id": "0000:62:00.0", "minor": None,
                       "memory_total_mib": 81559, "name": "NVIDIA H100 80GB HBM3"}
    assert (gpus[1]["memory_total_mib"], gpus[1]["name"]) == (None, "A GPU, with a comma")
    # The minor comes from the kernel module's list, by UUID (nvidia-smi has no field for it).
    driver = [{"uuid": "GPU-9221D5D1-B60B-A624-BF14-0A1819CFDA3B", "minor": 5}]
    assert [gpu["minor"] for gpu in ng.with_minors(gpus, driver)] == [5, None]


def test_the_query_asks_only_for_fields_the_real_nvidia_smi_knows():
    # The real 580.159.04 list (--help-query-gpu, captured on an H200); it has no minor_number.
    help_text = (pathlib.Path(__file__).parent / "data" / "gpu_preflight" / "h200-vm-580.159.04" / "help-query-gpu.txt").read_text()
    for field in ng.GPU_QUERY_FIELDS:
        assert '"%s"' % field in help_text
    assert '"minor_number"' not in help_text


@pytest.mark.parametrize("text", ["No devices were found", "0, not-a-uuid, 00000000:62:00.0, 81559, X", "0, GPU-1"])
def test_what_is_not_a_query_row_is_refused(text):
    with pytest.raises(ng.GpuError):
        ng.parse_gpu_query(text)


def test_an_assignment_names_gpus_by_index_or_uuid_and_returns_them_in_index_order():
    chosen = ng.resolve(FOUR, [3, FOUR[1]["uuid"].upper()], where="pve1")
    assert [gpu["index"] for gpu in chosen] == [1, 3]
    assert [gpu["minor"] for gpu in chosen] == [0, 2]
    assert ng.resolve(FOUR, "all") == FOUR and ng.resolve(FOUR, None) == FOUR


@pytest.mark.parametrize("request_, message", [
    ([4], "pve1 has no GPU 4 (it has 0=GPU-00000000"),
    (["GPU-deadbeef"], "pve1 has no GPU GPU-deadbeef"),
    ([0, "0"], "GPU 0 is listed twice"),
    ([], "must be 'all' or a non-empty list"),
    (["first"], "neither a GPU index nor a GPU UUID"),
])
def test_an_assignment_the_node_cannot_meet_is_refused_naming_what_it_has(request_, message):
    with pytest.raises(ng.GpuError, match=message.replace("(", r"\(")):
        ng.resolve(FOUR, request_, where="pve1")


def test_the_plan_gives_each_container_its_gpus():
    plan = ng.plan({"llm-a": {"node": "pve1", "gpus": [0, 1]}, "llm-b": {"node": "pve1", "gpus": [2, 3]},
                    "llm-c": {"node": "pve2", "gpus": None}, "elsewhere": {"node": None}},
                   {"pve1": FOUR, "pve2": FOUR[:2]})
    assert plan["errors"] == []
    assert {host: [gpu["index"] for gpu in gpus] for host, gpus in plan["assignments"].items()} == {
        "llm-a": [0, 1], "llm-b": [2, 3], "llm-c": [0, 1]}
    assert plan["co_tenants"] == {"llm-a": [], "llm-b": [], "llm-c": []}


def test_a_gpu_given_to_two_containers_is_refused_naming_both_and_the_gpu():
    plan = ng.plan({"llm-a": {"node": "pve1", "gpus": "all"}, "llm-b": {"node": "pve1", "gpus": [FOUR[2]["uuid"]]}},
                   {"pve1": FOUR})
    assert plan["errors"] == [
        "GPU 2 (%s) of pve1 is assigned to llm-a and llm-b: a GPU serves one server unless every container that gets it "
        "sets pve_container_gpus_shared (not set on llm-a, llm-b); give each container its own GPUs with "
        "pve_container_gpus" % FOUR[2]["uuid"]]


def test_sharing_needs_every_container_on_the_gpu_to_allow_it_and_names_the_co_tenants():
    servers = {"llm-a": {"node": "pve1", "gpus": [0, 1], "shared": True}, "llm-b": {"node": "pve1", "gpus": [1], "shared": False}}
    assert "(not set on llm-b)" in ng.plan(servers, {"pve1": FOUR})["errors"][0]
    servers["llm-b"]["shared"] = True
    plan = ng.plan(servers, {"pve1": FOUR})
    assert plan["errors"] == [] and plan["co_tenants"] == {"llm-a": ["llm-b"], "llm-b": ["llm-a"]}


def test_the_same_index_on_two_nodes_is_two_gpus():
    plan = ng.plan({"llm-a": {"node": "pve1", "gpus": [0]}, "llm-c": {"node": "pve2", "gpus": [0]}}, {"pve1": FOUR, "pve2": FOUR})
    assert plan["errors"] == []


def test_a_node_without_gpus_or_with_unknown_gpus_is_an_error_for_its_containers():
    plan = ng.plan({"llm-a": {"node": "pve1"}, "llm-c": {"node": "pve2"}, "llm-d": {"node": "pve3"}},
                   {"pve1": [], "pve2": None})
    assert plan["assignments"] == {}
    assert plan["errors"] == [
        "llm-a: its node pve1 has no GPU (nvidia-smi lists none there), and a server container needs at least one",
        "llm-c: the GPUs of its node pve2 are unknown (nvidia-smi did not list them there)",
        "llm-d: the GPUs of its node pve3 are unknown (nvidia-smi did not list them there)"]


def test_held_minors_are_the_gpus_behind_them():
    assert [gpu["index"] for gpu in ng.held([2, 0, 0, 200], FOUR)] == [1, 3]


def write_information(proc, bus, text):
    directory = proc / "gpus" / bus
    directory.mkdir(parents=True)
    (directory / "information").write_text(text)


def test_the_drivers_list_is_read_from_its_proc_directory(tmp_path):
    write_information(tmp_path, "0000:62:00.0", H100_INFORMATION)
    write_information(tmp_path, "0000:11:00.0", TABBED_INFORMATION)
    gpus = ng.read_driver_gpus(str(tmp_path))
    assert [(gpu["index"], gpu["bus_id"], gpu["minor"]) for gpu in gpus] == [(0, "0000:11:00.0", 1), (1, "0000:62:00.0", 5)]
    assert ng.read_driver_gpus(str(tmp_path / "absent")) == []


def test_what_is_not_the_drivers_list_is_refused(tmp_path):
    (tmp_path / "gpus" / "0000:11:00.0").mkdir(parents=True)
    os.mkfifo(str(tmp_path / "gpus" / "0000:11:00.0" / "information"))
    with pytest.raises(ng.GpuError, match="not a regular file"):
        ng.read_driver_gpus(str(tmp_path))
    os.unlink(str(tmp_path / "gpus" / "0000:11:00.0" / "information"))
    os.symlink("/etc/passwd", str(tmp_path / "gpus" / "0000:11:00.0" / "information"))
    with pytest.raises(ng.GpuError, match="cannot read"):
        ng.read_driver_gpus(str(tmp_path))
    os.unlink(str(tmp_path / "gpus" / "0000:11:00.0" / "information"))
    (tmp_path / "gpus" / "0000:11:00.0" / "information").write_text(TABBED_INFORMATION + "x" * 9000)
    with pytest.raises(ng.GpuError, match="larger than"):
        ng.read_driver_gpus(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_node_is_present_only_as_nvidias_node_with_that_minor(tmp_path):
    os.mknod(str(tmp_path / "nvidia1"), stat.S_IFCHR | 0o666, os.makedev(195, 1))
    os.mknod(str(tmp_path / "nvidia2"), stat.S_IFCHR | 0o666, os.makedev(195, 7))
    (tmp_path / "nvidia3").write_text("")
    assert ng.device_node_state(str(tmp_path / "nvidia1"), 1) == "present"
    assert ng.device_node_state(str(tmp_path / "nvidia2"), 2) == "other"
    assert ng.device_node_state(str(tmp_path / "nvidia3"), 3) == "other"
    assert ng.device_node_state(str(tmp_path / "nvidia4"), 4) == "missing"
