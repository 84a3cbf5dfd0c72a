# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""build_failure: OOM kill vs real incompatibility, on VERBATIM public build and kernel logs.

Every sample below is copied verbatim (an excerpt: the lines around the failure) from the public GitHub issue named
next to it. Where a test joins two samples into one log, it says so; the lines themselves are not edited. Lines
longer than the 160-column limit are split into adjacent string literals, which Python joins back unchanged.
"""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import build_failure as bf

# --------------------------------------------------------------------------- OOM samples (build logs)

# https://github.com/microsoft/onnxruntime/issues/18579 - onnxruntime's copy of the flash-attention kernels
# (flash_fwd_split_hdim192_fp16_sm80.cu), cicc killed by the OOM killer.
ONNXRUNTIME_FLASH_ATTENTION_CICC_KILLED = "".join([
    'CMakeFiles/onnxruntime_providers_cuda_obj.dir/tmp/onnxruntime/onnxruntime/contrib_ops/cuda/bert/'
    'flash_attention/flash_fwd_split_hdim192_fp16_sm80.cu.o\n',
    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\n",
])

# https://github.com/predibase/lorax/issues/252 - flash-attention v2 (flash_attn_2_cuda) built in a Dockerfile;
# the shell prints a bare "Killed" between ninja steps.
LORAX_FLASH_ATTENTION_V2_KILLED = "".join([
    ' --expt-extended-lambda --use_fast_math -gencode arch=compute_80,code=sm_80 -gencode arch=comput'
    'e_90,code=sm_90 --threads 4 -DTORCH_API_INCLUDE_EXTENSION_H \'-DPYBIND11_COMPILER_TYPE="_gcc"\' \'-'
    'DPYBIND11_STDLIB="_libstdcpp"\' \'-DPYBIND11_BUILD_ABI="_cxxabi1011"\' -DTORCH_EXTENSION_NAME=flash'
    '_attn_2_cuda\n',
    ' -D_GLIBCXX_USE_CXX11_ABI=0\n',
    'Killed\n',
    '[3/49] /opt/conda/bin/nvcc --generate-dependencies-with-compile --dependency-output /usr/src/fla'
    'sh-attention-v2/build/temp.linux-x86_64-cpython-310/csrc/flash_attn/src/flash_bwd_hdim128_bf16_s'
    'm80.o.d -I/usr/src/flash-attention-v2/csrc/flash_attn -I/usr/src/flash-attention-v2/csrc/flash_a'
    'ttn/src -I/u\n',
])

# https://github.com/NVIDIA/TensorRT-LLM/issues/824 - TensorRT-LLM's CUDA kernels, two cicc processes killed.
TENSORRT_LLM_CICC_KILLED = """\
nvcc error   : 'cicc' died due to signal 9 (Kill signal)
nvcc error   : 'cicc' died due to signal 9 (Kill signal)
gmake[3]: *
"""

# https://github.com/pizlonator/fil-c/issues/110 - ninja + gcc, cc1plus killed.
FILC_CC1PLUS_KILLED = """\
[12/2239] Building CXX object lib/Transforms/Coroutines/CMakeFiles/LLVMCoroutines.dir/CoroElide.cpp.o
ninja: job failed: /usr/bin/c++ -<snip> /fil-c/llvm/lib/Transforms/Coroutines/CoroSplit.cpp
c++: fatal error: Killed signal terminated program cc1plus
compilation terminated.
ninja: subcommand failed
"""

# https://github.com/GambitBSM/gambit/issues/133 - the build log and, in the same issue, the dmesg line of the kill.
GAMBIT_BUILD_LOG = """\
make gambit
...
[ 95%] Building CXX object CMakeFiles/gambit.dir/Core/src/gambit.cpp.o
c++: internal compiler error: Killed (program cc1plus)
...
"""
GAMBIT_DMESG = """\
dmesg
...
[ 1638.977956] Out of memory: Killed process 9253 (cc1plus) total-vm:6084172kB, anon-rss:5342044kB, file-rss:0kB, shmem-rss:0kB
...
"""

# https://github.com/flashlight/flashlight/issues/581 - the linker killed during a ninja build.
FLASHLIGHT_LD_KILLED = """\
collect2: fatal error: ld terminated with signal 9 [Killed]
compilation terminated.
"""

# --------------------------------------------------------------------------- kernel logs

# https://github.com/mlpack/mlpack/issues/2213 - dmesg after cc1plus was OOM-killed.
MLPACK_DMESG = """\
[13236.245467] Out of memory: Killed process 26958 (cc1plus) total-vm:3970108kB, anon-rss:3090636kB, file-rss:0kB, shmem-rss:0kB
[13236.337540] oom_reaper: reaped process 26958 (cc1plus), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB
"""

# https://github.com/ggml-org/llama.cpp/issues/17844 - a CUDA build in Docker ran the host out of memory, and the
# kernel picked nautilus (not a build process) as its victim.
LLAMA_CPP_JOURNAL_KILLED_NAUTILUS = "".join([
    'Dec 07 15:40:35 user kernel: [   8122]     0  8122      724       24    53248        0          '
    '   0 sh\n',
    'Dec 07 15:40:35 user kernel: [   8123]     0  8123    25225    10680   151552        0          '
    '   0 cudafe++\n',
    'Dec 07 15:40:35 user kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=user.sli'
    'ce,mems_allowed=0,global_oom,task_memcg=/user.slice/user-1000.slice/user@1000.service/session.sl'
    'ice/dbus.service,>\n',
    'Dec 07 15:40:35 user kernel: Out of memory: Killed process 2602 (nautilus) total-vm:3089788kB, a'
    'non-rss:17236kB, file-rss:4792kB, shmem-rss:8136kB, UID:1000 pgtables:1272kB oom_score_adj:200\n',
])

# https://github.com/netdata/netdata/issues/10875 - the wording of a cgroup (not global) OOM kill.
NETDATA_MEMCG_KILL = ("[ 1836.276684] Memory cgroup out of memory: Killed process 4971 (netdata) total-vm:47820kB, "
                      "anon-rss:7560kB, file-rss:0kB, shmem-rss:0kB, UID:201 pgtables:100kB oom_score_adj:1000\n")

# --------------------------------------------------------------------------- incompatibility samples

# https://github.com/vllm-project/vllm/issues/49260 - vllm's vendored flash-attention built with C++17 against
# torch 2.14 headers, which require C++20 (the same break as flash-attn 2.8.3.post2 with torch >= 2.13).
VLLM_FLASH_ATTN_CXX20 = """\
FAILED: vllm-flash-attn/CMakeFiles/_vllm_fa2_C.dir/csrc/flash_attn/flash_api.cpp.o
sccache /usr/bin/c++ ... csrc/flash_attn/flash_api.cpp
In file included from .../torch/include/.../torch/types.h  ->  ATen.h:
/opt/venv/.../torch/include/ATen/ATen.h:5:2: error: #error C++20 or later compatible compiler is required to use ATen.
ninja: build stopped: subcommand failed.
"""

# https://github.com/Eyeline-Labs/FlashDepth/issues/2 - a CUDA extension (mamba's selective_scan) with gcc newer than
# the CUDA toolkit supports.
FLASHDEPTH_UNSUPPORTED_GCC = "".join([
    '      /usr/local/cuda/include/crt/host_config.h:143:2: error: #error -- unsupported GNU version!'
    " gcc versions later than 12 are not supported! The nvcc flag '-allow-unsupported-compiler' can b"
    'e used to override this version check; however, using an unsupported host compiler may cause com'
    'pilation failure or incorrect run time execution. Use at your own risk.\n',
    '        143 | #error -- unsupported GNU version! gcc versions later than 12 are not supported! T'
    "he nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, "
    'using an unsupported host compiler may cause compilation failure or incorrect run time execution'
    '. Use at your own risk.\n',
    '            |  ^~~~~\n',
    '      fatal   : Could not open input file /tmp/tmpxft_00001f94_00000000-13_selective_scan_bwd_bf'
    '16_real.compute_53.cpp1.ii\n',
])

# https://github.com/ali-vilab/VGen/issues/29 - flash-attn install with a toolkit that differs from torch's CUDA.
VGEN_FLASH_ATTN_CUDA_MISMATCH = """\
RuntimeError:
      The detected CUDA version (12.2) mismatches the version that was used to compile
      PyTorch (11.3). Please make sure to use the same CUDA versions.

      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for flash-attn
  Running setup.py clean for flash-attn
