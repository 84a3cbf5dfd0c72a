"""Helpers for the flash_attn scenario's checks (same patterns as molecule/sglang_service/tests/sglang_checks.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

BUILD_RECORD = "/var/tmp/flash-attn-standin-build.json"


def call_module(host, module, **args):
    """Run a collection module on the target with `ansible` and the json callback; return (result, failed)."""
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    run = subprocess.run(
        ["ansible", "-i", inventory, host.backend.host, "-m", module, "-a", json.dumps(args)],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )
    try:
        result = json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"][host.backend.host]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"ansible -m {module} gave no result (rc {run.returncode}): {run.stdout[-2000:]} {run.stderr[-2000:]}")
    return result, bool(result.get("failed"))


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
