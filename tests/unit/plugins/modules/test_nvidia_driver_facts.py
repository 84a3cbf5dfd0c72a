# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver_facts module: run in-process against a stand-in proc file, nvidia-smi and library directory."""

from __future__ import annotations

import os
import stat

from ansible_collections.llmops.serving.plugins.modules import nvidia_driver_facts
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

# Format of https://github.com/nix-community/nixGL/issues/186 with the version under test.
PROC_LINE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (dvs-builder@U16-A24-9-2)"
             "  Thu Oct 10 12:15:00 UTC 2024\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")

# A stand-in nvidia-smi that behaves like NVML: it answers only when the kernel module has its own version.
NVIDIA_SMI = """#!/bin/sh
kernel=$(sed -n 's/^NVRM version:.*Kernel Module[a-z0-9_ ]*  \\([0-9.]*\\)  .*/\\1/p' "{proc}")
if [ "$kernel" != "{version}" ]; then
  echo "Failed to initialize NVML: Driver/library version mismatch"
  echo "NVML library version: {short}"
  exit 18
fi
case "$1" in
  --query-gpu=driver_version) i=0; while [ $i -lt {count} ]; do echo "{version}"; i=$((i+1)); done ;;
  --query-gpu=index,uuid,pci.bus_id,memory.total,name)
    [ {count} -eq 0 ] && {{ echo "No devices were found"; exit 6; }}
    i=0; while [ $i -lt {count} ]; do
      echo "$i, GPU-0000000$i-5e1d-4c0a-9b7e-00000000000$i, 00000000:1$i:00.0, 49140, NVIDIA RTX A6000"; i=$((i+1))
    done ;;
  *minor_number*) printf 'Field "minor_number" is not a valid field to query.\n\n'; exit 2 ;;
  *) exit 2 ;;
esac
"""

NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {release}, V{release}.88"
"""


def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def setup(tmp_path, kernel="580.95.05", userspace="580.95.05", gpus=2, libraries=("580.95.05",)):
    proc = tmp_path / "version"
    if kernel:
        proc.write_text(PROC_LINE.format(version=kernel))
    smi = tmp_path / "nvidia-smi"
    if userspace:
        executable(smi, NVIDIA_SMI.format(proc=proc, version=userspace, short=".".join(userspace.split(".")[:2]), count=gpus))
    libdir = tmp_path / "lib"
    libdir.mkdir()
    for version in libraries:
        (libdir / ("libnvidia-ml.so." + version)).write_text("")
    (libdir / "libnvidia-ml.so.1").write_text("")
    return {"proc_version_path": str(proc), "nvidia_smi": str(smi), "library_dirs": [str(libdir)]}


def test_match_reports_both_versions_and_the_gpus(tmp_path):
    result, failed = run_module(nvidia_driver_facts.main, setup(tmp_path), check_mode=True)
    assert not failed and result["changed"] is False
    assert result["kernel_module_version"] == "580.95.05"
    assert result["kernel_module_flavor"] == "open"
    assert result["userspace_version"] == "580.95.05"
    assert result["userspace_version_source"] == "nvidia-smi"
    assert result["gpu_count"] == 2
    assert result["gpus"][1] == {"index": 1, "uuid": "GPU-00000001-5e1d-4c0a-9b7e-000000000001", "bus_id": "0000:11:00.0",
                                 "minor": None, "memory_total_mib": 49140, "name": "NVIDIA RTX A6000"}
    assert result["match"] is True
    assert result["nvidia_smi"]["rc"] == 0 and result["nvidia_smi"]["error"] is None
    assert result["driver_gpus"] == []


def test_nvml_that_works_with_no_gpu_this_process_can_open_lists_none_without_an_error(tmp_path):
    result, failed = run_module(nvidia_driver_facts.main, setup(tmp_path, gpus=0), check_mode=True)
    assert not failed and result["gpu_count"] == 0 and result["gpus"] == []
    assert result["nvidia_smi"]["error"] is None and result["match"] is True


def test_the_kernel_modules_own_gpu_list_comes_from_beside_its_version_file(tmp_path):
    args = setup(tmp_path)
    # /proc/driver/nvidia/gpus/<bus>/information of an H100, from https://landontclipp.github.io/sysadmin/gpu (the page
    # renders the driver's tabs as spaces): Device Minor 5.
    information = tmp_path / "gpus" / "0000:62:00.0" / "information"
    information.parent.mkdir(parents=True)
    information.write_text("Model:           NVIDIA H100 80GB HBM3\nIRQ:             10\n"
                           "GPU UUID:        GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b\nVideo BIOS:      96.00.99.00.01\n"
                           "Bus Type:        PCIe\nDMA Size:        52 bits\nDMA Mask:        0xfffffffffffff\n"
                           "Bus Location:    0000:62:00.0\nDevice Minor:    5\nGPU Firmware:    535.129.03\nGPU Excluded:    No\n")
    result, failed = run_module(nvidia_driver_facts.main, args, check_mode=True)
    assert not failed
    state = "present" if os.path.exists("/dev/nvidia5") else "missing"
    assert result["driver_gpus"] == [{"index": 0, "uuid": "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b", "bus_id": "0000:62:00.0",
                                      "minor": 5, "name": "NVIDIA H100 80GB HBM3", "device_node": state}]
    information.write_text("Model: \t\t something else\n")
    result, failed = run_module(nvidia_driver_facts.main, args, check_mode=True)
    assert failed and "has no 'Bus Location:' or 'GPU UUID:' or 'Device Minor:' line" in result["msg"]


def test_mismatch_falls_back_to_the_library_version_and_names_both(tmp_path):
    args = setup(tmp_path, kernel="580.95.05", userspace="580.82.07", libraries=("580.82.07",))
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed
    assert result["match"] is False
    assert result["userspace_version"] == "580.82.07"
    assert result["userspace_version_source"] == "libnvidia-ml"
    assert result["nvidia_smi"]["error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert result["nvidia_smi"]["nvml_library_version"] == "580.82"
    assert result["gpu_count"] is None
    assert result["message"].startswith("host kernel module 580.95.05, container userspace 580.82.07: ")


def test_nothing_installed(tmp_path):
    args = setup(tmp_path, userspace=None, libraries=())
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed
    assert result["userspace_version"] is None and result["nvidia_smi"]["path"] is None
    assert result["match"] is False
    assert result["message"] == "host kernel module 580.95.05, container userspace: not installed"


def test_no_kernel_module_is_not_a_failure(tmp_path):
    args = setup(tmp_path, kernel=None)
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed
    assert result["kernel_module_version"] is None and result["match"] is False
    assert "no NVIDIA kernel module" in result["message"]


def test_stale_library_of_another_version_is_a_mismatch(tmp_path):
    args = setup(tmp_path, libraries=("580.82.07", "580.95.05"))
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed
    assert result["nvml_library_versions"] == ["580.82.07", "580.95.05"]
    assert result["match"] is False and "580.82.07" in result["message"]


def test_unknown_proc_format_fails_and_quotes_it(tmp_path):
    args = setup(tmp_path)
    with open(args["proc_version_path"], "w", encoding="utf-8") as handle:
        handle.write("something else\n")
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert failed and "something else" in result["msg"]


def test_nvcc_release(tmp_path):
    args = setup(tmp_path)
    args["nvcc"] = executable(tmp_path / "nvcc", NVCC.format(release="13.0"))
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed
    assert result["nvcc"] == {"path": args["nvcc"], "release": "13.0", "version": "13.0.88", "major": 13}


def test_nvcc_absent_is_null(tmp_path):
    args = setup(tmp_path)
    args["nvcc"] = os.path.join(str(tmp_path), "no-such-nvcc")
    result, failed = run_module(nvidia_driver_facts.main, args)
    assert not failed and result["nvcc"] is None


# =========================================================================== issue #13: real mismatch outputs
#
# A stand-in nvidia-smi that prints, verbatim, what the real one printed in the thread named (and fails as it does),
# over the thread's /proc/driver/nvidia/version where it has one, with NO versioned libnvidia-ml in library_dirs.
# On the code before issue #13 all of these read "container userspace: not installed".

# https://github.com/zzzhouuu/truenas-nvidia-drivers/issues/19
TRUENAS_SMI = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178\n"
TRUENAS_PROC = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
                "GCC version:  gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)\n")
# https://github.com/k4yt3x/video2x/issues/1226 (userspace 565.57 in the container; the host module is a 535, whose
# exact version the thread does not give: the proc file is the nixGL#186 format above with 535.183.01, CONSTRUCTED).
VIDEO2X_SMI = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 565.57\n"
# https://github.com/illinois-scicomp/machine-shop-maintenance/issues/70 (the one-line form)
MACHINE_SHOP_SMI = "Failed to initialize NVML: Driver/library version mismatch\n"
MACHINE_SHOP_PROC = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct  6 21:38:55 UTC 2022\n"
                     "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")

REPLAYING_NVIDIA_SMI = """#!/bin/sh
cat '{output}'
exit 18
"""


def replay(tmp_path, smi_output, proc_text, libraries=()):
    (tmp_path / "smi.out").write_text(smi_output)
    (tmp_path / "version").write_text(proc_text)
    smi = executable(tmp_path / "nvidia-smi", REPLAYING_NVIDIA_SMI.format(output=tmp_path / "smi.out"))
    libdir = tmp_path / "lib"
    libdir.mkdir()
    for version in libraries:
        (libdir / ("libnvidia-ml.so." + version)).write_text("")
    return {"proc_version_path": str(tmp_path / "version"), "nvidia_smi": smi, "library_dirs": [str(libdir)]}


def test_two_line_mismatch_names_both_versions(tmp_path):
    result, failed = run_module(nvidia_driver_facts.main, replay(tmp_path, TRUENAS_SMI, TRUENAS_PROC))
    assert not failed
    assert result["match"] is False
    assert result["nvidia_smi"]["mismatch"] is True
    assert result["nvidia_smi"]["nvml_library_version"] == "580.178"
    assert result["userspace_version"] is None
    assert result["message"].startswith(
        "host kernel module 580.173.02, container userspace NVML library 580.178: nvidia-smi fails with "
        "'Failed to initialize NVML: Driver/library version mismatch'")
    assert "not installed" not in result["message"]


def test_container_userspace_newer_than_the_host(tmp_path):
    result, failed = run_module(nvidia_driver_facts.main,
                                replay(tmp_path, VIDEO2X_SMI, PROC_LINE.format(version="535.183.01")))
    assert not failed and result["match"] is False
    assert result["message"].startswith("host kernel module 535.183.01, container userspace NVML library 565.57: ")


def test_one_line_mismatch_says_mismatch_not_missing(tmp_path):
    result, failed = run_module(nvidia_driver_facts.main, replay(tmp_path, MACHINE_SHOP_SMI, MACHINE_SHOP_PROC))
    assert not failed and result["match"] is False
    assert result["nvidia_smi"] == {"path": result["nvidia_smi"]["path"], "rc": 18,
                                    "error": "Failed to initialize NVML: Driver/library version mismatch",
                                    "mismatch": True, "nvml_library_version": None}
    assert result["message"].startswith(
        "host kernel module 520.56.06, container userspace: another version (nvidia-smi printed no NVML library "
        "version): nvidia-smi fails with 'Failed to initialize NVML: Driver/library version mismatch'")


def test_matching_library_but_nvml_loads_another(tmp_path):
    """The right library is installed, yet nvidia-smi loads another one (580.178) from outside library_dirs."""
    result, failed = run_module(nvidia_driver_facts.main,
                                replay(tmp_path, TRUENAS_SMI, TRUENAS_PROC, libraries=("580.173.02",)))
    assert not failed and result["match"] is False
    assert result["message"] == ("host kernel module 580.173.02, container userspace 580.173.02, but nvidia-smi fails: "
                                 "Failed to initialize NVML: Driver/library version mismatch (NVML library version 580.178)")


def test_expected_gpus_are_compared_and_a_missing_one_is_named_with_its_node(tmp_path):
    args = setup(tmp_path)
    gpus_dir = tmp_path / "gpus"
    for index, (uuid, minor) in enumerate((("GPU-00000000-5e1d-4c0a-9b7e-000000000000", 1),
                                           ("GPU-00000001-5e1d-4c0a-9b7e-000000000001", 0),
                                           ("GPU-0000000f-5e1d-4c0a-9b7e-00000000000f", 77))):
        (gpus_dir / ("0000:1%d:00.0" % index)).mkdir(parents=True)
        (gpus_dir / ("0000:1%d:00.0" % index) / "information").write_text(
            "Model: \t\t NVIDIA RTX A6000\nGPU UUID: \t %s\nBus Location: \t 0000:1%d:00.0\nDevice Minor: \t %d\n" % (uuid, index, minor))
    result, failed = run_module(nvidia_driver_facts.main, dict(args, expected_gpus=["GPU-00000000-5e1d-4c0a-9b7e-000000000000",
                                                                                    "GPU-00000001-5e1d-4c0a-9b7e-000000000001"]))
    assert not failed and result["gpu_problems"] == []
    # nvidia-smi cannot be asked for a GPU's minor: it comes from the kernel module's information file, by UUID.
    assert [(gpu["index"], gpu["minor"]) for gpu in result["gpus"]] == [(0, 1), (1, 0)]
    result, failed = run_module(nvidia_driver_facts.main, dict(args, expected_gpus=["GPU-00000000-5e1d-4c0a-9b7e-000000000000",
                                                                                    "GPU-0000000f-5e1d-4c0a-9b7e-00000000000f",
                                                                                    "GPU-deadbeef-0000-0000-0000-000000000000"]))
    assert not failed
    assert result["gpu_problems"] == [
        "GPU-0000000f-5e1d-4c0a-9b7e-00000000000f (the host's GPU 2, /dev/nvidia77) is not usable here: %s"
        % ("its device node is not in the container" if not os.path.exists("/dev/nvidia77") else
           "something else is at its device node's path"),
        "GPU-deadbeef-0000-0000-0000-000000000000 is not a GPU of this host (the NVIDIA kernel module does not list it)",
        "GPU-00000001-5e1d-4c0a-9b7e-000000000001 (GPU 1 here) is visible but not assigned to this container"]
    # nvidia-smi that does not answer: nothing can be compared, and that is the problem.
    os.unlink(args["nvidia_smi"])
    result, failed = run_module(nvidia_driver_facts.main, dict(args, expected_gpus=["GPU-00000000-5e1d-4c0a-9b7e-000000000000"]))
    assert result["gpu_problems"] == ["nvidia-smi does not list the GPUs here (not installed)"]