"""

# https://github.com/Dao-AILab/flash-attention/issues/1759 - the same mismatch, flash-attn 2.8.1 (quoted with "> ").
FLASH_ATTENTION_1759_CUDA_MISMATCH = """\
> RuntimeError:
> The detected CUDA version (12.9) mismatches the version that was used to compile
> PyTorch (11.8). Please make sure to use the same CUDA versions.
"""

# https://github.com/jolibrain/colette/pull/26 - a flash-attn wheel built for another torch ABI.
COLETTE_FLASH_ATTN_UNDEFINED_SYMBOL = """\
ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs
"""

# pip 25.1.1 on Debian 13's Python 3.13.5 (this project's molecule flash_attn scenario on the Debian 13 image,
# 2026-12-05, before its stand-in torch required setuptools as the real torch 2.9.1 does): a build without isolation
# in a virtualenv that Python 3.13 made without setuptools. The head and the end of the traceback, verbatim.
PIP_NO_SETUPTOOLS_IN_VENV = """\
Using pip 25.1.1 from /opt/sglang/venv/lib/python3.13/site-packages/pip (python 3.13)
Looking in links: /var/tmp/python-wheels
Processing /var/tmp/flash-attn-standin-src
  Preparing metadata (pyproject.toml): started
  Running command Preparing metadata (pyproject.toml)
  Preparing metadata (pyproject.toml): finished with status 'done'
ERROR: Exception:
Traceback (most recent call last):
  File "/opt/sglang/venv/lib/python3.13/site-packages/pip/_vendor/pyproject_hooks/_impl.py", line 402, in _call_hook
    raise BackendUnavailable(
    ...<4 lines>...
    )
