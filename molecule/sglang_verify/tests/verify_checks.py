"""Helpers for the sglang_verify scenario: rerun the converge with other variables and read its summary."""

from __future__ import annotations

import json
import os

from ansible_collections.llmops.serving.tests.support.ansible_run import molecule_platform, rerun_converge

INSTANCE = "verify"
BASE_ENV = {"SGLANG_SIM_STARTUP_SECONDS": "2", "SGLANG_LOG_MS": "1", "SGLANG_SIM_ITERATION_MS": "5"}


def summary_path():
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "verify", f"{molecule_platform()}-{INSTANCE}.json")


def read_summary():
    with open(summary_path(), encoding="utf-8") as handle:
        return json.load(handle)


def converge(extra_vars=None):
    """Run the scenario's converge playbook again; return (AnsibleRun, summary or None)."""
    if os.path.exists(summary_path()):
        os.unlink(summary_path())
    run = rerun_converge(extra_vars, timeout=600)
    return run, read_summary() if os.path.exists(summary_path()) else None


def with_fault(fault, **more):
    """Extra variables that run the simulator in a fault mode (a new deployment: the unit changes)."""
    return dict({"sglang_service_environment": dict(BASE_ENV, SGLANG_SIM_FAULT=fault)}, **more)
