"""Helpers for the nvidia_userspace scenario's testinfra checks."""

from __future__ import annotations

PROC = "/srv/nvidia-standin/proc-driver-nvidia-version"
RUNS_LOG = "/var/log/nvidia-standin/installer-runs.log"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
HOST_VERSION = "580.95.05"
OTHER_VERSION = "580.82.07"
FLAGS = "--silent --no-kernel-module --no-nouveau-check --no-x-check"
# The role's container GPU preflight (it reads the kit's /proc/devices, molecule/shared/gpu-driver.yml).
PREFLIGHT_TASK = "Check the container's GPUs and device nodes"

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Sep 30 10:00:00 UTC 2025"
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (dvs-builder@U16-A24-9-2)"
        "  Tue Sep 30 10:00:00 UTC 2025")


def set_host_module(host, version, line=PROPRIETARY):
    """Make the stand-in proc file report another kernel module version (a host driver update)."""
    content = line.format(version=version) + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    host.run(f"printf '%s' '{content}' > {PROC}")
    assert host.file(PROC).content_string == content


def installer_runs(host):
    log = host.file(RUNS_LOG)
    return log.content_string.splitlines() if log.exists else []


def preflight_result(run):
    """The role's container GPU preflight result in a converge rerun (it runs once, after the verification)."""
    (result,) = run.task_results(PREFLIGHT_TASK)
    return result
