"""gpu_topology: nvidia-smi topo -m parsing on real matrices (an H200 VM's with its ANSI escapes, multi-GPU boxes from
public issues, see data/gpu_preflight/README.md) and the p2p_path finding per server."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import gpu_topology
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import H200, captured, public


def gpus(*indexes):
    return [{"index": index, "bus_id": "0000:%02x:00.0" % (index + 1)} for index in indexes]


def test_the_h200_matrix_with_its_escapes_and_padding():
    matrix = gpu_topology.parse_topo_matrix(captured(H200 / "topo-m.txt"))
    assert matrix["columns"] == ["GPU0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert matrix["gpus"] == {"GPU0": {"links": {"GPU0": "X"}, "cpu_affinity": "0-15", "numa_affinity": "0", "gpu_numa_id": "N/A"}}
    assert matrix["legend"]["PHB"] == "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"
    assert gpu_topology.group_findings("one", gpus(0), matrix) == []


def test_pxb_pix_and_sys_from_nccl_issue_667():
    matrix = gpu_topology.parse_topo_matrix(public("topo-m-nccl-667-pxb-pix-sys.txt"))
    assert gpu_topology.link(matrix, 0, 1) == "PXB" and gpu_topology.link(matrix, 2, 3) == "PIX"
    assert gpu_topology.worst_link(matrix, [0, 1, 2, 3])[0] == "SYS"
    assert matrix["gpus"]["GPU2"]["cpu_affinity"] == "28-55,84-111" and matrix["gpus"]["GPU2"]["gpu_numa_id"] is None
    [pxb] = gpu_topology.group_findings("pair", gpus(0, 1), matrix, (4, 16))
    assert (pxb.check, pxb.severity, pxb.subject) == ("p2p_path", "info", "server pair")
    assert "PXB" in pxb.what and "about 32 GB/s per direction (PCIe gen 4 x16" in pxb.consequence
    [sys_link] = gpu_topology.group_findings("wide", gpus(1, 2), matrix, (3, 16))
    assert sys_link.severity == "warning" and "SYS" in sys_link.what
    assert "GPU1 0000:02:00.0 and GPU2 0000:03:00.0" in sys_link.consequence and "16 GB/s" in sys_link.consequence
    assert sys_link.evidence == ["\tGPU1\tGPU2", "GPU1\tX\tSYS", "GPU2\tSYS\tX"]


def test_nvlink_with_nics_and_gpu_numa_id_from_a_dgx_a100_nccl_issue_1505():
    matrix = gpu_topology.parse_topo_matrix(public("topo-m-nccl-1505-dgx-a100-nv12.txt"))
    assert len(matrix["columns"]) == 23 and matrix["columns"][-3:] == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert matrix["gpus"]["GPU3"]["links"]["NIC2"] == "PXB" and matrix["gpus"]["GPU3"]["numa_affinity"] == "1"
    [finding] = gpu_topology.group_findings("tp4", gpus(0, 1, 2, 3), matrix)
    assert finding.severity == "info" and "NV12" in finding.what and "NVLink" in finding.consequence


def test_a_pasted_matrix_cut_short_still_parses_and_a_missing_row_is_reported():
    # The public copy ends after GPU6 (the issue's paste); GPU7's link is still known from GPU6's row.
    matrix = gpu_topology.parse_topo_matrix(public("topo-m-nccl-933-nv8-nic.txt"))
    assert "GPU7" not in matrix["gpus"] and gpu_topology.link(matrix, 6, 7) == "NV8"
    assert matrix["gpus"]["GPU4"]["links"]["NIC1"] == "PIX"
    [finding] = gpu_topology.group_findings("tp", gpus(0, 9), matrix)
    assert finding.severity == "warning" and "does not show the link" in finding.what


def test_node_and_sys_from_a_topo_mp_in_deepep_issue_60():
    matrix = gpu_topology.parse_topo_matrix(public("topo-mp-deepep-60-node-sys.txt"))
    [node] = gpu_topology.group_findings("tp2", gpus(0, 3), matrix, (5, 16))
    assert node.severity == "warning" and "NODE" in node.what and "63 GB/s" in node.consequence
    assert "NCCL_P2P_DISABLE=1" in node.fix


@pytest.mark.parametrize("code, rank", [("NV18", 0), ("PIX", 1), ("PXB", 2), ("PHB", 3), ("NODE", 4), ("SYS", 5), ("??", 6), (None, 6)])
def test_link_rank_orders_the_bandwidth_classes(code, rank):
    assert gpu_topology.link_rank(code) == rank


def test_synthetic_phb_pair_is_a_warning_and_a_pix_pair_is_not():
    synthetic = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\tPIX\t0-7\t0\nGPU1\tPHB\t X \tPHB\t0-7\t0\nGPU2\tPIX\tPHB\t X \t0-7\t0\n"
    matrix = gpu_topology.parse_topo_matrix(synthetic)
    [phb] = gpu_topology.group_findings("a", gpus(0, 1), matrix)
    [pix] = gpu_topology.group_findings("b", gpus(0, 2), matrix)
    assert phb.severity == "warning" and "host bridge" in phb.what
    assert pix.severity == "info" and "PIX" in pix.what


def test_hostile_text_is_refused_or_bounded():
    with pytest.raises(gpu_topology.TopologyError):
        gpu_topology.parse_topo_matrix("Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(gpu_topology.TopologyError):
        gpu_topology.parse_topo_matrix("")
    # Control characters in a cell stay in the data but are made visible in the evidence.
    hostile = "\tGPU0\tGPU1\nGPU0\t X \tP\x07HB\x1b]0;x\nGPU1\tPHB\t X \n" + "GPU9\tX\n" * 100000
    matrix = gpu_topology.parse_topo_matrix(hostile)
    [finding] = gpu_topology.group_findings("h", gpus(0, 1), matrix)
    assert all("\x07" not in line and "\x1b" not in line for line in finding.evidence)
    assert "\\x07" in finding.evidence[1]


def test_pcie_bandwidth_per_generation():
    assert gpu_topology.pcie_bandwidth(4, 16) == pytest.approx(31.5, abs=0.1)
    assert gpu_topology.pcie_bandwidth(5, 16) == pytest.approx(63.0, abs=0.1)
    assert gpu_topology.pcie_bandwidth(None, 16) is None and gpu_topology.pcie_bandwidth(9, 16) is None
