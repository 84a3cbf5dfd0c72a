# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator runs on the GPUs the NVIDIA driver stand-in shows it (a GPU kit) and refuses what SGLang and torch
refuse: no CUDA device, a rank beyond the visible GPUs, weights that do not fit the memory other processes left."""
from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import (
    A6000_MIB, H200_MIB, READY_LINE, SIM_SOURCE, SPEC_ARGS, run_cli, wait_gone)
from sglang_sim import cuda, memory

NO_ACCELERATOR = "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available."
INVALID_ORDINAL = """torch.AcceleratorError: CUDA error: invalid device ordinal
GPU device may be out of range, do you have enough GPUs?
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."
# torch's OutOfMemoryError (c10/cuda/CUDACachingAllocator.cpp), sizes as its format_size writes them.
SIZE = r"\d+\.\d\d (?:GiB|MiB|KiB)|\d+ bytes"
OOM_RE = re.compile(
    r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<tried>%(size)s)\. GPU (?P<gpu>\d) has a total "
    r"capacity of (?P<total>%(size)s) of which (?P<free>%(size)s) is free\. (?P<others>(?:Process \d+ has (?:%(size)s) memory "
    r"in use\. )*)Including non-PyTorch memory, this process has (?:%(size)s) memory in use\. Of the allocated memory "
    r"(?:%(size)s) is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated\. If reserved but unallocated "
    r"memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\.  See "
    r"documentation for Memory Management  \(https://pytorch\.org/docs/stable/notes/cuda\.html#environment-variables\)$"
    % {"size": SIZE}, re.M)
COMPUTE_APPS = ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"]


def wait_for(predicate, what, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def compute_apps(kit):
    """nvidia-smi --query-compute-apps as rows (pid, process_name, used MiB, GPU UUID)."""
    code, out = kit.nvidia_smi(COMPUTE_APPS)
    assert code == 0, out
    return [(int(pid), name, int(used), uuid) for pid, name, used, uuid in
            (line.split(", ") for line in out.splitlines() if line.strip())]


def ranks(sim):
    """{tp rank: pid} of a run's scheduler children."""
    return {int(cmdline.rsplit("TP", 1)[1]): pid for pid, (_comm, cmdline) in sim.children().items()
            if cmdline.startswith("sglang::scheduler_TP")}


def logged_gb(log, tag, prefix):
    match = re.search(r"^\[[^\]]* %s\] %s avail mem=(\d+\.\d\d) GB" % (tag, re.escape(prefix)), log, re.M)
    assert match, "no %s line of %s:\n%s" % (prefix, tag, log[-3000:])
    return float(match.group(1))


# ---- no CUDA device: SGLang's get_device refuses at resolution ------------------------------------------------------
@pytest.mark.parametrize("kit_options, env", [
    (None, {}),
    ({"missing_nodes": ("nvidiactl",)}, {}),
    ({"missing_nodes": ("nvidia0", "nvidia1")}, {}),
    ({}, {"CUDA_VISIBLE_DEVICES": ""}),
], ids=["no-driver", "no-nvidiactl", "no-gpu-node", "cuda-visible-devices-empty"])
def test_without_a_cuda_device_the_server_refuses_to_start(make_gpu_kit, tmp_path, kit_options, env):
    driver = {"SGLANG_SIM_NVIDIA_STANDIN_DIR": str(tmp_path / "no-driver-here")} if kit_options is None else \
        make_gpu_kit(**kit_options).env()
    result = run_cli(["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2"], **dict(driver, **env))
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.rstrip().splitlines()[-1] == NO_ACCELERATOR
    assert "Traceback (most recent call last):" in result.stderr and "in get_device" in result.stderr
    assert "server_args=" not in result.stderr, "SGLang resolves before it logs server_args"


def test_an_explicit_cuda_device_without_a_gpu_fails_in_the_scheduler(tmp_path):
    # get_device runs only for an unset --device; with --device cuda torch's own lazy init refuses in set_device.
    result = run_cli(["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", "--device", "cuda"],
                     SGLANG_SIM_NVIDIA_STANDIN_DIR=str(tmp_path / "no-driver-here"), SGLANG_SIM_STARTUP_SECONDS="0.3")
    assert result.returncode == -signal.SIGKILL
    assert "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed " \
           "a driver from http://www.nvidia.com/Download/index.aspx" in result.stderr
    assert "    torch._C._cuda_init()" in result.stderr and SIGQUIT_LINE in result.stderr


def test_a_device_other_than_cuda_is_not_simulated():
    result = run_cli(["--model-path", "Qwen/Qwen3.6-27B", "--device", "cpu"])
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith("NotSimulatedError: sglang-sim simulates CUDA devices only, not --device cpu")


# ---- one GPU per rank ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kit_options, visible", [
    ({"missing_nodes": ("nvidia1",)}, None),
    ({}, "1"),
], ids=["second-node-not-passed-in", "cuda-visible-devices-1"])
def test_tp2_with_one_usable_gpu_fails_rank1_with_invalid_device_ordinal(start_sim, make_gpu_kit, kit_options, visible):
    kit = make_gpu_kit(**kit_options)
    env = dict(kit.env(), **({"CUDA_VISIBLE_DEVICES": visible} if visible else {}))
    sim = start_sim(["--tp-size", "2"] + SPEC_ARGS, **env)
    assert sim.proc.wait(timeout=15) == -signal.SIGKILL
    log = sim.log()
    assert re.search(r"^\[[^\]]+ TP1\] Context: device=cuda gpu_id=1 CUDA_VISIBLE_DEVICES=%s tp_rank=1$" % visible, log, re.M)
    assert re.search(r"^\[[^\]]+ TP1\] Scheduler hit an exception: Traceback \(most recent call last\):$", log, re.M)
    assert ('  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/bootstrap.py", line 133, in '
            'init_parallel_runtime\n    torch.get_device_module(device).set_device(get_device().gpu_id)\n  File "/usr/local/lib/'
            'python3.12/dist-packages/torch/cuda/__init__.py", line 567, in set_device\n    torch._C._cuda_setDevice(device)\n'
            + INVALID_ORDINAL) in log
    assert re.search(r"^\[[^\]]+\] " + re.escape(SIGQUIT_LINE) + "$", log, re.M)
    assert READY_LINE not in log
    # Rank 0's context died with it.
    wait_for(lambda: not compute_apps(kit), "the GPU memory to be free again")


