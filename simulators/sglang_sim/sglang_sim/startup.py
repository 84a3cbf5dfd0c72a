# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a scheduler rank prints while it "loads" the model on its GPU, and what it can die of.

Line shapes follow SGLang (public logs, e.g. https://github.com/kvcache-ai/ktransformers/issues/1870 for the
Load weight / Mamba Cache / KV Cache / max_total_num_tokens lines); the figures are SGLang's arithmetic
(sglang_sim/memory.py) on the memory the rank's GPU has free (sglang_sim/cuda.py: the driver stand-in's ledger), which
the rank takes as it goes: the CUDA context at torch.cuda.set_device, then the weights, then the pools.
"""
from __future__ import annotations

import math
import os
import signal
import time

from sglang_sim import cuda as cuda_mod, logfmt, memory, multinode

ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
DRAFT_ARCHITECTURE = "Qwen3_5ForCausalLMMTP"

# Fractions of the startup time at which each phase ends (the rest is warm-up in the launcher).
PHASES = {"dist": 0.06, "weights": 0.5, "pools": 0.58, "graphs": 0.8, "ready": 0.84}


def memory_plan(args: dict, gpu_memory_gb: float = memory.DEFAULT_GPU_MEMORY_GB, used_by_others_gb: float = 0.0) -> dict:
    """The pools of one rank (sglang_sim/memory.py: SGLang 0.5.23's arithmetic for the simulated model and GPU)."""
    return memory.plan(args, gpu_memory_gb, used_by_others_gb)


def _srt(path, line, function, code):
    return ("%s/sglang/srt/%s" % (multinode.SITE, path), line, function, code)


# Frames of the 0.5.23 wheel (sglang/srt/...) down to where torch raises; torch's own frames come with the error.
SET_DEVICE_FRAMES = multinode.INIT_FRAMES + [
    _srt("distributed/bootstrap.py", 133, "init_parallel_runtime", "torch.get_device_module(device).set_device(get_device().gpu_id)"),
]
MODEL_RUNNER_FRAMES = [
    _srt("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    _srt("managers/scheduler.py", 568, "__init__", "self.init_model_worker()"),
    _srt("managers/scheduler.py", 1130, "init_model_worker", "self.init_tp_model_worker()"),
    _srt("managers/scheduler.py", 1033, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
    _srt("managers/tp_worker.py", 319, "__init__", "self._init_model_runner()"),
    _srt("managers/tp_worker.py", 487, "_init_model_runner", "self._model_runner = ModelRunner("),
]
BALANCE_FRAMES = MODEL_RUNNER_FRAMES + [
    _srt("model_executor/model_runner.py", 466, "__init__", "self.init_torch_distributed()"),
    _srt("model_executor/model_runner.py", 1262, "init_torch_distributed",
         "self.pre_model_load_memory = bootstrap.measure_pre_model_load_memory("),
    _srt("distributed/bootstrap.py", 215, "measure_pre_model_load_memory", "_check_tp_memory_balance("),
    _srt("distributed/bootstrap.py", 450, "_check_tp_memory_balance", "raise RuntimeError(msg)"),
]
# Illustrative below load_model: the model's parameters are created on the GPU layer by layer.
WEIGHT_FRAMES = MODEL_RUNNER_FRAMES + [
    _srt("model_executor/model_runner.py", 499, "__init__", "self.initialize()"),
    _srt("model_executor/model_runner.py", 715, "initialize", "self.load_model()"),
    _srt("model_executor/model_runner.py", 1312, "load_model", "loaded = load_model_with_memory_saver("),
    _srt("model_executor/model_runner_components/load_model_utils.py", 346, "load_model_with_memory_saver",
         "model = loader.load_model("),
    _srt("model_loader/loader.py", 1014, "load_model", "model = _initialize_model("),
    _srt("model_loader/loader.py", 309, "_initialize_model", "model = model_class(**kwargs)"),
    _srt("layers/linear.py", 494, "__init__", "self.quant_method.create_weights("),
    _srt("layers/quantization/unquant.py", 557, "create_weights", "torch.empty("),
]
POOL_FRAMES = [
    _srt("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    _srt("managers/scheduler.py", 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
    _srt("mem_cache/memory_pool.py", 412, "__init__", "self.ssm_states = torch.zeros("),
]


def memory_inbalance_check_enabled() -> bool:
    """environ.py: SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK, an EnvBool that defaults to True."""
    value = os.environ.get("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "").lower()
    if value in ("", "true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    raise ValueError('"%s" is not a valid boolean value' % value)


def capture_sizes(max_bs: int):
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256]
    chosen = [size for size in sizes if size <= max_bs]
    return chosen or [1]


def _sleep_until(start: float, total: float, fraction: float) -> None:
    delay = start + total * fraction - time.time()
    if delay > 0:
        time.sleep(delay)


def oom_traceback(args: dict, plan: dict) -> str:
    per_req_mb = sum(memory.state_bytes_per_request(max(1, args["tp_size"]))) / memory.MIB
    if plan.get("error") and plan["error"][0] == "oom_mamba":
        computed, rest, per_req_mb = plan["error"][1]
    else:
        # The `oom` fault on a plan that fits: an illustrative deficit, as if another process held the memory.
        rest = -round(2.0 + 10.0 * (1.0 - float(args["mem_fraction_static"])) + plan["weights_gb"] * 0.1, 2)
        computed = int(rest * 1024 / per_req_mb)
    site = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
    # The frames are illustrative (modelled on the scheduler traceback in https://github.com/sgl-project/sglang/pull/19781);
    # the RuntimeError text is SGLang's own wording.
    frames = [
        ("managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 368, "__init__", "self.init_model_worker()"),
        ("managers/scheduler.py", 564, "init_model_worker", "self.init_tp_model_worker()"),
        ("managers/scheduler.py", 522, "init_tp_model_worker", "self.tp_worker = TpModelWorker("),
        ("managers/tp_worker.py", 247, "__init__", "self._init_model_runner()"),
        ("managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner("),
        ("model_executor/model_runner.py", 412, "__init__", "self.initialize(pre_model_load_memory)"),
        ("model_executor/model_runner.py", 655, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
        ("model_executor/model_runner_kv_cache_mixin.py", 288, "init_memory_pool", "self.handle_max_mamba_cache(total_rest_memory)"),
        ("model_executor/model_runner_kv_cache_mixin.py", 201, "handle_max_mamba_cache", "raise RuntimeError("),
    ]
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines.append('  File "%s/%s", line %d, in %s' % (site, path, line, function))
        lines.append("    " + code)
    lines.append(
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        "Computed max_mamba_cache_size=%d (total_rest_memory=%.2f GB, mamba_cache_per_req=%.2f MB). "
        "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
        "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory." % (computed, rest, per_req_mb))
    return "\n".join(lines) + "\n"


def error_traceback(plan: dict) -> str:
    """kv_cache_configurator.py: _profile_available_bytes refuses when the weights leave no pool budget (ValueError);
    resolve_max_num_reqs when the state pool serves no request (RuntimeError)."""
    site = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
    frames = [
        ("managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
        ("mem_cache/kv_cache_configurator.py", 506, "configure", "config = self._resolve_memory_pool_config(pre_model_load_memory)"),
    ]
    if plan["error"][0] == "weights":
        frames.append(("mem_cache/kv_cache_configurator.py", 3053, "_profile_available_bytes", "raise ValueError("))
    else:
        frames.append(("mem_cache/kv_cache_configurator.py", 3153, "resolve_max_num_reqs", "raise RuntimeError("))
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines.append('  File "%s/%s", line %d, in %s' % (site, path, line, function))
        lines.append("    " + code)
    lines.append(("ValueError: " if plan["error"][0] == "weights" else "RuntimeError: ") + plan["error"][1])
    return "\n".join(lines) + "\n"


def _scheduler_exception(text: str, tag: str, parent_pid: int) -> int:
    """managers/scheduler.py: run_scheduler_process - log the traceback, SIGQUIT the launcher, exit."""
    logfmt.log("Scheduler hit an exception: " + text, tag)
    try:
        os.kill(parent_pid, signal.SIGQUIT)
    except OSError:
        pass
    return 1


def peer_lost_traceback(args: dict, rank: int, peer: str) -> str:
    """The gloo failure of the request broadcast when another rank is gone (sglang_sim/multinode.py)."""
    return multinode.format_traceback(multinode.loop_frames(args, rank),
                                      "RuntimeError: %s Connection closed by peer %s" % (multinode.GLOO_PAIR, peer))


def _mib(gib: float) -> int:
    """GiB as the whole MiB the driver's ledger counts, rounded up."""
    return int(math.ceil(gib * 1024 - 1e-9))


def run_scheduler_rank(rank: int, args: dict, knobs, ready_fd: int, start: float, parent_pid: int, holder=None,
                       cuda=None) -> int:
    """Print one rank's startup on its GPU (``cuda``: what torch sees, sglang_sim/cuda.py), then report ready on
    ready_fd with the memory the pools were sized from, or die as SGLang does. Returns an exit code.

    With --nnodes > 1 the rank first meets the others at the init address (sglang_sim/multinode.py); the communicator
    is put in holder["comm"] for the scheduler's loop, and the GPU (its open nodes, its memory) in holder["device"]."""
    tag = logfmt.rank_tag(rank, args["tp_size"])
    total = knobs.startup_seconds
    spec = args["speculative_algorithm"] is not None
    # distributed/bootstrap.py: init_parallel_runtime.
    logfmt.log("Init parallel begin.", tag)
    comm = None
    if args.get("dist_init_addr") or multinode.is_multinode(args):
        try:
            host, port = multinode.init_address(args)
        except ValueError as error:
            frame = ("%s/sglang/srt/utils/network.py" % multinode.SITE, multinode.parse_error_line(str(error)),
                     "_parse_port" if str(error).startswith(("Invalid port", "Port out")) else "parse", "raise ValueError(")
            return _scheduler_exception(multinode.format_traceback(multinode.PARSE_FRAMES + [frame], "ValueError: %s" % error),
                                        tag, parent_pid)
    # init_parallel_runtime selects the rank's GPU before it builds the process groups; CUDA creates its context there.
    device = cuda_mod.RankDevice(cuda if cuda is not None else cuda_mod.Cuda.load(), multinode.gpu_id(args, rank), "sglang::scheduler_TP%d" % rank,
                                 parent_pid)
    try:
        device.set_device(_mib(memory.CUDA_CONTEXT_GB))
    except cuda_mod.CudaFailure as failure:
        logfmt.log("Context: device=%s gpu_id=%s CUDA_VISIBLE_DEVICES=%s tp_rank=%s"
                   % (args["device"], device.gpu_id, os.environ.get("CUDA_VISIBLE_DEVICES"), rank), tag)
        return _scheduler_exception(failure.traceback(SET_DEVICE_FRAMES), tag, parent_pid)
    if holder is not None:
        holder["device"] = device
    if multinode.is_multinode(args):
        comm = multinode.Communicator(rank, args["tp_size"])
        began = time.time()
        try:
            comm.rendezvous(host, port, multinode.dist_timeout(args))
        except multinode.DistError as error:
            if error.c10d_log:
                logfmt.emit_raw(error.c10d_log)
            return _scheduler_exception(multinode.format_traceback(error.frames, "%s: %s" % (error.exc_type, error.message)),
                                        tag, parent_pid)
        # The ranks leave the rendezvous together; the rest of the startup runs from there.
        start = time.time() - total * PHASES["dist"]
        logfmt.log("Init parallel ends. elapsed=%.2f s" % (time.time() - began), tag)
        if holder is not None:
            holder["comm"] = comm
    else:
        _sleep_until(start, total, PHASES["dist"])
        logfmt.log("Init parallel ends. elapsed=%.2f s" % (total * PHASES["dist"]), tag)

    # bootstrap.py: measure_pre_model_load_memory - the pools are sized from the memory free now, the smallest over
    # the TP ranks (this node's: (total, held by others, free) MiB per GPU); the rank's own free memory is its "avail".
    figures = device.pre_model_load([multinode.gpu_id(args, other) for other in multinode.tp_rank_range(args)])
    local_gb = figures[device.gpu_id][2] / 1024.0
    limit_total, limit_others, limit_free = min(figures.values(), key=lambda figure: figure[2])
    pre_gb = limit_free / 1024.0
    if args["tp_size"] > 1 and pre_gb < local_gb * 0.9:
        # _check_tp_memory_balance (the f-string's `=` specifier writes each value's repr).
        message = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                   "pre_model_load_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r" % (pre_gb, local_gb, local_gb * 0.9))
        if memory_inbalance_check_enabled():
            return _scheduler_exception(multinode.format_traceback(BALANCE_FRAMES, "RuntimeError: " + message), tag, parent_pid)
        logfmt.log(message, tag)
    logfmt.log("Memory baseline taken. mem usage=0.21 GB", tag)
    plan = memory_plan(args, limit_total / 1024.0, limit_others / 1024.0)
    # This rank's GPU may have more free than the one the pools were sized for.
    extra_gb = local_gb - plan["pre_gb"]

    def wait_phase(fraction):
        if comm is None:
            _sleep_until(start, total, fraction)
            return None
        try:
            comm.wait(start + total * fraction, parent_pid)
        except multinode.PeerLost as lost:
            return _scheduler_exception(multinode.format_traceback(
                multinode.INIT_FRAMES[:1] + multinode.loop_frames(args, rank)[-2:],
                "RuntimeError: %s Connection closed by peer %s" % (multinode.GLOO_PAIR, lost.peer)), tag, parent_pid)
        return None

    def out_of_memory(failure, frames):
        # Ranks fail a little apart; the first SIGQUIT makes the launcher kill the others, as with SGLang.
        time.sleep(0.02 * rank)
        return _scheduler_exception(failure.traceback(frames), tag, parent_pid)

    tp = max(1, args["tp_size"])
    logfmt.log("Load weight begin. avail mem=%.2f GB" % local_gb, tag)
    # model_runner.py: load_model - the parameters take the GPU's memory layer by layer (largest tensor of a layer:
    # its MLP gate_up_proj); what does not fit is torch's OutOfMemoryError.
    weights_mib = _mib(plan["weights_gb"])
    try:
        device.grow(device.context_mib + weights_mib, 2 * memory.FFN * memory.HIDDEN * 2 // tp, 0)
    except cuda_mod.CudaFailure as failure:
        return out_of_memory(failure, WEIGHT_FRAMES)
    if wait_phase(PHASES["weights"]):
        return 1
    avail = local_gb - plan["weights_gb"]
    logfmt.log("Load weight end. elapsed=%.2f s, type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB."
               % (total * (PHASES["weights"] - PHASES["dist"]), ARCHITECTURE, avail, plan["weights_gb"]), tag)
    if spec:
        # The MTP draft starts with its own embed_tokens copy.
        try:
            device.grow(device.context_mib + weights_mib + _mib(plan["draft_gb"]), memory.VOCAB * memory.HIDDEN * 2 // tp,
                        int(plan["weights_gb"] * memory.GIB))
        except cuda_mod.CudaFailure as failure:
            return out_of_memory(failure, WEIGHT_FRAMES)
        avail -= plan["draft_gb"]
        logfmt.log("Load weight end. elapsed=0.41 s, type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB."
                   % (DRAFT_ARCHITECTURE, avail, plan["draft_gb"]), tag)
    logfmt.log("Using KV cache dtype: torch.bfloat16", tag)
    if wait_phase(PHASES["pools"]):
        return 1
    refused = plan["error"] is not None
    if knobs.has("oom") or refused:
        # Ranks finish profiling a little apart; the first SIGQUIT makes the launcher kill the others, so often only
        # one rank's traceback reaches the log, as with SGLang.
        time.sleep(0.02 * rank)
        text = error_traceback(plan) if refused and plan["error"][0] != "oom_mamba" else oom_traceback(args, plan)
        return _scheduler_exception(text, tag, parent_pid)
    # The pools take what the plan gives them (sized to fit; another process may have taken memory since).
    loaded_gb = plan["weights_gb"] + plan["draft_gb"]
    try:
        device.grow(device.context_mib + _mib(loaded_gb + plan["available_after_load_gb"] - plan["after_pools_gb"]),
                    int(plan["ssm_gb"] * memory.GIB), int(loaded_gb * memory.GIB))
    except cuda_mod.CudaFailure as failure:
        return out_of_memory(failure, POOL_FRAMES)
    logfmt.log("Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2fGB, ssm_state size: %.2fGB "
               % (plan["mamba_size"], plan["conv_gb"], plan["ssm_gb"]), tag)
    logfmt.log("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB"
               % (plan["kv_tokens"], plan["kv_gb"] / 2, plan["kv_gb"] / 2), tag)
    if spec:
        logfmt.log("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                   % (plan["kv_tokens"], plan["draft_kv_gb"] / 2, plan["draft_kv_gb"] / 2), tag)
    capped_to = plan["capped_to"]
    if capped_to is not None and rank == 0:
        logfmt.log("max_running_requests is capped to %d by the mamba state cache (max_mamba_cache_size=%d, %d state "
                   "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
                   "halve the state size with --mamba-ssm-dtype bfloat16."
                   % (int(capped_to), plan["mamba_size"], plan["slots_per_request"]), tag)
    after_pools_gb = plan["after_pools_gb"] + extra_gb
    logfmt.log("Memory pool end. avail mem=%.2f GB" % after_pools_gb, tag)
    logfmt.log("Using hybrid linear attention backend for hybrid GDN models.", tag)
    if not args["disable_cuda_graph"]:
        sizes = capture_sizes(args["cuda_graph_max_bs_decode"])
        avail = after_pools_gb
        phases = [("target verify", "num_tokens_per_req=%d, " % args["speculative_num_draft_tokens"]),
                  ("draft decode", "")] if spec else [("decode", "")]
        step = (PHASES["graphs"] - PHASES["pools"]) / len(phases)
        for index, (name, extra) in enumerate(phases):
            logfmt.log("Capture %s CUDA graph begin. backend=full, %savail mem=%.2f GB" % (name, extra, avail), tag)
            if wait_phase(PHASES["pools"] + step * (index + 1)):
                return 1
            used = 0.12 + 0.01 * len(sizes)
            logfmt.log("Capture %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                       % (name, sizes, total * step, used, avail - used), tag)
            avail -= used
    if rank == 0:
        logfmt.log("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
                   "context_len=%d, available_gpu_mem=%.2f GB"
                   % (plan["kv_tokens"], args["chunked_prefill_size"], args["max_prefill_tokens"], plan["max_running_requests"],
                      args["context_length"], max(0.3, after_pools_gb - 0.4)), tag)
    if wait_phase(PHASES["ready"]):
        return 1
    # The launcher sizes the scheduler from the same figures (TP rank 0's).
    os.write(ready_fd, ("ready %r %r\n" % (limit_total / 1024.0, limit_others / 1024.0)).encode())
    os.close(ready_fd)
    return 0


def scheduler_loop(rank: int, args: dict, parent_pid: int, comm) -> int:
    """A multi-node scheduler after startup: the request broadcast fails when another rank is gone; rank 0's
    ShutdownReq (SIGUSR1 from its launcher here) is broadcast to the others, whose schedulers then exit 0."""
    tag = logfmt.rank_tag(rank, args["tp_size"])
    shutdown = []
    if rank == 0:
        signal.signal(signal.SIGUSR1, lambda signum, frame: shutdown.append(True))
    while True:
        if shutdown:
            comm.broadcast_shutdown()
            comm.close()
            return 0
        try:
            event = comm.wait(time.time() + 0.2, parent_pid)
        except multinode.PeerLost as lost:
            return _scheduler_exception(peer_lost_traceback(args, rank, lost.peer), tag, parent_pid)
        if event == "shutdown":
            comm.close()
            return 0
        if event == "parent":
            return 0
