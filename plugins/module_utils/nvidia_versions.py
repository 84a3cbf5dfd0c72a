# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse the version strings of the NVIDIA kernel module, its userspace (NVML, nvidia-smi) and nvcc.

Every parser is a pure function of the text the tool prints; none of them runs anything.
"""

from __future__ import annotations

import re

# /proc/driver/nvidia/version, first line. Proprietary flavour:
#   NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017
# open flavour (the architecture moved behind "for"):
#   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)  ...
_NVRM_LINE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+(?P<head>.*?)Kernel Module(?:\s+for\s+(?P<arch_for>\S+))?\s+(?P<version>\d+(?:\.\d+)+)\s",
)
# A driver version as NVIDIA prints it: 580.95.05, 550.120, 35.3.1 (Jetson).
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?\Z")
# nvidia-smi when NVML and the kernel module disagree, in two forms (newer drivers add the second line):
#   Failed to initialize NVML: Driver/library version mismatch
#   NVML library version: 570.124
_NVML_LIBRARY_VERSION = re.compile(r"^\s*NVML library version:\s*(?P<version>\d+(?:\.\d+)+)\s*$", re.MULTILINE)
# Matched without regard to case or spaces around the slash ("Driver/Library version mismatch" is seen too).
_NVML_MISMATCH = re.compile(r"Driver\s*/\s*library version mismatch", re.IGNORECASE)
# nvcc --version:  Cuda compilation tools, release 12.4, V12.4.99
_NVCC_RELEASE = re.compile(r"Cuda compilation tools, release (?P<release>\d+\.\d+), V(?P<version>\d+(?:\.\d+)+)")
# libnvidia-ml.so.580.95.05 (the installer names the real library after the full driver version).
_NVML_LIBRARY_FILE = re.compile(r"^libnvidia-ml\.so\.(?P<version>\d+\.\d+(?:\.\d+)?)$")

NVML_MISMATCH = "Driver/library version mismatch"


class VersionParseError(ValueError):
    """The text is not in the format the parser knows; the message quotes it."""


def _quote(text, limit=200):
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_proc_version(text):
    """Parse the content of /proc/driver/nvidia/version.

    Returns a dict with ``version`` (``"580.95.05"``), ``flavor`` (``"open"`` or ``"proprietary"``), ``arch``
    (``"x86_64"``, or None when the line does not say) and ``line`` (the NVRM line). Raises VersionParseError
    when no NVRM line is found.
    """
    for line in text.splitlines():
        match = _NVRM_LINE.match(line.strip())
        if not match:
            continue
        head = match.group("head").split()
        flavor = "open" if "Open" in head else "proprietary"
        arch = match.group("arch_for") or next((word for word in head if word != "Open"), None)
        return {"version": match.group("version"), "flavor": flavor, "arch": arch, "line": line.strip()}
    raise VersionParseError("no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line in %s" % _quote(text))


def parse_driver_version_query(text):
    """Parse ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``: one version per GPU.

    Returns the list of versions, in GPU order. Raises VersionParseError on a line that is not a version.
    """
    versions = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if not _DRIVER_VERSION.match(line):
            raise VersionParseError("nvidia-smi printed %s where a driver version was expected" % _quote(line))
        versions.append(line)
    return versions


def parse_nvml_error(text):
    """Read what a failing nvidia-smi printed: ``{"error": first line, "mismatch": bool, "nvml_library_version": str|None}``.

    NVML prints only ``major.minor`` of its own version in the mismatch message (``570.124`` for 570.124.04).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    match = _NVML_LIBRARY_VERSION.search(text)
    return {
        "error": lines[0] if lines else "",
        "mismatch": bool(_NVML_MISMATCH.search(text)),
        "nvml_library_version": match.group("version") if match else None,
    }


def parse_nvcc_version(text):
    """Parse ``nvcc --version``: ``{"release": "12.4", "version": "12.4.99", "major": 12}``."""
    match = _NVCC_RELEASE.search(text)
    if not match:
        raise VersionParseError("no 'Cuda compilation tools, release X.Y, VX.Y.Z' line in %s" % _quote(text))
    release = match.group("release")
    return {"release": release, "version": match.group("version"), "major": int(release.split(".")[0])}