def test_cuda_visible_devices_1_puts_tp1_on_the_second_gpu(start_sim, make_gpu_kit):
    kit = make_gpu_kit(memory_mib=H200_MIB, name="NVIDIA H200")
    sim = start_sim([], CUDA_VISIBLE_DEVICES="1", **kit.env())
    sim.wait_ready()
    (rank0,) = ranks(sim).values()
    assert not kit.live(0)
    (held,) = kit.live(1)
    assert (held["pid"], held["process_name"], held["gpu_uuid"]) == (rank0, "sglang::scheduler_TP0", kit.gpu(1).uuid)
    # The rank holds the second GPU's node, as CUDA holds /dev/nvidia1 for its device 0 here.
    held_nodes = {os.stat("/proc/%d/fd/%s" % (rank0, fd)).st_rdev for fd in os.listdir("/proc/%d/fd" % rank0)}
    assert kit.node_rdev("nvidia1") in held_nodes and kit.node_rdev("nvidia0") not in held_nodes


# ---- a running rank holds its GPU ----------------------------------------------------------------------------------
def test_running_ranks_hold_their_device_nodes_and_memory_until_they_stop(start_sim, gpu_kit):
    sim = start_sim(["--tp-size", "2"] + SPEC_ARGS)
    sim.wait_ready()
    pids = ranks(sim)
    log = sim.log()
    for rank, pid in pids.items():
        # As service_provenance finds GPU holders: the fds of /proc/PID/fd whose target is an NVIDIA node.
        targets = {os.readlink("/proc/%d/fd/%s" % (pid, fd)): os.stat("/proc/%d/fd/%s" % (pid, fd)).st_rdev
                   for fd in os.listdir("/proc/%d/fd" % pid)}
        nodes = {os.path.basename(path): rdev for path, rdev in targets.items() if path.startswith(gpu_kit.dev_dir + "/")}
        assert nodes == {name: gpu_kit.node_rdev(name) for name in ("nvidiactl", "nvidia-uvm", "nvidia%d" % rank)}
        # The ledger holds what the log says the rank took: the CUDA context and load to pools.
        (held,) = gpu_kit.live(rank)
        assert held["pid"] == pid and held["process_name"] == "sglang::scheduler_TP%d" % rank
        used_gb = 1.0 + logged_gb(log, "TP%d" % rank, "Load weight begin.") - logged_gb(log, "TP%d" % rank, "Memory pool end.")
        assert abs(held["used_mib"] / 1024.0 - used_gb) < 0.011, (held, used_gb)
    assert sorted((pid, name) for pid, name, _used, _uuid in compute_apps(gpu_kit)) == sorted(
        (pid, "sglang::scheduler_TP%d" % rank) for rank, pid in pids.items())
    detokenizer = [pid for pid, (_comm, cmdline) in sim.children().items() if cmdline == "sglang::detokenizer"]
    assert not [fd for fd in os.listdir("/proc/%d/fd" % detokenizer[0])
                if os.readlink("/proc/%d/fd/%s" % (detokenizer[0], fd)).startswith(gpu_kit.dev_dir)]
    sim.proc.send_signal(signal.SIGTERM)
    sim.proc.wait(timeout=15)
    wait_for(lambda: not compute_apps(gpu_kit), "the ranks' memory to be freed")
    code, out = gpu_kit.nvidia_smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits"])
    assert (code, out) == (0, "0\n0\n")


