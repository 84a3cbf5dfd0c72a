# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_memory_plan
short_description: Plan SGLang's GPU memory (weights, KV pool, hybrid state pool) before the server starts
description:
  - Does the arithmetic SGLang does at start, per tensor-parallel rank, from the model's C(config.json) (and
    C(model.safetensors.index.json) for the exact weight bytes when present), the GPUs and the server's flags, and
    says whether the server starts and whether it serves what was asked before a multi-minute start with CUDA graph
    capture finds out. O(arithmetic) picks the SGLang release whose sizing is followed.
  - "The weights: exact from the checkpoint when it is there (the shards' safetensors headers, which must agree with
    the index's C(total_size); else the index's total), estimated from C(config.json) otherwise. The estimate counts
    dense and mixture-of-experts layers (every routed expert at C(moe_intermediate_size), shared experts and their
    gate, the routers, which tensor parallelism replicates) and stores each linear layer as the checkpoint's
    quantization format does - fp8 (per-tensor or block scales), AWQ, GPTQ, compressed-tensors (int4/int8, fp8,
    NVFP4), Model Optimizer FP8/NVFP4, MXFP4 and bitsandbytes, with the modules each leaves unquantized. Other
    formats, multi-head latent attention and sliding-window layers are refused by name, never planned at a guess."
  - "Hybrid models (Qwen3-Next, Qwen3.5/3.6: Gated DeltaNet layers with a fixed state per request next to
    full-attention layers) get a state pool next to the KV pool: its slots per running request (3, plus 2 tracking
    slots with the C(extra_buffer) cache strategy and the overlap schedule), the speculative draft's intermediate state
    and the MTP draft's KV layer are counted as SGLang counts them. Dense models get the KV pool only."
  - "Two verdicts. RV(fits): SGLang would start (RV(reasons) names what stops it: the weights leave no room, a state
    pool of no slots, a KV pool of no tokens, no request served). RV(serves_requested): it starts and has no
    RV(shortfalls) - no pool cuts C(max_running_requests) of O(flags) (SGLang only logs that it caps it and serves
    fewer) and the KV pool holds one request of the context length. O(require) says which of the two is the
    RV(verdict). Less memory outside the static pools than the activation and CUDA graph reserve of SGLang's default
    is a warning."
  - When the plan does not serve what was asked, returns suggestions (the largest C(max_running_requests) the pools
    serve, the smallest C(mamba_full_memory_ratio) that serves every request, C(mamba_ssm_dtype=bfloat16), the
    context length the KV pool holds) and a set of changes with which it serves what was asked; always the breakdown
    and the binding constraint.
  - Needs no GPU; runs on the controller (give O(config)) or on the target (give O(model_path)).
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  model_path:
    description:
      - Directory of the staged model on the target; C(config.json) is read from it, C(hf_quant_config.json) and
        C(model.safetensors.index.json) when present, and the safetensors header of every shard the index names (or
        of C(model.safetensors)), never the tensors.
      - The directory is read as M(llmops.serving.model_files) reads it - a symlink only when it stays inside, regular
        files only, opened without blocking, sizes bounded - so a FIFO or a half-written shard cannot hang or mislead the
        plan; a shard that cannot be read leaves the plan on the index's total (C(headers_problem) in RV(model)).
      - One of O(model_path) and O(config) is required.
    type: path
  config:
    description: The model's parsed C(config.json), instead of O(model_path).
    type: dict
  safetensors_index:
    description: The parsed C(model.safetensors.index.json), for the exact weight bytes (with O(config)).
    type: dict
  hf_quant_config:
    description:
      - The parsed C(hf_quant_config.json) of an NVIDIA Model Optimizer checkpoint (with O(config)), whose
        C(config.json) has no C(quantization_config); SGLang reads its quantization from there.
    type: dict
  gpu_count:
    description: GPUs the server may use; a C(tp_size) in O(flags) above it is refused. Unchecked when omitted.
    type: int
  gpu_memory_mib:
    description:
      - Total memory of one GPU in MiB, as C(nvidia-smi --query-gpu=memory.total) prints it (an RTX A6000 has 49140).
      - When omitted, C(nvidia-smi) is asked (the smallest GPU counts).
    type: int
  nvidia_smi_path:
    description: The nvidia-smi program asked when O(gpu_memory_mib) is omitted.
    type: path
    default: nvidia-smi
  cuda_context_mib:
    description:
      - Memory gone before the weights load (CUDA context, NCCL buffers), in MiB; the rest is SGLang's
        C(pre_model_load_memory) (the C(Load weight begin. avail mem) of its log).
    type: int
    default: 1024
  co_tenants:
    description:
      - Other servers that share these GPUs (C(pve_container_gpus_shared)). SGLang sizes its static pools from the memory
        free when it starts, so each co-tenant's static share (its C(mem_fraction_static) of the free memory, or
        SGLang's default for this GPU when null) is taken before this server's plan; a refusal names them first.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The co-tenant, for the messages (its inventory name).
        type: str
        required: true
      mem_fraction_static:
        description: Its C(--mem-fraction-static); null for SGLang's default.
        type: float
  flags:
    description:
      - The server's flags, with SGLang's names (C(tp_size), C(mem_fraction_static), C(max_running_requests),
        C(mamba_full_memory_ratio), C(mamba_radix_cache_strategy), C(mamba_ssm_dtype), C(max_mamba_cache_size),
        C(disable_radix_cache), C(disable_overlap_schedule), C(context_length), C(kv_cache_dtype),
        C(speculative_algorithm), C(speculative_num_steps), C(speculative_eagle_topk), C(speculative_num_draft_tokens),
        C(chunked_prefill_size), C(cuda_graph_max_bs), C(disable_cuda_graph), C(max_total_tokens), C(page_size),
        C(language_only), C(ep_size), C(ep_num_redundant_experts)). Omitted or null flags take SGLang's defaults for
        this GPU and model.
      - Expert parallelism (C(ep_size)) spreads the experts over the same ranks tensor parallelism splits them over, so
        a rank's share is the same; C(ep_num_redundant_experts) adds that many experts' copies.
    type: dict
    default: {}
  require:
    description:
      - What the plan must show for RV(verdict) to be true.
      - V(start) - SGLang would start (RV(fits)), whatever it cuts from the request.
      - V(requested) - SGLang would start and serve what was asked (RV(serves_requested)), every one of
        C(max_running_requests) and one request of the full context length.
    type: str
    choices: [start, requested]
    default: start
  arithmetic:
    description:
      - The SGLang release whose memory arithmetic the plan follows - the installed one, or the one pinned
        (C(sglang_version)); C(0.5.10.post1) counts as C(0.5.10).
      - Every release from 0.4.0 on (0.5.9 for hybrid models) is planned with its own behaviours, each of which changed
        in one release - the request pool of old releases, what caps an explicit C(max_running_requests) (0.5.10,
        0.5.14), how the state pool shares its budget with the draft's intermediate state (subtracted first up to
        0.5.12, a joint solve from 0.5.13, the padding slot from 0.5.17), the tracking slots and what C(auto) resolves
        to (0.5.10, 0.5.14), the draft's weights and KV layers counted before the pools (0.5.14), the multimodal
        reservation (0.5.18), the GPU-size defaults (0.5.3, 0.5.20, 0.5.22) and the default C(mem_fraction_static)
        (the reserve formula of 0.5.3; give the flag for older releases). RV(release) lists what the plan used.
      - A release newer than the newest known (0.5.23) is planned with the newest known behaviours, and a warning
        says so; a release older than the plan models, or a source build's C(0.0.0.devN), is refused.
    type: str
    aliases: [sglang_version]
    default: "0.5.23"
  fail_on_no_fit:
    description: Fail the task, with the numbers and the suggestions, when the requirement of O(require) is not met.
    type: bool
    default: false
  startup_log:
    description:
      - The server's log (the current run's file); when given, the pool sizes SGLang printed at start are read from
        O(log_offset) on and compared with the plan (RV(actual), RV(comparison)).
    type: path
  log_offset:
    description: Byte offset where the current run starts in O(startup_log) (M(llmops.serving.log_provenance) returns it).
    type: int
    default: 0
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - The weights are estimated from C(config.json) unless the safetensors index gives the exact total; the draft's
    unfreed C(embed_tokens)/C(lm_head) copies are counted with its weights (sgl-project/sglang#36452). Compare the plan with the
    server's own figures after a start (M(llmops.serving.sglang_ready) and the verification summary do).
  - Each step cites the SGLang function it mirrors in C(plugins/module_utils/memory_plan.py); which behaviour changed in
    which release is in C(plugins/module_utils/sglang_releases.py).
  - The plan follows SGLang on NVIDIA GPUs (CUDA); ROCm builds size their pools differently (20 % off on the public
    MI355X logs of the test corpus) and are not modelled.
  - The plan's measured accuracy on public startup logs, and what it does not model, are in the collection's
    C(docs/memory-plan.md).
seealso:
  - name: SGLang hybrid model memory
    description: SGLang's documentation of C(--mamba-full-memory-ratio), C(--max-mamba-cache-size) and C(--mamba-ssm-dtype).
    link: https://docs.sglang.io/advanced_features/hybrid_model_memory.html
"""

EXAMPLES = r"""
- name: Plan the server's memory before it is restarted
  llmops.serving.sglang_memory_plan:
    model_path: /srv/models/Qwen3.6-27B
    gpu_count: 2
    flags:
      tp_size: 2
      max_running_requests: 16
      mamba_full_memory_ratio: 0.5
      speculative_algorithm: NEXTN
      speculative_num_steps: 3
      speculative_eagle_topk: 1
      speculative_num_draft_tokens: 4
    require: requested
    fail_on_no_fit: true
  register: memory_plan

- name: Would it start under the SGLang 0.5.9 that is installed?
  llmops.serving.sglang_memory_plan:
    model_path: /srv/models/Qwen3.6-27B
    gpu_count: 2
    arithmetic: "0.5.9"
    flags: {tp_size: 2, max_running_requests: 48, mamba_full_memory_ratio: 0.9, speculative_algorithm: NEXTN}
  register: memory_plan_0_5_9

- name: What would 2 x 80 GB allow? (on the controller)
  llmops.serving.sglang_memory_plan:
    config: "{{ lookup('ansible.builtin.file', 'files/Qwen3.6-27B/config.json') | from_json }}"
    gpu_memory_mib: 81559
    flags: {tp_size: 2, speculative_algorithm: NEXTN}
  delegate_to: localhost
"""

RETURN = r"""
fits:
  description: Whether SGLang would start with these flags (RV(reasons) is empty).
  returned: always
  type: bool
  sample: true
serves_requested:
  description: Whether SGLang would start and serve what was asked (RV(fits) and RV(shortfalls) is empty).
  returned: always
  type: bool
  sample: false
verdict:
  description: The verdict O(require) asks for - RV(fits) for V(start), RV(serves_requested) for V(requested).
  returned: always
  type: bool
  sample: true
binding:
  description:
    - The pool that stops the start (the first in the order C(weights), C(mamba), C(kv)), else the first pool with a
      shortfall (C(mamba), C(kv)), else the one closest to its limit (C(activation_reserve), C(mamba) or C(kv)).
  returned: always
  type: str
  sample: mamba
reasons:
  description: What stops SGLang from starting, one sentence with the numbers, prefixed with the pool; empty when it fits.
  returned: always
  type: list
  elements: str
  sample: ["mamba: the draft's intermediate state for 48 requests x 4 draft tokens (13.76 GiB) leaves no state pool ..."]
shortfalls:
  description:
    - What a server that starts cuts from the request, one sentence each, prefixed with the pool - the state pool or
      the KV pool serves fewer than C(max_running_requests), the KV pool cannot hold one request of the context
      length. Empty when it serves what was asked, and when it does not start.
  returned: always
  type: list
  elements: str
  sample: ["mamba: the state pool (18 slots, 5 per request) serves 3 of max_running_requests=16; ..."]
summary:
  description:
    - One line with the verdict - C(fits), "fits (starts), but" with the first shortfall, or C(does not fit) with the
      first reason - the pools and, when it does not serve what was asked, the suggestions.
  returned: always
  type: str
pools:
  description: What SGLang would print at start, per rank.
  returned: always
  type: dict
  contains:
    max_mamba_cache_size:
      description: State pool slots (C(Mamba Cache is allocated. max_mamba_cache_size)); null for a dense model.
      type: int
    max_total_num_tokens:
      description: KV pool tokens, as in SGLang's C(KV Cache is allocated) and C(max_total_num_tokens) lines.
      type: int
    max_running_requests:
      description: The concurrency SGLang resolves (after its pool caps).
      type: int
breakdown:
  description:
    - Bytes per rank - C(gpu_memory_bytes), C(co_tenant_bytes) (what O(co_tenants) hold of each GPU),
      C(pre_model_load_bytes), C(target_weights_bytes), C(draft_weights_bytes),
      C(available_after_load_bytes), C(outside_static_bytes), C(activation_reserve_bytes) (SGLang's own reserve for
      activations and CUDA graphs, in its two parts C(activation_bytes) and C(cuda_graph_bytes)),
      C(multimodal_reservation_bytes), C(pool_budget_bytes), C(mamba_state_bytes) (C(mamba_conv_bytes) +
      C(mamba_ssm_bytes)), C(mamba_intermediate_bytes), C(mamba_per_request_bytes), C(kv_bytes),
      C(free_after_pools_bytes); and C(mem_fraction_static) with its source, C(default_mem_fraction_static),
      C(mamba_slots_per_request), C(kv_cell_bytes), C(kv_draft_cell_bytes).
  returned: always
  type: dict
plan_warnings:
  description:
    - Risks that do not refuse the plan - less memory outside the static pools than SGLang's default reserve
      (C(activation_reserve)); with O(arithmetic=0.5.9), draft weights that with that reserve exceed the memory outside
      the static pools, where 0.5.9 loads them (C(draft_weights)).
  returned: always
  type: list
  elements: str
limits:
  description: How far each constraint is used, as a ratio (1.0 is exactly at the limit, below 1 does not fit).
  returned: always
  type: dict
  sample: {"activation_reserve": 1.48, "kv": 0.65, "mamba": 0.19}
suggestions:
  description:
    - C(max_running_requests), C(mamba_full_memory_ratio), C(mamba_ssm_dtype), C(context_length) (null where no value
      helps, all null when the plan serves what was asked) and C(fits_with), a set of flag changes with which SGLang
      starts and serves what was asked (null when none was found).
    - When less than SGLang's activation and CUDA graph reserve stays outside the static pools (the
      C(activation_reserve) warning, the usual out-of-memory of 24 GB cards at graph capture), C(cuda_graph_max_bs)
      (the largest whose graphs fit next to the activations) and C(mem_fraction_static) (the largest that leaves the
      whole reserve); null otherwise.
  returned: always
  type: dict
