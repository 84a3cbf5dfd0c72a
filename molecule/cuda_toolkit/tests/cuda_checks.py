"""Helpers for the cuda_toolkit scenario's testinfra checks."""

from __future__ import annotations


def installed(host, package):
    run = host.run(f"dpkg-query -W -f='${{Status}}' {package}")
    return run.rc == 0 and run.stdout == "install ok installed"
