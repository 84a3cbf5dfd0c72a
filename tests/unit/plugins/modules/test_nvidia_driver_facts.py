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
  -L) i=0; while [ $i -lt {count} ]; do echo "GPU $i: NVIDIA RTX A6000 (UUID: GPU-0000000$i)"; i=$((i+1)); done ;;
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
    assert [gpu["uuid"] for gpu in result["gpus"]] == ["GPU-00000000", "GPU-00000001"]
    assert result["match"] is True
    assert result["nvidia_smi"]["rc"] == 0 and result["nvidia_smi"]["error"] is None


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