resolved:
  description: The flags after SGLang's defaults for this GPU and model (draft tokens, cache strategy, graph sizes).
  returned: always
  type: dict
model:
  description:
    - The dimensions read from C(config.json), C(moe) (experts, their intermediate size, shared experts, sparse
      layers; null for a dense model) and C(weights) - bytes by part (C(total), C(language), C(mtp), C(vision)), the
      kinds tensor parallelism replicates (C(router), C(kv_proj)), C(experts), C(format) (how the linear layers are
      stored), C(estimated_total) (the estimate from C(config.json), for comparison), C(source) (safetensors headers,
      the index or the estimate) and C(headers_problem) (why the shards' headers were not read, when they were not).
  returned: always
  type: dict
gpu:
  description: C(memory_mib), C(count) and where the memory figure came from (C(given) or C(nvidia-smi)).
  returned: always
  type: dict
actual:
  description:
    - What SGLang printed at start in O(startup_log) (rank 0), from C(sglang_log.parse_pool_lines) - for example
      C(max_mamba_cache_size), C(kv_tokens), C(max_total_num_tokens), C(max_running_requests),
      C(capped_running_requests), C(available_gpu_mem_gib), C(oom_mamba_cache_size) and C(sampling_defaults) (the chat
      defaults it took from generation_config.json).
  returned: when O(startup_log) is given
  type: dict
comparison:
  description:
    - Per pool, C(planned), C(actual), C(error) and C(relative_error) (planned - actual) / actual.
  returned: when O(startup_log) is given
  type: dict
  sample: {"max_mamba_cache_size": {"planned": 125, "actual": 124, "error": 1, "relative_error": 0.0081}}
serves:
  description:
    - What the server serves of what was requested, from the startup log when O(startup_log) is given and has the
      figures (C(source) says which), else from the plan - C(running_requests) of C(requested_running_requests),
      C(kv_tokens) (the KV pool), C(context_length) (the flag, else the model's) and C(full_context_requests) (requests
      of the full context the KV pool holds at once).
  returned: always
  type: dict
  sample: {"running_requests": 4, "requested_running_requests": 4, "kv_tokens": 148578, "context_length": 131072,
           "full_context_requests": 1, "source": "plan"}
serves_summary:
  description: RV(serves) as one sentence.
  returned: always
  type: str
  sample: serves 4 of 4 requested running requests; the KV pool holds 148578 tokens, 1 request(s) of the 131072-token context
sglang_version:
  description: The SGLang release whose arithmetic the plan follows (O(arithmetic)).
  returned: always
  type: str
  sample: 0.5.23
release:
  description:
    - The release's memory behaviours the plan used (C(planned_as), C(state_pool), C(explicit_requests),
      C(auto_strategy), C(draft_before_pools), C(multimodal_reservation), C(gpu_bands) and the others named in
      C(plugins/module_utils/sglang_releases.py)) and C(notes).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import (
    memory_plan, model_config, model_files, service_files, sglang_log)

