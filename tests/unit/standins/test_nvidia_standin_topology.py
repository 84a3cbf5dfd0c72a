# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver stand-in's preflight fields: topo -m from topology.json, the health fields from hardware.json, each only a
field the real nvidia-smi knows, refusals as the real one, and the compute apps the ledger holds."""
from __future__ import annotations

import pathlib
import re

import pytest

from ansible_collections.llmops.serving.tests.unit.standins.test_nvidia_standin import GPUS, Kit, ns

DATA = pathlib.Path(__file__).resolve().parents[1] / "plugins" / "module_utils" / "data" / "gpu_preflight" / "h200-vm-580.159.04"


def real_fields():
    """Every field name the real --help-query-gpu lists (580.159.04), aliases included."""
    names = set()
    for line in (DATA / "help-query-gpu.txt").read_text().splitlines():
        if line.startswith('"'):
            names.update(re.findall(r'"([^"]+)"', line))
    return names


# Every field answered is in the real help (minor_number, once answered here, is refused by the real 580.159.04 with
# 'Field "minor_number" is not a valid field to query.' and exit 2, and so it is now).
NOT_IN_THE_REAL_HELP = set()


def test_every_field_the_standin_answers_is_a_real_field():
    assert set(ns._GPU_FIELDS) - real_fields() == NOT_IN_THE_REAL_HELP  # pylint: disable=protected-access
    assert "no.such.field" not in real_fields()


def test_health_fields_default_healthy_and_follow_hardware_json(tmp_path):
    kit = Kit(tmp_path)
    fields = "index,persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,ecc.mode.current,remapped_rows.failure"
    code, out = kit.smi("--query-gpu=" + fields, "--format=csv")
    assert code == 0
    assert out.splitlines()[0] == ", ".join(fields.split(","))
    assert out.splitlines()[1] == "0, Enabled, 4, 4, 16, Enabled, No"
    gpus = [dict(gpu, health={"persistence_mode": "Disabled", "pcie_width_current": 8}) if index == 1 else gpu
            for index, gpu in enumerate(GPUS)]
    ns.write_driver_state(str(kit.proc), str(kit.ledger), gpus, "580.95.05")
    code, out = kit.smi("--query-gpu=" + fields, "--format=csv,noheader,nounits")
    assert out.splitlines()[1] == "1, Disabled, 4, 4, 8, Enabled, No"
    with pytest.raises(ValueError):
        ns.write_driver_state(str(kit.proc), str(kit.ledger), [dict(GPUS[0], health={"bogus": 1})], "580.95.05")


def test_unknown_field_refused_with_the_real_message(tmp_path):
    code, out = Kit(tmp_path).smi("--query-gpu=index,pcie.link.gen.current,no.such.field", "--format=csv")
    assert (code, out) == (2, 'Field "no.such.field" is not a valid field to query.\n\n')


def test_topo_without_topology_json_and_with_one(tmp_path):
    kit = Kit(tmp_path)
    code, out = kit.smi("topo", "-m")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    assert lines[1] == "GPU0\t X \tPHB\tPHB\tPHB\t0-15\t0\t\tN/A"
    links = dict((gpu["uuid"], dict((other["uuid"], "NV12") for other in GPUS if other is not gpu)) for gpu in GPUS)
    ns.write_driver_state(str(kit.proc), str(kit.ledger), GPUS, "580.95.05", topology={"links": links})
    assert kit.smi("topo", "-m")[1].splitlines()[2] == "GPU1\tNV12\t X \tNV12\tNV12\t0-15\t0\t\tN/A"


def test_topo_shows_only_the_gpus_this_process_may_open(tmp_path):
    kit = Kit(tmp_path, minors=[GPUS[2]["minor"], GPUS[3]["minor"]])
    lines = kit.smi("topo", "-m")[1].splitlines()
    assert lines[0].startswith("\t\x1b[4mGPU0\tGPU1\tCPU Affinity") and lines[3] == ""


def test_topo_fails_as_nvml_fails(tmp_path):
    assert Kit(tmp_path, ctl=False).smi("topo", "-m") == (ns.EXIT_DRIVER_NOT_LOADED, ns.DRIVER_NOT_LOADED + "\n")


def test_compute_apps_are_the_ledger_s_live_holders(tmp_path):
    kit = Kit(tmp_path)
    header = (DATA / "query-apps.txt").read_text().splitlines()[1]
    query = "--query-compute-apps=pid,gpu_uuid,used_memory,process_name"
    assert kit.smi(query, "--format=csv") == (0, header + "\n")
    driver = kit.driver()
    gpu = driver.visible_gpus()[1]
    allocation = driver.allocate(gpu, 1024, "sglang::scheduler", pid=4242)
    try:
        assert kit.smi(query, "--format=csv,noheader,nounits")[1] == "4242, %s, 1024, sglang::scheduler\n" % gpu.uuid
    finally:
        allocation.release()
    assert kit.smi(query, "--format=csv,noheader") == (0, "")


def test_minor_number_is_refused_as_the_real_nvidia_smi_refuses_it(tmp_path):
    # Run on the lent H200 (driver 580.159.04), 2026-12-04: the same message and exit status.
    code, out = Kit(tmp_path).smi("--query-gpu=index,uuid,pci.bus_id,minor_number,memory.total,name", "--format=csv,noheader,nounits")
    assert (code, out) == (2, 'Field "minor_number" is not a valid field to query.\n\n')
