# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""flash_attn_build_diagnosis module: files on disk in, verdict out; it reports and never fails on a verdict."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.modules import flash_attn_build_diagnosis
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

# https://github.com/microsoft/onnxruntime/issues/18579 (verbatim): flash-attention kernel, cicc OOM-killed.
CICC_KILLED = """\
CMakeFiles/onnxruntime_providers_cuda_obj.dir/tmp/onnxruntime/onnxruntime/contrib_ops/cuda/bert/flash_attention/flash_fwd_split_hdim192_fp16_sm80.cu.o
nvcc error   : 'cicc' died due to signal 9 (Kill signal)
"""

# https://github.com/vllm-project/vllm/issues/49260 (verbatim): vendored flash-attention, C++17 vs torch 2.14 headers.
CXX20_REQUIRED = """\
FAILED: vllm-flash-attn/CMakeFiles/_vllm_fa2_C.dir/csrc/flash_attn/flash_api.cpp.o
sccache /usr/bin/c++ ... csrc/flash_attn/flash_api.cpp
In file included from .../torch/include/.../torch/types.h  ->  ATen.h:
/opt/venv/.../torch/include/ATen/ATen.h:5:2: error: #error C++20 or later compatible compiler is required to use ATen.
ninja: build stopped: subcommand failed.
"""

# https://github.com/Dao-AILab/flash-attention/issues/1921 (verbatim): only the generic tail.
GENERIC = """\
      subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '64']' returned non-zero exit status 1.
"""

# https://github.com/mlpack/mlpack/issues/2213 (verbatim): dmesg of a cc1plus OOM kill.
DMESG_CC1PLUS = ("[13236.245467] Out of memory: Killed process 26958 (cc1plus) total-vm:3970108kB, anon-rss:3090636kB, "
                 "file-rss:0kB, shmem-rss:0kB\n")


# https://github.com/microsoft/SynapseVSCode/issues/54 (verbatim): BuildKit's verdict on a RUN step out of memory.
RESOURCE_EXHAUSTED = ('ERROR: failed to solve: ResourceExhausted: process "/bin/sh -c conda install -c conda-forge '
                      'pyspark==$SPARK_VERSION" did not complete successfully: cannot allocate memory\n')


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_oom_log(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {"build_log": write(tmp_path, "build.log", CICC_KILLED)})
    assert not failed and result["changed"] is False
    assert result["cause"] == "oom"
    assert result["decisive_line"] == "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"
    assert result["message"].startswith("out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs)")
    assert result["kernel_log_source"] == "none given (set kernel_log or read_dmesg)"


def test_incompatible_log_is_reported_not_failed(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {"build_log": write(tmp_path, "b.log", CXX20_REQUIRED)},
                                check_mode=True)
    assert not failed
    assert result["cause"] == "incompatible"
    assert result["message"].startswith("a real CUDA/compiler incompatibility: /opt/venv/.../torch/include/ATen/ATen.h")


def test_kernel_log_file_decides_a_generic_failure(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC),
        "kernel_log": write(tmp_path, "dmesg.txt", DMESG_CC1PLUS),
    })
    assert not failed
    assert result["cause"] == "oom"
    assert result["kernel_log_source"] == str(tmp_path / "dmesg.txt")
    assert result["decisive_line"].startswith("[13236.245467] Out of memory: Killed process 26958 (cc1plus)")


def test_cgroup_events_with_baseline(tmp_path):
    after = write(tmp_path, "after", "low 0\nhigh 0\nmax 9\noom 3\noom_kill 3\noom_group_kill 0\n")
    before = write(tmp_path, "before", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n")
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC), "cgroup_events": after, "cgroup_events_before": before})
    assert not failed
    assert result["cause"] == "oom"
    assert result["cgroup_oom_kills"] == 2
    assert result["decisive_line"] == "oom_kill 2"


def test_before_without_after_is_refused(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC), "cgroup_events_before": write(tmp_path, "before", "oom_kill 0\n")})
    assert failed
    assert "cgroup_events_before needs cgroup_events" in result["msg"]


def test_missing_build_log_fails_with_the_path(tmp_path):
    missing = str(tmp_path / "nope.log")
    result, failed = run_module(flash_attn_build_diagnosis.main, {"build_log": missing})
    assert failed
    assert result["msg"].startswith("cannot read the build log %s: " % missing)


def fake_dmesg(tmp_path, monkeypatch, script):
    """Put a stand-in ``dmesg`` first on PATH (get_bin_path searches PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\n" + script)
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))


def test_read_dmesg_success(tmp_path, monkeypatch):
    kernel_text = write(tmp_path, "k.txt", DMESG_CC1PLUS)
    fake_dmesg(tmp_path, monkeypatch, "cat '%s'\n" % kernel_text)
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC), "read_dmesg": True})
    assert not failed
    assert result["kernel_log_source"] == "dmesg"
    assert result["cause"] == "oom"


def test_read_dmesg_refused_is_best_effort(tmp_path, monkeypatch):
    # What util-linux dmesg prints when kernel.dmesg_restrict refuses an unprivileged reader.
    fake_dmesg(tmp_path, monkeypatch, "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC), "read_dmesg": True})
    assert not failed
    assert result["kernel_log_source"] == "dmesg unavailable: dmesg: read kernel buffer failed: Operation not permitted"
    assert result["cause"] == "unknown"


@pytest.mark.parametrize("option", ["kernel_log", "cgroup_events"])
def test_unreadable_optional_file_fails(tmp_path, option):
    result, failed = run_module(flash_attn_build_diagnosis.main, {
        "build_log": write(tmp_path, "b.log", GENERIC), option: str(tmp_path / "missing")})
    assert failed
    assert str(tmp_path / "missing") in result["msg"]


def test_buildkit_resource_exhausted_is_oom(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {"build_log": write(tmp_path, "b.log", RESOURCE_EXHAUSTED)})
    assert not failed
    assert result["cause"] == "oom"
    assert result["decisive_line"] == RESOURCE_EXHAUSTED.strip()


def test_unknown_names_what_to_collect(tmp_path):
    result, failed = run_module(flash_attn_build_diagnosis.main, {"build_log": write(tmp_path, "b.log", GENERIC)})
    assert not failed
    assert result["cause"] == "unknown"
    assert "'dmesg' or 'journalctl -k'" in result["message"]
    assert "memory.max_usage_in_bytes" in result["message"] and "memory.failcnt" in result["message"]
