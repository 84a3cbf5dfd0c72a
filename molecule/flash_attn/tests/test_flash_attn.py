"""The wheel path, the capped source build, its diagnosed failure and the refused torch pair."""

from __future__ import annotations

import json
import re

from ansible_collections.llmops.serving.tests.support.ansible_run import call_module, rerun_converge

BUILD_RECORD = "/var/tmp/flash-attn-standin-build.json"


def python_release(host):
    """The container's Python as X.Y (3.11 on Debian 12, 3.13 on Debian 13)."""
    return host.check_output("python3 -c \"import sys; print('%d.%d' % sys.version_info[:2])\"").strip()


def wheel(host):
    """Upstream's release asset name for the container's CPython (the one prepare.yml put into the wheel directory)."""
    cp = "cp" + python_release(host).replace(".", "")
    return "flash_attn-2.8.3.post2+cu13torch2.9cxx11abiTRUE-%s-%s-linux_x86_64.whl" % (cp, cp)


def installed_version(host, venv):
    return json.loads(host.file(f"{venv}/molecule-flash-attn-installed-version.json").content_string)


def test_matching_prebuilt_wheel_is_installed_without_a_build(host):
    assert installed_version(host, "/opt/sglang/venv") == "2.8.3.post2+cu13torch2.9cxx11abiTRUE"
    assert not host.file("/opt/sglang/venv/molecule-flash-attn-build.json").exists
    # The wheel path never builds: no stand-in setup.py ran and no build log exists.
    assert not host.file(BUILD_RECORD).exists
    assert not host.file("/var/log/llmops-serving/flash-attn-build.log").exists
    assert host.file(f"/var/tmp/flash-attn-wheels/{wheel(host)}").exists


def test_build_without_a_wheel_uses_the_capped_parallelism(host):
    run = rerun_converge({"flash_attn_venv": "/opt/fa-build/venv", "flash_attn_wheel_dir": ""}, timeout=240)
    assert run.rc == 0, run.summary()
    record = json.loads(host.file(BUILD_RECORD).content_string)
    # What llmops.serving.build_parallelism decides in this container's cgroup, with the role's arguments:
    # one nvcc thread per CUDA arch ("80" only), 5 GiB per thread, 2 GiB reserve.
    decision, failed = call_module(host, "llmops.serving.build_parallelism", max_nvcc_threads=1, per_thread_gib=5.0, reserve_gib=2.0)
    assert not failed, decision
    # The container's 8 GiB limit (.config/molecule/config.yml), not the machine's memory, bounds the decision.
    assert decision["memory"]["cgroup_limit_bytes"] == 8 * 1024**3
    assert record["MAX_JOBS"] == str(decision["max_jobs"])
    assert record["NVCC_THREADS"] == str(decision["nvcc_threads"]) == "1"
    assert decision["max_jobs"] * decision["nvcc_threads"] * 5 * 1024**3 <= max(decision["memory"]["usable_bytes"] - 2 * 1024**3, 5 * 1024**3)
    # sm_86 builds the sm_80 kernels only.
    assert record["FLASH_ATTN_CUDA_ARCHS"] == "80"
    assert record["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    # --no-build-isolation: setup.py imported the venv's torch; ninja came from the venv.
    assert record["torch"] == "2.9.1+standin"
    assert record["ninja"] == "/opt/fa-build/venv/bin/ninja"
    assert f"MAX_JOBS={decision['max_jobs']}" in run.text and "FLASH_ATTN_CUDA_ARCHS=80" in run.text
    # The full pip -v output is kept (the name as the environment's setuptools writes it: flash_attn since the
    # setuptools that Python 3.13's build requirements bring, flash-attn before).
    assert re.search(r"Successfully installed flash[-_]attn-2\.8\.3\.post2\b",
                     host.file("/var/log/llmops-serving/flash-attn-build.log").content_string)
    assert installed_version(host, "/opt/fa-build/venv") == "2.8.3.post2"
    build = json.loads(host.file("/opt/fa-build/venv/molecule-flash-attn-build.json").content_string)
    assert build["max_jobs"] == decision["max_jobs"] and build["cuda_archs"] == "80"


def test_build_is_not_repeated_once_installed(host):
    run = rerun_converge({"flash_attn_venv": "/opt/fa-build/venv", "flash_attn_wheel_dir": ""}, timeout=240)
    assert run.rc == 0, run.summary()
    assert run.stats[host.backend.host]["changed"] == 0, run.summary()


def test_oom_killed_build_fails_with_the_diagnosis(host):
    run = rerun_converge({
        "flash_attn_venv": "/opt/fa-fail/venv", "flash_attn_wheel_dir": "",
        "flash_attn_build_log": "/var/log/llmops-serving/flash-attn-fail.log",
        "flash_attn_build_environment": {"FLASH_ATTN_STANDIN_REPLAY_LOG": "/var/tmp/onnxruntime-cicc-killed.log"},
    }, timeout=240)
    assert run.rc != 0
    assert "flash-attn 2.8.3.post2 build failed with MAX_JOBS=" in run.text
    assert "out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs)" in run.text
    assert "died due to signal 9 (Kill signal)" in run.text
    # The full log is kept for a human.
    assert "'cicc' died due to signal 9" in host.file("/var/log/llmops-serving/flash-attn-fail.log").content_string


def test_flash_attn_2_8_3_post2_is_refused_with_torch_2_13(host):
    run = rerun_converge({"flash_attn_venv": "/opt/fa-torch213/venv"}, timeout=240)
    assert run.rc != 0
    assert "flash-attn 2.8.3.post2 cannot be built against torch 2.13.0+standin" in run.text
    assert "C++20 or later compatible compiler is required to use ATen" in run.text
    assert not host.file("/opt/fa-torch213/venv/lib/python%s/site-packages/flash_attn" % python_release(host)).exists