pip._vendor.pyproject_hooks._impl.BackendUnavailable: Cannot import 'setuptools.build_meta'
"""

# --------------------------------------------------------------------------- no decisive line

# https://github.com/Dao-AILab/flash-attention/issues/1921 - only the generic tail of a failed flash-attn build.
FLASH_ATTENTION_1921_GENERIC = """\
      Traceback (most recent call last):
        File "/home/fanghaotian/fanghaotian/conda/envs/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 2506, in _run_ninja_build
          subprocess.run(
        File "/home/fanghaotian/fanghaotian/conda/envs/verl/lib/python3.10/subprocess.py", line 526, in run
          raise CalledProcessError(retcode, process.args,
      subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '64']' returned non-zero exit status 1.
"""

# https://github.com/vllm-project/vllm/issues/15452 - ptxas crashed with SIGSEGV (signal 11): not an OOM kill.
VLLM_PTXAS_SIGSEGV = """\
FAILED: vllm-flash-attn/CMakeFiles/_vllm_fa3_C.dir/hopper/instantiations/flash_fwd_hdimall_fp16_paged_split_sm90.cu.o
nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)
"""

# --------------------------------------------------------------------------- cgroup counter files

# https://github.com/moby/moby/issues/14440 - memory.oom_control of a kernel without the oom_kill line (< 4.13).
MOBY_OOM_CONTROL_OLD_KERNEL = "oom_kill_disable 0\nunder_oom 0\n"
# memory.oom_control as this project's machine prints it (Linux 6.x, cgroup v1): the oom_kill counter is present.
OOM_CONTROL_NO_KILLS = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"
# memory.events (cgroup v2) in the format of docs.kernel.org/admin-guide/cgroup-v2.html; the counts are constructed.
MEMORY_EVENTS_ONE_KILL = "low 0\nhigh 0\nmax 412\noom 1\noom_kill 1\noom_group_kill 0\n"
MEMORY_EVENTS_BEFORE = "low 0\nhigh 0\nmax 97\noom 1\noom_kill 1\noom_group_kill 0\n"


# --------------------------------------------------------------------------- captured on this project's machine

# Captured verbatim by tests/integration/build_parallelism_in_container.sh (Linux 6.18, cgroup v1, Docker 20.10,
# docker run --memory 4g --memory-swap 4g): a bash step script whose python3 allocates 6 GiB, killed by the cgroup's
# OOM killer; the step's output, the container's memory.oom_control before and after, and the host's new dmesg lines.
CAPTURED_STEP_LOG = """\
/tmp/step.sh: line 1:   159 Killed                  python3 -c "x = bytes(1) * (6 << 30)"
step exit status 137
"""
CAPTURED_OOM_CONTROL_BEFORE = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"
CAPTURED_OOM_CONTROL_AFTER = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
CAPTURED_DMESG = "".join([
    "[ 1238.370608] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n",
    "[ 1238.383098] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
    "cpuset=c77074450de18ca0f9eb9cbf9853b6900ccb754e80ca5d4d932c92e306c6bcdf,mems_allowed=0,"
    "oom_memcg=/docker/c77074450de18ca0f9eb9cbf9853b6900ccb754e80ca5d4d932c92e306c6bcdf,"
    "task_memcg=/docker/c77074450de18ca0f9eb9cbf9853b6900ccb754e80ca5d4d932c92e306c6bcdf,task=python3,pid=23445,uid=0\n",
    "[ 1238.383143] Memory cgroup out of memory: Killed process 23445 (python3) total-vm:6305232kB, "
    "anon-rss:4184704kB, file-rss:5364kB, shmem-rss:0kB, UID:0 pgtables:8260kB oom_score_adj:0\n",
])


# --------------------------------------------------------------------------- OOM

@pytest.mark.parametrize("log, decisive", [
    (ONNXRUNTIME_FLASH_ATTENTION_CICC_KILLED, "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"),
    (LORAX_FLASH_ATTENTION_V2_KILLED, "Killed"),
    (TENSORRT_LLM_CICC_KILLED, "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"),
    (FILC_CC1PLUS_KILLED, "c++: fatal error: Killed signal terminated program cc1plus"),
    (GAMBIT_BUILD_LOG, "c++: internal compiler error: Killed (program cc1plus)"),
    (FLASHLIGHT_LD_KILLED, "collect2: fatal error: ld terminated with signal 9 [Killed]"),
], ids=["onnxruntime-18579", "lorax-252", "tensorrt-llm-824", "fil-c-110", "gambit-133", "flashlight-581"])
def test_oom_build_logs(log, decisive):
    verdict = bf.classify_build_failure(log)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == decisive
    assert verdict["message"].startswith("out of memory (the OOM killer stopped cicc/cc1plus; lower max_jobs): ")
    assert decisive in verdict["message"]


def test_oom_build_log_confirmed_by_its_own_dmesg():
    verdict = bf.classify_build_failure(GAMBIT_BUILD_LOG, kernel_log=GAMBIT_DMESG)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert "the kernel log confirms it: [ 1638.977956] Out of memory: Killed process 9253 (cc1plus)" \
        in verdict["message"]
    assert [e["source"] for e in verdict["evidence"]] == ["build_log", "kernel_log"]


def test_generic_flash_attn_failure_plus_kernel_kill_of_cc1plus_is_oom():
    """Joined: the generic tail of flash-attention#1921 and the dmesg of mlpack#2213 (both verbatim)."""
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, kernel_log=MLPACK_DMESG)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"].startswith("[13236.245467] Out of memory: Killed process 26958 (cc1plus)")
    assert "the kernel killed cc1plus" in verdict["message"]
    assert "returned non-zero exit status 1." in verdict["message"]


