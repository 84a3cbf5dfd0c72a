"""Helpers for the cuda_toolkit scenario's testinfra checks."""

from __future__ import annotations

import json
import os
import subprocess


def rerun_role(extra_vars=None):
    """Converge again from the controller; return the finished process (the caller checks rc and output)."""
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    playbook = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")
    return subprocess.run(
        ["ansible-playbook", "-i", inventory, playbook, "-e", json.dumps(extra_vars or {})],
        capture_output=True, text=True, timeout=300, check=False,
    )


def output(run):
    return run.stdout[-4000:] + run.stderr[-2000:]


def installed(host, package):
    run = host.run(f"dpkg-query -W -f='${{Status}}' {package}")
    return run.rc == 0 and run.stdout == "install ok installed"
