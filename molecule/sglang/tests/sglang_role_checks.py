"""Helpers for the sglang scenario's checks: rerun the role from the controller with extra variables."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess

VENV = "/opt/sglang/venv"
FACTS = "/var/tmp/molecule-sglang-facts.json"
# The flags sglang_service renders with its defaults (checked against its defaults file in the tests).
CUDA_GRAPH_MAX_BS_ERROR = "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"


def rerun_role(extra_vars, timeout=240):
    """Converge again from the controller with extra variables; return (returncode, output)."""
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    playbook = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run(
        ["ansible-playbook", "-i", inventory, playbook, "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, timeout=timeout, check=False, env=env,
    )
    return run.returncode, run.stdout + run.stderr


def rerun_role_many(runs, timeout=300):
    """Run several independent reruns at once (each with its own venv or install log); return {name: (rc, output)}."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = {name: pool.submit(rerun_role, extra_vars, timeout) for name, extra_vars in runs.items()}
        return {name: future.result() for name, future in futures.items()}