def nvml_library_version_from_filename(name):
    """``libnvidia-ml.so.580.95.05`` -> ``"580.95.05"``; None for the unversioned links (``.so``, ``.so.1``)."""
    match = _NVML_LIBRARY_FILE.match(name)
    return match.group("version") if match else None


def version_key(version):
    """Sort key for dotted driver versions (580.105.08 sorts after 580.95.05)."""
    return tuple(int(part) for part in version.split("."))


def cuda_major(version):
    """``"13.0"`` or ``"13"`` -> 13. Raises VersionParseError for anything else."""
    match = re.match(r"^(\d+)(?:\.\d+)*$", str(version).strip())
    if not match:
        raise VersionParseError("%s is not a CUDA version like 13.0" % _quote(str(version)))
    return int(match.group(1))


def compare_driver_versions(kernel_module_version, userspace_version, nvml_library_versions=()):
    """Decide whether the container's userspace matches the host's kernel module.

    Returns ``(match, message)``. ``match`` is True only when both versions are known, equal, and every
    libnvidia-ml found on disk carries that version too (a stale library of another version is what the
    dynamic loader may pick). The message names both versions side by side.
    """
    if kernel_module_version is None:
        return False, "no NVIDIA kernel module version is visible (is the driver loaded on the host?)"
    others = sorted({v for v in nvml_library_versions if v != kernel_module_version}, key=version_key)
    if userspace_version is None and not nvml_library_versions:
        return False, "host kernel module %s, container userspace: not installed" % kernel_module_version
    if userspace_version is not None and userspace_version != kernel_module_version:
        return False, ("host kernel module %s, container userspace %s: every CUDA/NVML call fails with "
                       "'Failed to initialize NVML: Driver/library version mismatch' until both are the same version"
                       % (kernel_module_version, userspace_version))
    if others:
        return False, ("host kernel module %s, container userspace libnvidia-ml %s: a library of another version is "
                       "installed, and NVML fails with 'Driver/library version mismatch' when it is loaded"
                       % (kernel_module_version, ", ".join(others)))
    return True, "host kernel module %s, container userspace %s: match" % (kernel_module_version, kernel_module_version)


def describe_nvml_mismatch(kernel_module_version, nvml_library_version, nvml_library_versions=()):
    """The message for nvidia-smi's "Driver/library version mismatch": both versions side by side, and what to do.

    ``nvml_library_version`` is what nvidia-smi printed after the error (``"NVML library version: 570.124"``, only
    major.minor; None when it printed only the error line); ``nvml_library_versions`` the versions of the
    ``libnvidia-ml.so.<version>`` files found on disk (none means the loaded library lies elsewhere).
    """
    quoted = "'Failed to initialize NVML: %s'" % NVML_MISMATCH
    if nvml_library_version is None:
        userspace = "container userspace: another version (nvidia-smi printed no NVML library version)"
    elif (kernel_module_version or "").startswith(nvml_library_version + "."):
        userspace = ("container userspace NVML library %s (nvidia-smi prints major.minor only, so another patch level "
                     "or build of %s)" % (nvml_library_version, nvml_library_version))
    else:
        userspace = "container userspace NVML library %s" % nvml_library_version
    message = "host kernel module %s, %s: nvidia-smi fails with %s" % (kernel_module_version, userspace, quoted)
    others = sorted({v for v in nvml_library_versions if v != kernel_module_version}, key=version_key)
    if others:
        message += "; libnvidia-ml %s is installed" % ", ".join(others)
    elif not nvml_library_versions:
        message += ("; no libnvidia-ml.so.<version> is in the library directories searched, so the loaded one lies "
                    "elsewhere ('ldconfig -p | grep libnvidia-ml' shows it)")
    message += "; install the userspace driver %s to match the host kernel module" % kernel_module_version
    return message