MAX_STARTUP_BYTES = 8 << 20


def read_startup(path, offset):
    """The current run's startup pool lines (at most MAX_STARTUP_BYTES from ``offset``), parsed.

    The log is in a directory the service user can write: it is opened as the other log readers open it
    (service_files.open_log: no symlinks, no FIFOs, a regular file only), never followed to what that user chose.
    """
    with service_files.open_log(path) as log:
        os.lseek(log.fd, offset, os.SEEK_SET)
        data = os.read(log.fd, MAX_STARTUP_BYTES)
    return sglang_log.parse_pool_lines(data.decode("utf-8", "replace").splitlines())


def parse_memory_total(text):
    """The smallest ``memory.total`` (MiB) from ``nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits``."""
    values = []
    for line in text.splitlines():
        line = line.strip().replace("MiB", "").strip()
        if line:
            values.append(int(line))
    if not values:
        raise ValueError("nvidia-smi printed no memory.total")
    return min(values), len(values)


def run(params, files, gpu):
    """The module's result (pure): the plan, its suggestions and a summary. ``files``: model_files.read_for_plan's
    dict (``config``, ``hf_quant_config``, ``index``, ``headers``, ``headers_problem``)."""
    dims = model_config.parse_model_config(files["config"], files.get("hf_quant_config"))
    index = files.get("index")
    parsed_index = model_config.parse_safetensors_index(index) if index else None
    weights = model_config.weight_bytes(dims, parsed_index, files.get("headers"))
    if files.get("headers_problem") and index is not None:
        weights["headers_problem"] = files["headers_problem"]
    flags = {key: value for key, value in memory_plan.coerce_flags(params["flags"]).items() if value is not None}
    plan = memory_plan.plan_memory(dims, weights, gpu, flags, arithmetic=params["arithmetic"])
    suggestions = memory_plan.suggest(dims, weights, gpu, flags, plan=plan)
    model = {key: dims[key] for key in ("architecture", "num_layers", "hidden_size", "num_kv_heads", "head_dim",
                                        "mtp_layers", "context_length", "is_multimodal")}
    model.update({"full_attention_layers": len(dims["full_attention_layers"]),
                  "linear_attention_layers": len(dims["linear_attention_layers"]),
                  "linear": dims["linear"], "weights": weights,
                  "moe": dict(dims["moe"], sparse_layers=len(dims["moe"]["sparse_layers"])) if dims["moe"] else None})
    verdict = plan["serves_requested"] if params["require"] == "requested" else plan["fits"]
    return {"changed": False, "fits": plan["fits"], "serves_requested": plan["serves_requested"], "verdict": verdict,
            "binding": plan["binding"], "reasons": plan["reasons"], "shortfalls": plan["shortfalls"],
            "plan_warnings": plan["warnings"],
            "summary": memory_plan.summary_line(plan, suggestions), "pools": plan["pools"],
            "breakdown": plan["breakdown"], "limits": plan["limits"], "suggestions": suggestions,
            "resolved": plan["resolved"], "model": model, "gpu": gpu, "sglang_version": plan["sglang_version"],
            "release": plan["release"],
            "serves": memory_plan.serves(plan)}