def test_generic_failure_plus_cgroup_oom_kill_is_oom():
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, cgroup_events=MEMORY_EVENTS_ONE_KILL)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == "oom_kill 1"
    assert verdict["cgroup_oom_kills"] == 1


def test_cgroup_kills_from_before_the_build_do_not_count():
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, cgroup_events=MEMORY_EVENTS_ONE_KILL,
                                        cgroup_events_before=MEMORY_EVENTS_BEFORE)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert verdict["cgroup_oom_kills"] == 0


# --------------------------------------------------------------------------- incompatibility

@pytest.mark.parametrize("log, decisive_start, label_part", [
    (VLLM_FLASH_ATTN_CXX20, "/opt/venv/.../torch/include/ATen/ATen.h:5:2: error: #error C++20 or later",
     "C++ standard"),
    (FLASHDEPTH_UNSUPPORTED_GCC, "/usr/local/cuda/include/crt/host_config.h:143:2: error: #error -- unsupported GNU",
     "host compiler is newer"),
    (VGEN_FLASH_ATTN_CUDA_MISMATCH, "The detected CUDA version (12.2) mismatches", "differs from the one torch"),
    (FLASH_ATTENTION_1759_CUDA_MISMATCH, "> The detected CUDA version (12.9) mismatches", "differs from the one torch"),
    (COLETTE_FLASH_ATTN_UNDEFINED_SYMBOL, "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda",
     "ABI"),
    (PIP_NO_SETUPTOOLS_IN_VENV, "pip._vendor.pyproject_hooks._impl.BackendUnavailable: Cannot import 'setuptools.build_meta'",
     "install setuptools into the virtualenv"),
], ids=["vllm-49260-cxx20", "flashdepth-2-gcc", "vgen-29-cuda", "flash-attention-1759-cuda", "colette-26-abi",
        "pip-25.1-no-setuptools"])
def test_incompatibility_logs(log, decisive_start, label_part):
    verdict = bf.classify_build_failure(log)
    assert verdict["cause"] == bf.CAUSE_INCOMPATIBLE
    assert verdict["decisive_line"].startswith(decisive_start)
    assert verdict["message"].startswith("a real CUDA/compiler incompatibility: " + decisive_start)
    assert label_part in verdict["message"]
    assert "lowering max_jobs will not fix this" in verdict["message"]


def test_incompatibility_wins_over_an_unrelated_kernel_kill():
    """A C++20 break with a kernel log that shows a kill but no kill in the build log: the error is the cause."""
    verdict = bf.classify_build_failure(VLLM_FLASH_ATTN_CXX20, kernel_log=MLPACK_DMESG)
    assert verdict["cause"] == bf.CAUSE_INCOMPATIBLE
    assert "an OOM kill was also seen ([13236.245467] Out of memory: Killed process 26958 (cc1plus)" \
        in verdict["message"]


# --------------------------------------------------------------------------- ordering

def test_incompatibility_first_then_kill_is_incompatible():
    """Joined: vllm#49260 then onnxruntime#18579 - the error printed first is the blocker."""
    verdict = bf.classify_build_failure(VLLM_FLASH_ATTN_CXX20 + ONNXRUNTIME_FLASH_ATTENTION_CICC_KILLED)
    assert verdict["cause"] == bf.CAUSE_INCOMPATIBLE
    assert "#error C++20" in verdict["decisive_line"]
    assert "an OOM kill was also seen (nvcc error   : 'cicc' died due to signal 9" in verdict["message"]


def test_kill_first_then_incompatibility_is_oom_with_a_note():
    """Joined: onnxruntime#18579 then vllm#49260 - the kill came first, the later error is reported as collateral."""
    verdict = bf.classify_build_failure(ONNXRUNTIME_FLASH_ATTENTION_CICC_KILLED + VLLM_FLASH_ATTN_CXX20)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"
    assert "also seen after the kill" in verdict["message"]
    assert "#error C++20" in verdict["message"]


def test_unsupported_gcc_cascade_stays_incompatible():
    """FlashDepth#2 ends in nvcc's "fatal : Could not open input file": that line must not hide the gcc error."""
    verdict = bf.classify_build_failure(FLASHDEPTH_UNSUPPORTED_GCC)
    assert [e["kind"] for e in verdict["evidence"]] == ["incompatible", "incompatible"]


# --------------------------------------------------------------------------- unknown

def test_generic_failure_alone_is_unknown_and_asks_for_evidence():
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert verdict["decisive_line"].startswith("subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '64']'")
    assert "give the kernel log or the cgroup's memory.events" in verdict["message"]


def test_ptxas_segfault_is_not_an_oom_kill():
    verdict = bf.classify_build_failure(VLLM_PTXAS_SIGSEGV, cgroup_events=OOM_CONTROL_NO_KILLS)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert verdict["decisive_line"] == "nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)"


