"""The installed virtualenv, the published facts, the preflight failures and the flag validation."""

from __future__ import annotations

import json
import re

import pytest
from sglang_role_checks import CUDA_GRAPH_MAX_BS_ERROR, ENVS_DIR, FACTS, rerun_role_many

# Every rerun below is independent of the others (own virtualenv, or own install log on the installed one), so they
# run at once; each test then reads its own result.
RERUNS = {
    "driver": {"sglang_driver_version": "570.86.15", "sglang_envs_dir": "/opt/sglang-driver/envs"},
    "cuda12": {"sglang_driver_version": "570.86.15", "sglang_version": "0.5.19", "sglang_envs_dir": "/opt/sglang-cu12/envs"},
    "python": {"sglang_python": "/usr/local/bin/python3.10-standin", "sglang_envs_dir": "/opt/sglang-py310/envs"},
    "floor": {"sglang_version": "0.5.9", "sglang_envs_dir": "/opt/sglang-old/envs"},
    "disk": {"sglang_required_disk_gib": 100000, "sglang_envs_dir": "/opt/sglang-disk/envs"},
    "removed_flag": {"sglang_validate_extra_argv": ["--cuda-graph-max-bs", "16"],
                     "sglang_install_log": "/var/log/llmops-serving/sglang-install-removed-flag.log"},
    "accepted_flags": {"sglang_validate_extra_argv": ["--cuda-graph-max-bs-decode", "16", "--speculative-algo", "NEXTN"],
                       "sglang_install_log": "/var/log/llmops-serving/sglang-install-accepted-flags.log"},
}


@pytest.fixture(scope="module")
def reruns():
    return rerun_role_many(RERUNS)


def venv(host):
    return json.loads(host.file(FACTS).content_string)["venv"]


def test_sglang_is_installed_offline_in_its_own_virtualenv(host):
    # One virtualenv per install request: <envs dir>/<version>-<12 hex digits of the request's digest>.
    assert re.fullmatch(re.escape(ENVS_DIR) + r"/0\.5\.23-[0-9a-f]{12}", venv(host)), venv(host)
    out = host.check_output(
        f"{venv(host)}/bin/python -c 'import sglang, sglang.srt.server_args as s; print(sglang.__version__, s.ServerArgs.add_cli_args.__name__)'"
    )
    assert out == "0.5.23+standin add_cli_args"
    assert host.file("/var/log/llmops-serving/sglang-install.log").exists
    assert host.file("/var/log/llmops-serving/sglang-install.log.rc").content_string.strip() == "0"


def test_installed_versions_and_model_revision_are_published(host):
    facts = json.loads(host.file(FACTS).content_string)
    # The stand-in has no torch; absent distributions are left out rather than reported as null.
    assert facts["installed_versions"] == {"sglang": "0.5.23+standin"}
    # The commit recorded by the pre-staged download metadata (prepare.yml's fixture).
    assert facts["model_revision"] == "0123456789abcdef0123456789abcdef01234567"


def test_driver_below_580_fails_before_any_install(host, reruns):
    run = reruns["driver"]
    assert run.rc != 0
    assert "SGLang 0.5.23 is a CUDA 13 build and needs a host NVIDIA driver >= 580, but the host driver is 570.86.15" in run.text
    assert "0.5.19 (the last SGLang release with a CUDA 12 lane" in run.text
    assert not host.file("/opt/sglang-driver").exists


def test_cuda12_release_accepts_a_570_driver(host, reruns):
    # 0.5.19 is a CUDA 12 build: driver 570 passes; the run then stops at the install (no such wheel offline).
    run = reruns["cuda12"]
    assert run.rc != 0
    assert "needs a host NVIDIA driver" not in run.text
    assert "No matching distribution found for sglang==0.5.19" in run.text


def test_python_older_than_requires_python_fails_before_any_install(host, reruns):
    run = reruns["python"]
    assert run.rc != 0
    assert "SGLang 0.5.23 requires Python >= 3.11, but /usr/local/bin/python3.10-standin is Python 3.10.12" in run.text
    assert not host.file("/opt/sglang-py310").exists


def test_qwen36_with_tp2_needs_0_5_10(host, reruns):
    run = reruns["floor"]
    assert run.rc != 0
    assert "/models/Qwen3.6-27B (Qwen3.5/3.6) with TP 2 needs SGLang >= 0.5.10, but sglang_version is 0.5.9" in run.text
    assert not host.file("/opt/sglang-old").exists


def test_disk_space_check_names_both_figures(host, reruns):
    run = reruns["disk"]
    assert run.rc != 0
    assert "Not enough disk space: the SGLang install needs 100000.0 GiB at /opt/sglang-disk/envs/0.5.23-" in run.text
    assert not host.file("/opt/sglang-disk").exists


def test_removed_flag_fails_with_argparse_message(host, reruns):
    run = reruns["removed_flag"]
    assert run.rc != 0
    assert "rejects the flags the service would get" in run.text
    assert CUDA_GRAPH_MAX_BS_ERROR in run.text


def test_abbreviated_and_replacement_flags_are_accepted(host, reruns):
    run = reruns["accepted_flags"]
    assert run.rc == 0, run.summary()


def test_a_new_request_is_staged_beside_the_environment_a_deployment_runs(host):
    # Last: it installs a second environment and rewrites the published facts. The installed environment is named by a
    # deployment record (as sglang_service writes it); an environment that nothing names is pruned before the install.
    running = venv(host)
    record = {"instance": "molecule-envs", "deployment_id": "a" * 64, "deployed_at": "2026-12-02T00:00:00Z",
              "previous_deployment_id": None, "inputs": {"package_environment": running}, "archive": ""}
    abandoned = ENVS_DIR + "/0.5.22-0123456789ab"
    host.check_output("install -d -m 0755 /var/lib/llmops-serving/molecule-envs %s/bin", abandoned)
    host.check_output("printf '%%s\\n' %s > /var/lib/llmops-serving/molecule-envs/deployment.json", json.dumps(record))
    before = host.check_output(f"{running}/bin/python -c 'import sglang; print(sglang.__file__)' && stat -c %Y {running}/bin/python")
    try:
        # Another request (an installer argument more): another environment.
        run = rerun_role_many({"staged": {"sglang_installer_extra_args": ["--no-compile"]}})["staged"]
        assert run.rc == 0, run.summary()
        staged = venv(host)
        assert staged != running and staged.startswith(ENVS_DIR + "/0.5.23-"), staged
        assert host.check_output(f"{staged}/bin/python -c 'import sglang; print(sglang.__version__)'") == "0.5.23+standin"
        # The environment the deployment runs from was not touched; the one nothing names is gone.
        assert host.check_output(f"{running}/bin/python -c 'import sglang; print(sglang.__file__)' && stat -c %Y {running}/bin/python") == before
        assert not host.file(abandoned).exists
        pruned = run.task_results("Remove the virtualenvs that no deployment of this host runs from")
        assert pruned and pruned[0]["removed"] == [abandoned], pruned
    finally:
        host.check_output("rm -rf /var/lib/llmops-serving/molecule-envs")