def add_serves_summary(result):
    result["serves_summary"] = memory_plan.serves_line(result["serves"])
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path"),
            config=dict(type="dict"),
            safetensors_index=dict(type="dict"),
            hf_quant_config=dict(type="dict"),
            gpu_count=dict(type="int"),
            gpu_memory_mib=dict(type="int"),
            nvidia_smi_path=dict(type="path", default="nvidia-smi"),
            cuda_context_mib=dict(type="int", default=memory_plan.DEFAULT_CUDA_CONTEXT_MIB),
            co_tenants=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                mem_fraction_static=dict(type="float"),
            )),
            flags=dict(type="dict", default={}),
            require=dict(type="str", choices=["start", "requested"], default="start"),
            arithmetic=dict(type="str", aliases=["sglang_version"], default=memory_plan.SGLANG_VERSION),
            fail_on_no_fit=dict(type="bool", default=False),
            startup_log=dict(type="path"),
            log_offset=dict(type="int", default=0),
        ),
        required_one_of=[("model_path", "config")],
        mutually_exclusive=[("model_path", "config")],
        supports_check_mode=True,
    )
    params = module.params
    if params["model_path"]:
        try:
            files = model_files.read_for_plan(params["model_path"])
        except (model_files.ModelDirError, OSError) as exc:
            module.fail_json(msg="cannot read the model's config from %s: %s" % (params["model_path"], exc))
    else:
        files = {"config": params["config"], "index": params["safetensors_index"],
                 "hf_quant_config": params["hf_quant_config"], "headers": None}
    gpu = {"memory_mib": params["gpu_memory_mib"], "count": params["gpu_count"],
           "cuda_context_mib": params["cuda_context_mib"], "source": "given", "co_tenants": params["co_tenants"]}
    if gpu["memory_mib"] is None:
        smi = module.get_bin_path(params["nvidia_smi_path"]) if "/" not in params["nvidia_smi_path"] else params["nvidia_smi_path"]
        if not smi:
            module.fail_json(msg="gpu_memory_mib is not given and %s is not found" % params["nvidia_smi_path"])
        rc, out, err = module.run_command([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"])
        try:
            if rc != 0:
                raise ValueError(err.strip() or out.strip())
            gpu["memory_mib"], listed = parse_memory_total(out)
        except ValueError as exc:
            module.fail_json(msg="cannot read the GPU memory size from nvidia-smi: %s" % exc, rc=rc)
        gpu["count"] = gpu["count"] if gpu["count"] is not None else listed
        gpu["source"] = "nvidia-smi"
    try:
        result = run(params, files, gpu)
    except (model_config.ModelConfigError, memory_plan.PlanInputError) as exc:
        module.fail_json(msg="cannot plan the memory: %s" % exc)
    if params["startup_log"]:
        try:
            actual = read_startup(params["startup_log"], params["log_offset"])
        except service_files.RefusedFile as exc:
            module.fail_json(msg="cannot read the startup log: %s" % exc)
        except OSError as exc:
            module.fail_json(msg="cannot read %s: %s" % (params["startup_log"], exc))
        result["actual"] = actual
        result["comparison"] = memory_plan.compare_with_startup(
            {"pools": result["pools"], "breakdown": result["breakdown"]}, actual)
        result["serves"] = memory_plan.serves({"pools": result["pools"], "resolved": result["resolved"]}, actual)
    add_serves_summary(result)
    if params["fail_on_no_fit"] and not result["verdict"]:
        what = "does not fit its GPUs" if not result["fits"] else "starts but does not serve what was asked"
        module.fail_json(msg="the SGLang server %s: %s" % (what, result["summary"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
