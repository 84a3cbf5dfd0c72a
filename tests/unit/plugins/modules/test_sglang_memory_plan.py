# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_memory_plan module: run in-process on a staged model directory and on a config given directly."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from unittest import mock

from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.modules import sglang_memory_plan
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

CONFIG_PATH = (pathlib.Path(__file__).parents[1] / "module_utils" / "data" / "models" / "qwen3.6-27b-from-model-card.json")
CONFIG = json.loads(CONFIG_PATH.read_text())
MTP = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
       "speculative_num_draft_tokens": 4}


def staged(tmp_path, index=None):
    model = tmp_path / "Qwen3.6-27B"
    model.mkdir()
    shutil.copy(CONFIG_PATH, model / "config.json")
    if index is not None:
        (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return str(model)


SEED_48 = dict(MTP, max_running_requests=48, mamba_full_memory_ratio=0.9)


def test_seed_under_0_5_23_starts_and_fails_only_when_the_requirement_is_not_met(tmp_path):
    args = {"model_path": staged(tmp_path), "gpu_memory_mib": 49140, "gpu_count": 2, "flags": SEED_48}
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["changed"] is False and result["sglang_version"] == "0.5.23"
    assert (result["fits"], result["serves_requested"], result["verdict"]) == (True, False, True)
    assert result["reasons"] == [] and result["binding"] == "mamba" and result["pools"]["max_mamba_cache_size"] == 26
    assert result["shortfalls"][0].startswith("mamba: the state pool (26 slots, 5 per request) serves 5 of "
                                              "max_running_requests=48")
    assert result["suggestions"]["fits_with"] == {"max_running_requests": 5, "context_length": 135313}
    assert result["model"]["weights"]["source"].startswith("estimated from config.json")
    result, failed = run_module(sglang_memory_plan.main, dict(args, fail_on_no_fit=True))
    assert not failed and result["verdict"] is True                       # require: start - it starts
    result, failed = run_module(sglang_memory_plan.main, dict(args, require="requested"))
    assert not failed and (result["fits"], result["verdict"]) == (True, False)
    result, failed = run_module(sglang_memory_plan.main, dict(args, require="requested", fail_on_no_fit=True))
    assert failed and result["msg"].startswith(
        "the SGLang server starts but does not serve what was asked: fits (starts), but mamba: the state pool (26 slots")
    assert result["shortfalls"] and result["pools"]["max_running_requests"] == 5


def test_seed_under_0_5_9_does_not_start(tmp_path):
    args = {"config": CONFIG, "gpu_memory_mib": 49140, "gpu_count": 2, "flags": SEED_48, "arithmetic": "0.5.9"}
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["sglang_version"] == "0.5.9"
    assert (result["fits"], result["serves_requested"], result["verdict"], result["shortfalls"]) == (False, False, False, [])
    assert result["reasons"][0].startswith("mamba: the draft's intermediate state for 48 requests x 4 draft tokens "
                                           "(13.76 GiB) leaves no state pool")
    assert result["suggestions"]["fits_with"] == {"max_running_requests": 12, "context_length": 103941}
    for require in ("start", "requested"):
        result, failed = run_module(sglang_memory_plan.main, dict(args, require=require, fail_on_no_fit=True))
        assert failed and result["msg"].startswith("the SGLang server does not fit its GPUs: does not fit: weights 25.47 GiB")
        assert "binding mamba: mamba: the draft's intermediate state" in result["msg"]
    # Any release from 0.5.9 on is planned with its own behaviours (the between releases included); older ones and
    # what is not a release number are refused by name.
    result, failed = run_module(sglang_memory_plan.main, dict(args, arithmetic="0.5.12"))
    assert not failed and result["release"]["state_pool"] == "subtract_first" and not result["fits"]
    aliased = {key: value for key, value in args.items() if key != "arithmetic"}
    result, failed = run_module(sglang_memory_plan.main, dict(aliased, sglang_version="0.5.13"))
    assert not failed and result["release"]["state_pool"] == "joint" and result["sglang_version"] == "0.5.13"
    for release, message in (("0.5.8", "SGLang 0.5.8 sizes the hybrid state pool in a way the plan does not model"),
                             ("main", "'main' is not an SGLang release number")):
        result, failed = run_module(sglang_memory_plan.main, dict(args, arithmetic=release))
        assert failed and message in result["msg"], result["msg"]
    result, failed = run_module(sglang_memory_plan.main, dict(args, arithmetic="0.6.1"))
    assert not failed and result["plan_warnings"][0] == (
        "SGLang 0.6.1 is newer than the newest release the plan knows (0.5.23); planned with 0.5.23's arithmetic")
    result, failed = run_module(sglang_memory_plan.main, dict(args, require="serves"))
    assert failed and "value of require must be one of: start, requested, got: serves" in result["msg"]


def test_check_mode_plans_the_same(tmp_path):
    args = {"config": CONFIG, "gpu_memory_mib": 49140, "gpu_count": 2, "arithmetic": "0.5.9", "require": "requested",
            "flags": dict(MTP, max_running_requests=16, mamba_full_memory_ratio=0.5)}
    checked, failed = run_module(sglang_memory_plan.main, args, check_mode=True)
    assert not failed and checked["changed"] is False
    assert (checked["fits"], checked["serves_requested"], checked["verdict"]) == (True, False, False)
    assert checked["pools"] == {"max_mamba_cache_size": 22, "max_total_num_tokens": 106290, "max_running_requests": 7}
    applied, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and applied == checked


def test_index_and_fitting_plan(tmp_path):
    index = {"metadata": {"total_size": 55_560_000_000}, "weight_map": {"mtp.fc.weight": "a", "model.visual.x": "b"}}
    args = {"model_path": staged(tmp_path, index), "gpu_memory_mib": 49140, "require": "requested", "fail_on_no_fit": True,
            "flags": dict(MTP, max_running_requests=4, mamba_full_memory_ratio=0.9, context_length=65536, cuda_graph_max_bs=None)}
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["fits"] and result["serves_requested"] and result["verdict"], result["shortfalls"]
    assert result["model"]["weights"]["total"] == 55_560_000_000 and result["summary"].startswith("fits:")


def test_config_given_directly_and_nvidia_smi(tmp_path):
    calls = []

    def fake_run_command(self, cmd, **kwargs):
        calls.append(cmd)
        return 0, "49140\n49140\n", ""

    with mock.patch.object(basic.AnsibleModule, "run_command", fake_run_command), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/nvidia-smi"):
        result, failed = run_module(sglang_memory_plan.main, {"config": CONFIG, "flags": MTP})
    assert not failed and calls == [["/usr/bin/nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]]
    assert result["gpu"] == {"memory_mib": 49140, "count": 2, "cuda_context_mib": 1024, "source": "nvidia-smi",
                             "co_tenants": []}


def test_errors_are_plain(tmp_path):
    result, failed = run_module(sglang_memory_plan.main, {"model_path": str(tmp_path), "gpu_memory_mib": 49140})
    assert failed and result["msg"].startswith("cannot read the model's config from")
    result, failed = run_module(sglang_memory_plan.main, {"config": {"text_config": {"hidden_size": 0}}, "gpu_memory_mib": 1})
    assert failed and "cannot plan the memory: config.json hidden_size=0" in result["msg"]
    result, failed = run_module(sglang_memory_plan.main, {"config": CONFIG, "gpu_memory_mib": 49140, "flags": {"tp": 2}})
    assert failed and "unknown flag(s) for the plan: tp" in result["msg"]


def test_memory_total_parser():
    assert sglang_memory_plan.parse_memory_total("81559 MiB\n49140\n") == (49140, 2)


def test_plan_against_the_current_runs_startup_lines(tmp_path):
    log = tmp_path / "run.log"
    previous = "[2026-12-01 21:00:00 TP0] Mamba Cache is allocated. max_mamba_cache_size: 99, conv_state size: 1GB\n"
    current = ("[2026-12-01 22:00:55 TP0] Mamba Cache is allocated. max_mamba_cache_size: 18, conv_state size: 0.02GB, "
               "ssm_state size: 1.27GB \n"
               "[2026-12-01 22:00:55 TP0] max_total_num_tokens=170687, chunked_prefill_size=4096, max_prefill_tokens=16384, "
               "max_running_requests=3, context_len=262144, available_gpu_mem=10.32 GB\n"
               "[2026-12-01 22:00:55] Using default chat sampling params from model generation config: {'temperature': 1.0}\n")
    log.write_text(previous + current)
    args = {"config": CONFIG, "gpu_memory_mib": 49140, "flags": dict(MTP, max_running_requests=16, mamba_full_memory_ratio=0.5),
            "startup_log": str(log), "log_offset": len(previous)}
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["actual"]["max_mamba_cache_size"] == 18
    assert result["comparison"]["max_mamba_cache_size"] == {"planned": 18, "actual": 18, "error": 0, "relative_error": 0.0}
    assert result["comparison"]["max_total_num_tokens"]["error"] == 0
    assert result["actual"]["sampling_defaults"] == {"temperature": 1.0}
    result, failed = run_module(sglang_memory_plan.main, dict(args, startup_log=str(tmp_path / "missing.log")))
    assert failed and result["msg"].startswith("cannot read")


def test_a_startup_log_the_service_user_swapped_is_refused_not_followed(tmp_path):
    # The log directory is the service user's: a FIFO would block root's read, a symlink would make root read
    # what that user chose. Both are refused, with what was found, within the call.
    secret = tmp_path / "root-only"
    secret.write_text("max_total_num_tokens=999999, available_gpu_mem=1 GB\n")
    link = tmp_path / "link.log"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    args = {"config": CONFIG, "gpu_memory_mib": 49140, "flags": dict(MTP, max_running_requests=16), "log_offset": 0}
    for path, found in ((link, "symlink"), (fifo, "FIFO")):
        result, failed = run_module(sglang_memory_plan.main, dict(args, startup_log=str(path)))
        assert failed and result["msg"].startswith("cannot read the startup log") and found in result["msg"], result
        assert "actual" not in result


def test_co_tenants_reach_the_plan_and_its_refusal_names_them():
    args = {"config": CONFIG, "gpu_memory_mib": 49140, "gpu_count": 2,
            "flags": {"tp_size": 2, "mem_fraction_static": 0.85, "max_running_requests": 16},
            "co_tenants": [{"name": "sandbox-llm-a", "mem_fraction_static": 0.45}]}
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["verdict"] is False
    assert result["reasons"][0].startswith("shared GPUs: sandbox-llm-a (mem_fraction_static 0.45) hold about")
    assert result["breakdown"]["co_tenant_bytes"] > 0


# ---- the checkpoint's own bytes: shard headers read like model_files reads them (issue 27) ---------------------------

def write_safetensors(path, tensors):
    """A real safetensors file: header JSON, then zeroed data of each tensor's size."""
    offset, header = 0, {}
    for name, dtype, shape in tensors:
        count = 1
        for size in shape:
            count *= size
        size = count * {"BF16": 2, "F8_E4M3": 1, "F32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * offset)
    return offset


def small_model(tmp_path):
    """A two-layer MoE config and its two shards (the headers sum to the index's total)."""
    model = tmp_path / "tiny-moe"
    model.mkdir()
    config = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1024,
              "num_experts": 4, "moe_intermediate_size": 128, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (model / "config.json").write_text(json.dumps(config))
    first = write_safetensors(model / "a.safetensors", [("model.embed_tokens.weight", "BF16", [1024, 256]),
                                                        ("model.layers.0.mlp.experts.0.up_proj.weight", "BF16", [128, 256])])
    second = write_safetensors(model / "b.safetensors", [("lm_head.weight", "BF16", [1024, 256]),
                                                         ("model.layers.1.mlp.gate.weight", "BF16", [4, 256])])
    index = {"metadata": {"total_size": first + second},
             "weight_map": {"model.embed_tokens.weight": "a.safetensors", "lm_head.weight": "b.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model, first + second


def test_the_shards_headers_give_the_exact_bytes(tmp_path):
    model, total = small_model(tmp_path)
    result, failed = run_module(sglang_memory_plan.main, {"model_path": str(model), "gpu_memory_mib": 24576})
    assert not failed, result["msg"]
    weights = result["model"]["weights"]
    assert weights["source"] == "safetensors headers (2 shard(s))" and weights["total"] == total
    assert weights["router"] == 4 * 256 * 2 and weights["experts"] == 128 * 256 * 2
    assert result["model"]["moe"]["num_experts"] == 4


def test_a_hostile_model_directory_is_planned_from_the_index_or_refused(tmp_path):
    model, total = small_model(tmp_path)
    args = {"model_path": str(model), "gpu_memory_mib": 24576}
    # A shard swapped for a FIFO (a download killed and replaced) is never opened: the index's total is used.
    (model / "b.safetensors").unlink()
    os.mkfifo(model / "b.safetensors")
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and result["model"]["weights"]["total"] == total
    assert result["model"]["weights"]["source"] == "model.safetensors.index.json metadata.total_size"
    assert result["model"]["weights"]["headers_problem"] == "b.safetensors is a FIFO, not a regular file"
    # A shard whose header announces more than the file holds (a half-written download).
    (model / "b.safetensors").unlink()
    (model / "b.safetensors").write_bytes((10 ** 6).to_bytes(8, "little") + b"{}")
    result, failed = run_module(sglang_memory_plan.main, args)
    assert not failed and "announces a 1000000-byte header in a 10-byte file" in result["model"]["weights"]["headers_problem"]
    # A config.json that is a symlink out of the model directory is not followed.
    outside = tmp_path / "elsewhere.json"
    outside.write_text((model / "config.json").read_text())
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(outside)
    result, failed = run_module(sglang_memory_plan.main, args)
    assert failed and "config.json is a symlink to" in result["msg"] and "outside the model directory" in result["msg"]
