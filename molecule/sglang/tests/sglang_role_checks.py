"""Helpers for the sglang scenario's checks: rerun the role from the controller with extra variables, several at once."""

from __future__ import annotations

import concurrent.futures

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge

ENVS_DIR = "/opt/sglang/envs"
FACTS = "/var/tmp/molecule-sglang-facts.json"
# The flags sglang_service renders with its defaults (checked against its defaults file in the tests).
CUDA_GRAPH_MAX_BS_ERROR = "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"


def rerun_role_many(runs, timeout=300):
    """Run several independent reruns at once (each with its own venv or install log); return {name: AnsibleRun}."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = {name: pool.submit(rerun_converge, extra_vars, timeout) for name, extra_vars in runs.items()}
        return {name: future.result() for name, future in futures.items()}