def test_kernel_kill_of_a_non_build_process_is_not_decisive_but_mentioned():
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, kernel_log=LLAMA_CPP_JOURNAL_KILLED_NAUTILUS)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert "the kernel OOM-killed nautilus (not a build process)" in verdict["message"]


# --------------------------------------------------------------------------- parsers

def test_scan_kernel_log_names_and_build_processes():
    kills = bf.scan_kernel_log(MLPACK_DMESG + NETDATA_MEMCG_KILL + LLAMA_CPP_JOURNAL_KILLED_NAUTILUS)
    assert [(k["process"], k["build_process"]) for k in kills] == [
        ("cc1plus", True), ("netdata", False), ("nautilus", False)]


def test_scan_kernel_log_reads_the_oom_kill_task_field():
    kills = bf.scan_kernel_log(CAPTURED_DMESG)
    # The summary line and the "Killed process" line describe one kill (pid 23445): reported once.
    assert [(k["process"], k["build_process"]) for k in kills] == [("python3", False)]
    assert kills[0]["line"].startswith("[ 1238.383098] oom-kill:constraint=CONSTRAINT_MEMCG")


def test_captured_cgroup_oom_kill_of_a_build_step():
    verdict = bf.classify_build_failure(CAPTURED_STEP_LOG, kernel_log=CAPTURED_DMESG,
                                        cgroup_events=CAPTURED_OOM_CONTROL_AFTER,
                                        cgroup_events_before=CAPTURED_OOM_CONTROL_BEFORE)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == '/tmp/step.sh: line 1:   159 Killed                  python3 -c "x = bytes(1) * (6 << 30)"'
    assert verdict["cgroup_oom_kills"] == 1
    assert verdict["message"].endswith("; the cgroup counted 1 OOM kill")


def test_captured_cgroup_counter_alone_decides_when_the_log_says_nothing():
    """The same kill, with a build log that only has the generic tail of flash-attention#1921."""
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, kernel_log=CAPTURED_DMESG,
                                        cgroup_events=CAPTURED_OOM_CONTROL_AFTER,
                                        cgroup_events_before=CAPTURED_OOM_CONTROL_BEFORE)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == "oom_kill 1"


@pytest.mark.parametrize("text, expected", [
    (MOBY_OOM_CONTROL_OLD_KERNEL, (0, None)),
    (OOM_CONTROL_NO_KILLS, (0, None)),
    (MEMORY_EVENTS_ONE_KILL, (1, None)),
    ("17\n", (0, 17)),   # memory.failcnt: limit hits, not kills
])
def test_cgroup_counters(text, expected):
    assert bf.cgroup_oom_kills(text) == expected


def test_failcnt_is_reported_but_never_decides():
    verdict = bf.classify_build_failure(FLASH_ATTENTION_1921_GENERIC, cgroup_events="17\n")
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert {"source": "cgroup", "kind": "pressure", "label": "the cgroup hit its memory limit (reclaim, not "
            "necessarily a kill)", "line": "failcnt 17"} in verdict["evidence"]


def test_docker_build_prefixes_do_not_hide_a_bare_killed():
    """BuildKit prefixes every line with "#<step> <seconds>"; the legacy builder with "<seconds>"."""
    assert bf.scan_build_log("#12 5057.8 Killed\n")[0]["kind"] == "oom"
    assert bf.scan_build_log("515.6       Killed\n")[0]["kind"] == "oom"
    assert bf.scan_build_log("Killed process 5 is not a line of a build log\n") == []


def test_empty_log():
    verdict = bf.classify_build_failure("")
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert verdict["decisive_line"] is None


# =========================================================================== issue #13: OOM as real logs print it
#
# Each sample below is NEW (not one of the samples above), copied verbatim from the public thread named next to it;
# where our copy of a thread ends mid-line, the comment says so. The two inputs marked CONSTRUCTED are built from
# verbatim lines and say how. On the code before issue #13 every OOM sample here came back "unknown".

# https://github.com/ggml-org/llama.cpp/issues/13375 - a CUDA build run from VS Code's CMake Tools, which puts
# "[build] " in front of every line.
LLAMA_CPP_VSCODE_KILLED = "".join([
    "[build] Killed\n",
    "[build] [27/230] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/template-instances/"
    "fattn-mma-f16-instance-ncols1_2-ncols2_4.cu.o\n",
])
# The same thread, the next line; our copy of the thread ends mid-path here.
LLAMA_CPP_NINJA_CODE_137 = "[build] FAILED: [code=137] ggml/src/ggml-cuda/CMakeF\n"

# https://github.com/pytorch/pytorch/issues/1022 - pip OOM-killed; the progress bar ends with "\r", so the shell's
# "Killed" is glued to the end of the line. With the thread's dmesg, in the older "Kill process" wording.
PYTORCH_PIP_KILLED_AFTER_PROGRESS_BAR = (
    "    99% |████████████████████████████████| 360.3MB 32.1MB/s eta 0:00:01Killed\n")
PYTORCH_PIP_DMESG = "".join([
    "[326093.958653] Out of memory: Kill process 14093 (pip) score 452 or sacrifice child\n",
    "[326093.958669] Killed process 14093 (pip) total-vm:5029612kB, anon-rss:4217296kB, file-rss:4kB\n",
])