def test_a_second_server_on_busy_gpus_fails_with_torchs_oom_and_starts_once_they_are_free(start_sim, gpu_kit):
    first = start_sim(["--tp-size", "2"] + SPEC_ARGS)
    first.wait_ready()
    first_ranks = ranks(first)
    held = {rank: gpu_kit.live(rank)[0]["used_mib"] for rank in first_ranks}
    second = start_sim(["--tp-size", "2"] + SPEC_ARGS)
    assert second.proc.wait(timeout=15) == -signal.SIGKILL
    log = second.log()
    # SGLang measures the memory free when it starts: what the first server left, less this rank's CUDA context (the
    # first rank to fail takes the other down, which may not get that far).
    measured = re.findall(r"^\[[^\]]* TP(\d)\] Load weight begin\. avail mem=(\d+\.\d\d) GB$", log, re.M)
    assert measured
    for rank, avail in measured:
        assert float(avail) == round((A6000_MIB - held[int(rank)] - 1024) / 1024.0, 2)
    failures = list(OOM_RE.finditer(log))
    assert failures, log[-3000:]
    for failure in failures:
        gpu = int(failure.group("gpu"))
        # The weights do not fit; torch names the process that holds the rest of that GPU: the first server's rank.
        assert failure.group("tried") == "170.00 MiB" and failure.group("total") == "47.99 GiB"
        assert failure.group("others") == "Process %d has %.2f GiB memory in use. " % (first_ranks[gpu], held[gpu] / 1024.0)
    assert "model = model_class(**kwargs)" in log and SIGQUIT_LINE in log and READY_LINE not in log
    assert first.proc.poll() is None, "the first server is not disturbed"
    first_children = list(first.children())
    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(timeout=15)
    assert wait_gone(first_children)
    wait_for(lambda: not compute_apps(gpu_kit), "the first server's memory to be freed")
    third = start_sim(["--tp-size", "2"] + SPEC_ARGS)
    third.wait_ready()
    assert logged_gb(third.log(), "TP0", "Load weight begin.") == 46.99


@pytest.mark.parametrize("check", ["", "false"], ids=["check-on-by-default", "check-off"])
def test_ranks_that_see_different_free_memory(start_sim, gpu_kit, check):
    # Another process holds 6000 MiB of GPU 1: TP1 sees less free memory than TP0.
    driver = gpu_kit.driver()
    other = driver.allocate(driver.gpus()[1], 6000, "python3")
    try:
        env = {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": check} if check else {}
        sim = start_sim(["--tp-size", "2"] + SPEC_ARGS, **env)
        pre, local = (49140 - 6000 - 1024) / 1024.0, (49140 - 1024) / 1024.0
        message = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                   "pre_model_load_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r" % (pre, local, local * 0.9))
        if not check:
            # environ.py: SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK defaults to True in 0.5.23: TP0 raises.
            assert sim.proc.wait(timeout=15) == -signal.SIGKILL
            assert "\nRuntimeError: " + message + "\n" in sim.log()
            assert "_check_tp_memory_balance" in sim.log()
            return
        sim.wait_ready()
        log = sim.log()
        assert re.search(r"^\[[^\]]+ TP0\] " + re.escape(message) + "$", log, re.M)
        assert "TP1] The memory capacity is unbalanced" not in log
        # Both ranks size their pools from the smaller figure; each logs its own free memory.
        assert (logged_gb(log, "TP0", "Load weight begin."), logged_gb(log, "TP1", "Load weight begin.")) == (46.99, 41.13)
        planned = memory.plan(plan_args_of(log), A6000_MIB / 1024.0, 6000 / 1024.0)
        assert "max_total_num_tokens=%d," % planned["kv_tokens"] in log
        assert planned["kv_tokens"] < memory.plan(plan_args_of(log), A6000_MIB / 1024.0)["kv_tokens"]
    finally:
        other.release()


def plan_args_of(log):
    """The plan's inputs from the server_args line."""
    line = next(line for line in log.splitlines() if "] server_args=" in line)
    args = ast.literal_eval(line.split("server_args=", 1)[1])
    return {key: args[key] for key in ("tp_size", "mem_fraction_static", "max_running_requests", "mamba_full_memory_ratio",
                                       "speculative_algorithm", "speculative_num_draft_tokens", "max_mamba_cache_size",
                                       "mamba_radix_cache_strategy", "disable_overlap_schedule", "cuda_graph_max_bs_decode",
                                       "chunked_prefill_size", "max_total_tokens", "mamba_ssm_dtype")}


