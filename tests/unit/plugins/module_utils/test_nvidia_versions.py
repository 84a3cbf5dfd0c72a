# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_versions parsers on verbatim public samples (source URL next to each)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_versions as nv

# https://github.com/dylanaraps/neofetch/issues/876 (proprietary flavour)
PROC_PROPRIETARY_384 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\n"
    "GCC version:  gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3) \n"
)
# https://github.com/nix-community/nixGL/issues/186 (open flavour, Ubuntu 24.04)
PROC_OPEN_565 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)"
    "  Thu Oct 10 12:15:00 UTC 2024\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
# https://github.com/nix-community/nixGL/issues/121 (open flavour, Arch; note the trailing spaces)
PROC_OPEN_525 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (archlinux-builder@localhost)  \n"
    "GCC version:  gcc version 12.2.0 (GCC) \n"
)
# https://github.com/nix-community/nixGL/issues/139 (Jetson: three-part L4T version, aarch64)
PROC_JETSON = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile-u64-6289-d7000)"
    "  Sun Mar 19 08:09:33 PDT 2023\n"
    "GCC version:  gcc version 9.3.0 (Buildroot 2020.08) \n"
)
# https://github.com/hyprwm/Hyprland/pull/6715 (two-part version, localised date)
PROC_OPEN_555_LOCALISED = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.58  Release Build  (portage@localhost)"
    "  Сб 29 июн 2024 14:36:22 MSK\n"
)

# https://github.com/tinygrad/open-gpu-kernel-modules/issues/47 (userspace 570.124.04 over a 570.124.06 module)
SMI_MISMATCH_570 = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n"
# https://github.com/intel/llvm/issues/17614
SMI_MISMATCH_550 = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n"

# https://github.com/ggml-org/llama.cpp/issues/10652
NVCC_12_4 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2024 NVIDIA Corporation\n"
    "Built on Tue_Feb_27_16:19:38_PST_2024\n"
    "Cuda compilation tools, release 12.4, V12.4.99\n"
    "Build cuda_12.4.r12.4/compiler.33961263_0\n"
)
# https://github.com/ggml-org/llama.cpp/issues/11696
NVCC_11_5 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2021 NVIDIA Corporation\n"
    "Built on Thu_Nov_18_09:45:30_PST_2021\n"
    "Cuda compilation tools, release 11.5, V11.5.119\n"
    "Build cuda_11.5.r11.5/compiler.30672275_0\n"
)
# https://github.com/pytorch/builder/pull/580 (older "Build" line format)
NVCC_11_1 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2020 NVIDIA Corporation\n"
    "Built on Mon_Oct_12_20:09:46_PDT_2020\n"
    "Cuda compilation tools, release 11.1, V11.1.105\n"
    "Build cuda_11.1.TC455_06.29190527_0\n"
)


@pytest.mark.parametrize("text, version, flavor, arch", [
    (PROC_PROPRIETARY_384, "384.98", "proprietary", "x86_64"),
    (PROC_OPEN_565, "565.57.01", "open", "x86_64"),
    (PROC_OPEN_525, "525.60.11", "open", "x86_64"),
    (PROC_JETSON, "35.3.1", "open", "aarch64"),
    (PROC_OPEN_555_LOCALISED, "555.58", "open", "x86_64"),
])
def test_proc_version_both_flavours(text, version, flavor, arch):
    parsed = nv.parse_proc_version(text)
    assert (parsed["version"], parsed["flavor"], parsed["arch"]) == (version, flavor, arch)
    assert parsed["line"] == text.splitlines()[0].strip()


def test_proc_version_does_not_take_the_gcc_version():
    assert nv.parse_proc_version(PROC_OPEN_565)["version"] != "13.3.0"


@pytest.mark.parametrize("text", ["", "GCC version:  gcc version 12.2.0 (GCC)\n", "NVRM version: something else 1.2.3\n"])
def test_proc_version_unknown_format_is_an_error_that_quotes_it(text):
    with pytest.raises(nv.VersionParseError, match="NVRM version"):
        nv.parse_proc_version(text)