# https://github.com/microsoft/SynapseVSCode/issues/54 - BuildKit's verdict when a RUN step runs out of memory.
SYNAPSE_BUILDKIT_RESOURCE_EXHAUSTED = (
    'ERROR: failed to solve: ResourceExhausted: process "/bin/sh -c conda install -c conda-forge '
    'pyspark==$SPARK_VERSION" did not complete successfully: cannot allocate memory\n')

# https://github.com/simstudioai/sim/issues/1360 - docker build on a 16 GB Mac: the step is SIGKILLed, then
# BuildKit's ResourceExhausted verdict (legacy-style "99.66 " elapsed-time prefixes).
SIM_BUILDKIT_SIGKILL_THEN_RESOURCE_EXHAUSTED = "".join([
    '99.66 docs:build: error: script "build" was terminated by signal SIGKILL (Forced quit)\n',
    '100.1 sim:build: error: script "build" exited with code 130\n',
    "100.2   x Internal errors encountered: external process killed a task\n",
    "100.2 \n",
    '100.3 error: script "build" exited with code 1\n',
    "------\n",
    "app.Dockerfile:46\n",
    "\n",
    "--------------------\n",
    "\n",
    "  44 |     \n",
    "\n",
    "  45 |     WORKDIR /app\n",
    "\n",
    "  46 | >>> RUN bun run build\n",
    "\n",
    "  47 |     \n",
    "\n",
    "  48 |     # ========================================\n",
    "\n",
    "--------------------\n",
    "\n",
    'target simstudio: failed to solve: ResourceExhausted: process "/bin/sh -c bun run build" did not complete '
    "successfully: cannot allocate memory\n",
])

# https://github.com/vllm-project/vllm/issues/2175 - vLLM's CUDA extension built with BuildKit: the CUDA front end
# itself reports the allocation failure (the maintainer asks about CPU memory in the same thread).
VLLM_BUILDKIT_CATASTROPHIC_OOM = "".join([
    "#26 98.16 /usr/local/lib/python3.10/dist-packages/torch/include/c10/util/StringUtil.h(68): catastrophic error: "
    "out of memory\n",
    "#26 98.16     return _str(_str(ss, t), args...);\n",
    "#26 98.16            ^\n",
    "#26 98.16           detected during:\n",
])

# https://github.com/huggingface/transfer-learning-conv-ai/issues/66 - the legacy docker builder's exit-137 line.
LEGACY_DOCKER_BUILD_CODE_137 = (
    "The command '/bin/sh -c pip3 install -r /tmp/requirements.txt' returned a non-zero code: 137\n")

# https://github.com/parthenon-hpc-lab/parthenon/pull/1162 - make's report of a SIGKILLed compiler (the PR says the
# compiler was OOM killed); the line after the thread's "Killed".
PARTHENON_MAKE_ERROR_137 = ("\tgmake[2]: *** [vtkm/filter/flow/CMakeFiles/vtkm_filter_flow.dir/build.make:163: "
                            "vtkm/filter/flow/CMakeFiles/vtkm_filter_flow.dir/FilterParticleAdvectionUnsteadyState."
                            "cxx.o] Error 137\n")

# https://github.com/wulabing/V2Ray_ws-tls_bash_onekey/issues/6 - gcc in a zh_CN locale on a small VPS.
GCC_ZH_CN_KILLED = "".join([
    "{standard input}: Assembler messages:\n",
    "{standard input}:24108: 警告：end of file not at end of a line; newline inserted\n",
    "{standard input}:24109: 错误：expected symbol name\n",
    "{standard input}: 错误：open CFI at the end of file; missing .cfi_endproc directive\n",
    "gcc: 致命错误：已杀死 signal terminated program cc1\n",
    "编译中断。\n",
    "make: *** [Makefile:390：src/jemalloc.sym.o] 错误 1\n",
    "make: *** 正在等待未完成的任务....\n",
])

# https://github.com/mistralai/mistral-inference/issues/99 - BuildKit "#10 4604.5 " prefix and pip's indentation
# in front of a bare "Killed" (this form already worked; kept so that it keeps working).
MISTRAL_BUILDKIT_KILLED = "".join([
    "#10 4604.5   Killed\n",
    "#10 4773.3   [6/10] /usr/local/cuda/bin/nvcc  -I/tmp/pip-bu\n",
])

# CONSTRUCTED: the lorax#252 lines above joined with spaces instead of newlines, as a log looks when it is pasted
# into a form that drops newlines.
LORAX_FLATTENED = " ".join(LORAX_FLASH_ATTENTION_V2_KILLED.splitlines())
# CONSTRUCTED: the "DEBUG " level prefix a verbose installer writes in front of a build backend's output lines.
DEBUG_PREFIXED_KILLED = "DEBUG [3/49] /opt/conda/bin/nvcc ...\nDEBUG Killed\nDEBUG ninja: build stopped: subcommand failed.\n"

# --------------------------------------------------------------------------- real incompatibilities, new samples