def test_a_gpu_without_room_for_the_cuda_context_fails_set_device(start_sim, make_gpu_kit):
    # One rank (TP 1 on an H200): with two, the other rank could fail first on the memory imbalance.
    kit = make_gpu_kit(memory_mib=H200_MIB, name="NVIDIA H200")
    driver = kit.driver()
    other = driver.allocate(driver.gpus()[0], H200_MIB - 512, "python3")
    try:
        sim = start_sim([], **kit.env())
        assert sim.proc.wait(timeout=15) == -signal.SIGKILL
        log = sim.log()
        assert re.search(r"^\[[^\]]+\] Context: device=cuda gpu_id=0 CUDA_VISIBLE_DEVICES=None tp_rank=0$", log, re.M)
        assert "    torch._C._cuda_setDevice(device)\ntorch.AcceleratorError: CUDA error: out of memory\nCUDA kernel errors" in log
        assert "Load weight begin" not in log
    finally:
        other.release()


# ---- the memory figures ---------------------------------------------------------------------------------------------
def test_the_figures_for_an_empty_a6000_are_unchanged_and_others_memory_lowers_them():
    args = {"tp_size": 2, "mem_fraction_static": None, "max_running_requests": 16, "mamba_full_memory_ratio": 0.5,
            "speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4, "max_mamba_cache_size": None,
            "mamba_radix_cache_strategy": "extra_buffer", "disable_overlap_schedule": False, "cuda_graph_max_bs_decode": None,
            "chunked_prefill_size": None, "max_total_tokens": None, "mamba_ssm_dtype": None}
    empty = memory.plan(args, A6000_MIB / 1024.0)
    assert empty == memory.plan(args, A6000_MIB / 1024.0, 0.0)
    assert (round(empty["pre_gb"], 2), empty["mamba_size"], empty["max_running_requests"]) == (46.99, 18, 3)
    busy = memory.plan(args, A6000_MIB / 1024.0, 2.0)
    assert round(empty["pre_gb"] - busy["pre_gb"], 9) == 2.0
    assert busy["mamba_size"] < empty["mamba_size"] and busy["kv_tokens"] < empty["kv_tokens"]


def test_nvidia_smi_capacity_is_the_smallest_card_whatever_cuda_visible_devices_says(gpu_kit, make_gpu_kit):
    assert cuda.Cuda.load(gpu_kit.env()).memory_capacity_mib() == A6000_MIB
    assert cuda.Cuda.load(dict(gpu_kit.env(), CUDA_VISIBLE_DEVICES="1")).memory_capacity_mib() == A6000_MIB
    big = make_gpu_kit(memory_mib=H200_MIB)
    assert cuda.Cuda.load(big.env()).memory_capacity_mib() == H200_MIB
    assert [gpu.uuid for gpu in cuda.Cuda.load(dict(big.env(), CUDA_VISIBLE_DEVICES="1,0")).devices()] == [
        big.gpu(1).uuid, big.gpu(0).uuid]


# ---- the sglang stand-in behind roles/sglang's flag validator -------------------------------------------------------
STANDIN = os.path.join(SIM_SOURCE, "..", "standins", "sglang_standin")
RESOLVE = ("import json, sys; from sglang.srt.server_args import prepare_server_args; args = prepare_server_args(sys.argv[1:]); "
           "values = args.resolved_dict(); print(json.dumps({key: values[key] for key in "
           "('device', 'chunked_prefill_size', 'mem_fraction_static')}))")


@pytest.mark.parametrize("driver, chunked", [(None, 4096), ("a6000", 4096), ("h200", 8192)])
def test_the_sglang_standin_resolves_as_on_a_cuda_device_with_the_drivers_gpu_size(make_gpu_kit, tmp_path, driver, chunked):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STANDIN, SIM_SOURCE]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if driver is None:
        env["SGLANG_SIM_NVIDIA_STANDIN_DIR"] = str(tmp_path / "no-driver-here")
    else:
        env.update(make_gpu_kit(memory_mib=H200_MIB if driver == "h200" else A6000_MIB).env())
    run = subprocess.run([sys.executable, "-c", RESOLVE, "--model-path", "/models/Qwen3.6-27B", "--tp-size", "2"],
                         capture_output=True, text=True, timeout=60, check=False, env=env, cwd="/")
    assert run.returncode == 0, run.stderr
    resolved = json.loads(run.stdout)
    assert resolved["device"] == "cuda" and resolved["chunked_prefill_size"] == chunked
    # memory_hook.py's fraction for the GPU size nvidia-smi reports (an RTX A6000's without a driver).
    assert resolved["mem_fraction_static"] == memory.default_mem_fraction(
        H200_MIB if driver == "h200" else A6000_MIB, 2, chunked, memory.defaults_for_gpu(
            H200_MIB if driver == "h200" else A6000_MIB, 2)[1])