@pytest.mark.parametrize("text, library_version", [(SMI_MISMATCH_570, "570.124"), (SMI_MISMATCH_550, "550.144")])
def test_nvml_mismatch_message(text, library_version):
    failure = nv.parse_nvml_error(text)
    assert failure["mismatch"] is True
    assert failure["error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert failure["nvml_library_version"] == library_version


def test_nvml_other_failure_is_not_a_mismatch():
    failure = nv.parse_nvml_error("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert failure["mismatch"] is False and failure["nvml_library_version"] is None
    assert failure["error"].startswith("NVIDIA-SMI has failed")


def test_driver_version_query_one_line_per_gpu():
    assert nv.parse_driver_version_query("580.95.05\n580.95.05\n") == ["580.95.05", "580.95.05"]


def test_driver_version_query_rejects_an_error_text():
    with pytest.raises(nv.VersionParseError, match="driver version was expected"):
        nv.parse_driver_version_query(SMI_MISMATCH_570)


@pytest.mark.parametrize("text, release, version, major", [
    (NVCC_12_4, "12.4", "12.4.99", 12),
    (NVCC_11_5, "11.5", "11.5.119", 11),
    (NVCC_11_1, "11.1", "11.1.105", 11),
])
def test_nvcc_version(text, release, version, major):
    assert nv.parse_nvcc_version(text) == {"release": release, "version": version, "major": major}


def test_nvcc_version_unknown_format():
    with pytest.raises(nv.VersionParseError):
        nv.parse_nvcc_version("bash: nvcc: command not found\n")


@pytest.mark.parametrize("name, version", [
    ("libnvidia-ml.so.580.95.05", "580.95.05"),
    ("libnvidia-ml.so.550.120", "550.120"),
    ("libnvidia-ml.so.1", None),
    ("libnvidia-ml.so", None),
    ("libnvidia-mlx.so.580.95.05", None),
])
def test_nvml_library_file_names(name, version):
    assert nv.nvml_library_version_from_filename(name) == version


def test_version_key_orders_numerically():
    assert sorted(["580.105.08", "580.95.05", "580.82.07"], key=nv.version_key) == ["580.82.07", "580.95.05", "580.105.08"]


@pytest.mark.parametrize("value, major", [("13.0", 13), ("12.8", 12), ("13", 13), (13, 13)])
def test_cuda_major(value, major):
    assert nv.cuda_major(value) == major


def test_cuda_major_rejects_names():
    with pytest.raises(nv.VersionParseError):
        nv.cuda_major("cu130")


def test_compare_match():
    match, message = nv.compare_driver_versions("580.95.05", "580.95.05", ["580.95.05"])
    assert match is True
    assert message == "host kernel module 580.95.05, container userspace 580.95.05: match"


def test_compare_patch_level_mismatch_names_both_versions_side_by_side():
    match, message = nv.compare_driver_versions("580.95.05", "580.82.07", ["580.82.07"])
    assert match is False
    assert message.startswith("host kernel module 580.95.05, container userspace 580.82.07: ")
    assert "Driver/library version mismatch" in message


def test_compare_stale_library_of_another_version():
    match, message = nv.compare_driver_versions("580.95.05", "580.95.05", ["580.82.07", "580.95.05"])
    assert match is False
    assert "libnvidia-ml 580.82.07" in message


def test_compare_nothing_installed_and_no_module():
    assert nv.compare_driver_versions("580.95.05", None, []) == (
        False, "host kernel module 580.95.05, container userspace: not installed")
    match, message = nv.compare_driver_versions(None, "580.95.05", ["580.95.05"])
    assert match is False and "no NVIDIA kernel module" in message


# =========================================================================== issue #13: the mismatch, as reported
#
# NEW verbatim samples (not the two above), nvidia-smi's output and, where the thread has it, the kernel module's
# /proc/driver/nvidia/version. On the code before issue #13 the case-variant sample was not a mismatch, and a
# mismatch without a versioned libnvidia-ml on disk read "container userspace: not installed".

# https://github.com/zzzhouuu/truenas-nvidia-drivers/issues/19 - TrueNAS, userspace 580.178.x over module 580.173.02.
SMI_MISMATCH_580 = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178\n"
PROC_580_173 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
                "GCC version:  gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)\n")
# https://github.com/BIOP/BIOP-desktop/issues/27 - a desktop container image whose userspace is 570.86.
SMI_MISMATCH_570_86 = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.86\n"
# https://github.com/k4yt3x/video2x/issues/1226 - a container with userspace 565.57 on a host with driver 535.
SMI_MISMATCH_565 = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 565.57\n"
# https://github.com/illinois-scicomp/machine-shop-maintenance/issues/70 - the one-line form (nvidia-smi
# 525.85.12 installed, module 520.56.06 loaded).
SMI_MISMATCH_ONE_LINE_2023 = "Failed to initialize NVML: Driver/library version mismatch\n"
PROC_520 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct  6 21:38:55 UTC 2022\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
# https://github.com/pop-os/nvidia-graphics-drivers-470/issues/18 - the one-line form with driver 470.
SMI_MISMATCH_ONE_LINE_470 = "Failed to initialize NVML: Driver/library version mismatch\n"
# https://github.com/rajeshroy402/DeepStream-dGPU-Installation/issues/5 - as quoted there, with a capital "L".
SMI_MISMATCH_CAPITAL_L = "Failed to initialize NVML: Driver/Library version mismatch\n"


@pytest.mark.parametrize("text, library_version", [
    (SMI_MISMATCH_580, "580.178"),
    (SMI_MISMATCH_570_86, "570.86"),
    (SMI_MISMATCH_565, "565.57"),
    (SMI_MISMATCH_ONE_LINE_2023, None),
    (SMI_MISMATCH_ONE_LINE_470, None),
    (SMI_MISMATCH_CAPITAL_L, None),
], ids=["truenas-19-580", "biop-27-570", "video2x-1226-565", "machine-shop-70-one-line", "pop-os-470-18-one-line",
        "deepstream-5-capital-l"])
def test_nvml_mismatch_both_forms(text, library_version):
    failure = nv.parse_nvml_error(text)
    assert failure["mismatch"] is True
    assert failure["error"] == text.splitlines()[0]
    assert failure["nvml_library_version"] == library_version


def test_proc_version_of_the_mismatch_threads():
    assert nv.parse_proc_version(PROC_580_173)["version"] == "580.173.02"
    assert nv.parse_proc_version(PROC_520)["version"] == "520.56.06"


def test_describe_mismatch_names_both_versions():
    message = nv.describe_nvml_mismatch("580.173.02", "580.178")
    assert message.startswith("host kernel module 580.173.02, container userspace NVML library 580.178: nvidia-smi "
                              "fails with 'Failed to initialize NVML: Driver/library version mismatch'")
    assert "ldconfig -p | grep libnvidia-ml" in message
    assert message.endswith("install the userspace driver 580.173.02 to match the host kernel module")


def test_describe_mismatch_of_the_same_major_minor():
    """tinygrad/open-gpu-kernel-modules#47 (above): 570.124 printed over a 570.124.06 module."""
    message = nv.describe_nvml_mismatch("570.124.06", "570.124")
    assert "NVML library 570.124 (nvidia-smi prints major.minor only, so another patch level or build of 570.124)" \
        in message


def test_describe_mismatch_one_line_form():
    message = nv.describe_nvml_mismatch("520.56.06", None, ["525.85.12"])
    assert message.startswith("host kernel module 520.56.06, container userspace: another version (nvidia-smi printed "
                              "no NVML library version)")
    assert "libnvidia-ml 525.85.12 is installed" in message
    assert "not installed" not in message