# https://github.com/cresset-template/cresset/issues/13 - PyTorch's NCCL built with BuildKit for an architecture the
# toolkit does not know; make's "Error 1" lines follow.
CRESSET_BUILDKIT_UNSUPPORTED_ARCH = "".join([
    "#24 23.05 make[2]: Entering directory '/opt/pytorch/third_party/nccl/nccl/src/collectives/device'\n",
    "#24 23.05 Generating rules                               > /opt/pytorch/build/nccl/obj/collectives/device/"
    "Makefile.rules\n",
    "#24 23.05 nvcc fatal   : Unsupported gpu architecture 'compute_80'\n",
    "#24 23.05 nvcc fatal   : Unsupported gpu architecture 'compute_80'\n",
    "#24 23.05 Makefile:52: recipe for target '/opt/pytorch/build/nccl/obj/collectives/device/sendrecv.dep' failed\n",
    "#24 23.05 make[2]: *** [/opt/pytorch/build/nccl/obj/collectives/device/sendrecv.dep] Error 1\n",
    "#24 23.05 make[2]: *** Waiting for unfinished jobs....\n",
])

# https://github.com/NVlabs/FoundationPose/issues/19 - pip-indented ninja output, the next job's "[7/38]" after it.
FOUNDATIONPOSE_UNSUPPORTED_ARCH = "".join([
    "    nvcc fatal   : Unsupported gpu architecture 'compute_89'\n",
    "    [7/38] /usr/local/cuda/bin/nvcc  -DWITH_CUDA -DTHRUST_IGNORE_CUB_VERSION_CHECK -I/opt/conda/envs/my/lib/"
    "python3.8/site-packages/torch/include\n",
])

# --------------------------------------------------------------------------- no evidence, new samples

# https://github.com/container2wasm/container2wasm/issues/280 - "cannot allocate memory" from creating a veth pair,
# not from a process running out of memory: no ResourceExhausted, so not an OOM verdict.
C2W_VETH_CANNOT_ALLOCATE = (
    'ERROR: failed to solve: process "/bin/sh -c apt-get update && apt-get install -y build-essential" did not '
    "complete successfully: failed to create endpoint vh6aabslshu1ylmqye2xv1xk8 on network bridge: failed to add the "
    "host (veth29ccddf) <=> sandbox (veth73bd838) pair interfaces: cannot allocate memory\n")

# https://github.com/NVlabs/tiny-cuda-nn/issues/384 - a traceback pasted with its newlines lost, and no kill in it.
TCNN_FLATTENED_TRACEBACK = (
    'nvs/h2mapping/lib/python3.8/site-packages/setuptools/dist.py", line 989, in run_command '
    'super().run_command(command) File "/home/robot/anaconda3/envs/h2mapping/lib/python3.8/site-packages/setuptools/'
    '_distutils/dist.py", line 988, in run_command cmd_obj.run() File "/home/robot/anaconda3/envs/h2mapping/lib/'
    'python3.8/site-packages/setuptools/command/build_ext.py", line 88, in run _build_ext.run(self)\n')


@pytest.mark.parametrize("log, decisive", [
    (LLAMA_CPP_VSCODE_KILLED, "[build] Killed"),
    (LLAMA_CPP_NINJA_CODE_137, "[build] FAILED: [code=137] ggml/src/ggml-cuda/CMakeF"),
    (PYTORCH_PIP_KILLED_AFTER_PROGRESS_BAR, PYTORCH_PIP_KILLED_AFTER_PROGRESS_BAR.strip()),
    (SYNAPSE_BUILDKIT_RESOURCE_EXHAUSTED, SYNAPSE_BUILDKIT_RESOURCE_EXHAUSTED.strip()),
    (SIM_BUILDKIT_SIGKILL_THEN_RESOURCE_EXHAUSTED,
     '99.66 docs:build: error: script "build" was terminated by signal SIGKILL (Forced quit)'),
    (VLLM_BUILDKIT_CATASTROPHIC_OOM, VLLM_BUILDKIT_CATASTROPHIC_OOM.splitlines()[0]),
    (LEGACY_DOCKER_BUILD_CODE_137, LEGACY_DOCKER_BUILD_CODE_137.strip()),
    (PARTHENON_MAKE_ERROR_137, PARTHENON_MAKE_ERROR_137.strip()),
    (GCC_ZH_CN_KILLED, "gcc: 致命错误：已杀死 signal terminated program cc1"),
    (DEBUG_PREFIXED_KILLED, "DEBUG Killed"),
], ids=["llama.cpp-13375-vscode-prefix", "llama.cpp-13375-ninja-code-137", "pytorch-1022-glued-to-progress-bar",
        "synapse-54-resource-exhausted", "sim-1360-sigkill", "vllm-2175-catastrophic-oom", "transfer-learning-66-137",
        "parthenon-1162-make-error-137", "v2ray-6-gcc-zh-cn", "constructed-debug"])
def test_oom_as_real_logs_print_it(log, decisive):
    verdict = bf.classify_build_failure(log)
    assert verdict["cause"] == bf.CAUSE_OOM, verdict["message"]
    assert verdict["decisive_line"] == decisive
    assert verdict["message"].startswith(bf.OOM_MESSAGE + ": " + decisive)


def test_flattened_log_is_oom_and_the_message_quotes_the_part_around_the_kill():
    verdict = bf.classify_build_failure(LORAX_FLATTENED)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert verdict["decisive_line"] == LORAX_FLATTENED.strip()
    assert "-D_GLIBCXX_USE_CXX11_ABI=0 Killed [3/49] /opt/conda/bin/nvcc" in verdict["message"]
    assert "(the shell reports a child killed by SIGKILL (its newline was lost))" in verdict["message"]
    assert len(verdict["message"]) < len(LORAX_FLATTENED)


def test_buildkit_prefixed_killed_keeps_working():
    verdict = bf.classify_build_failure(MISTRAL_BUILDKIT_KILLED)
    assert (verdict["cause"], verdict["decisive_line"]) == (bf.CAUSE_OOM, "#10 4604.5   Killed")


def test_glued_killed_confirmed_by_the_old_kernel_wording():
    verdict = bf.classify_build_failure(PYTORCH_PIP_KILLED_AFTER_PROGRESS_BAR, kernel_log=PYTORCH_PIP_DMESG)
    assert verdict["cause"] == bf.CAUSE_OOM
    assert "the kernel log confirms it: [326093.958653] Out of memory: Kill process 14093 (pip)" in verdict["message"]
    # The "Killed process" line of the same kill is not reported twice, and is no build-log "Killed" either.
    assert [e["source"] for e in verdict["evidence"]] == ["build_log", "kernel_log"]


@pytest.mark.parametrize("line", [
    "Killed process 5 is not a line of a build log",
    "[326093.958669] Killed process 14093 (pip) total-vm:5029612kB, anon-rss:4217296kB, file-rss:4kB",
    "nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)",
    "c++: fatal error: Segmentation fault signal terminated program cc1plus",
    "#24 23.05 make[2]: *** [/opt/pytorch/build/nccl/obj/collectives/device/sendrecv.dep] Error 1",
    "ninja: build stopped: subcommand failed.",
])
def test_lines_that_are_not_an_oom_kill(line):
    """A kernel "Killed process" line, another signal, another exit code: none of them is an OOM verdict."""
    assert [f["kind"] for f in bf.scan_build_log(line)] in ([], ["incompatible"])


@pytest.mark.parametrize("log, decisive, label_part", [
    (CRESSET_BUILDKIT_UNSUPPORTED_ARCH, "#24 23.05 nvcc fatal   : Unsupported gpu architecture 'compute_80'",
     "does not know a requested GPU architecture"),
    (FOUNDATIONPOSE_UNSUPPORTED_ARCH, "nvcc fatal   : Unsupported gpu architecture 'compute_89'",
     "does not know a requested GPU architecture"),
], ids=["cresset-13-buildkit", "foundationpose-19-pip-indented"])
def test_prefixed_incompatibility_is_not_called_oom(log, decisive, label_part):
    verdict = bf.classify_build_failure(log)
    assert verdict["cause"] == bf.CAUSE_INCOMPATIBLE
    assert verdict["decisive_line"] == decisive
    assert label_part in verdict["message"]
    assert not any(e["kind"] == "oom" for e in verdict["evidence"])


@pytest.mark.parametrize("log", [C2W_VETH_CANNOT_ALLOCATE, TCNN_FLATTENED_TRACEBACK],
                         ids=["c2w-280-veth-enomem", "tcnn-384-flattened-traceback"])
def test_no_evidence_stays_unknown_and_says_what_to_collect(log):
    verdict = bf.classify_build_failure(log)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    message = verdict["message"]
    assert "'dmesg' or 'journalctl -k'" in message and "'oom-kill:'" in message
    for counter in ("memory.events", "memory.oom_control", "memory.max_usage_in_bytes", "memory.failcnt"):
        assert counter in message


def test_unknown_asks_only_for_what_was_not_given():
    verdict = bf.classify_build_failure(C2W_VETH_CANNOT_ALLOCATE, kernel_log=NETDATA_MEMCG_KILL)
    assert verdict["cause"] == bf.CAUSE_UNKNOWN
    assert verdict["decisive_line"] == C2W_VETH_CANNOT_ALLOCATE.strip()
    assert "journalctl -k" not in verdict["message"]
    assert "memory.max_usage_in_bytes" in verdict["message"]
    verdict = bf.classify_build_failure(C2W_VETH_CANNOT_ALLOCATE, kernel_log="", cgroup_events=OOM_CONTROL_NO_KILLS)
    assert "to tell an OOM kill apart" not in verdict["message"]


@pytest.mark.parametrize("line, bare", [
    ("#10 4604.5   Killed", "Killed"),
    ("[build] FAILED: [code=137] x.o", "FAILED: [code=137] x.o"),
    ("2024-05-01T12:00:00.1234567Z #5 12.3 DEBUG Killed", "Killed"),
    ("\x1b[0m#12 5057.8 Killed", "Killed"),
    ("> The detected CUDA version (12.9) mismatches", "The detected CUDA version (12.9) mismatches"),
    ("[3/49] /opt/conda/bin/nvcc", "[3/49] /opt/conda/bin/nvcc"),
])
def test_strip_line_prefix(line, bare):
    assert bf.strip_line_prefix(line) == bare
