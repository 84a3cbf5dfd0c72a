# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang 0.5.23 command line (a subset of its flags, with the real names, defaults and argparse behaviour).

argparse is used exactly as SGLang uses it (allow_abbrev left True), so `--tp` parses as `--tp-size`,
`--speculative-algo` as `--speculative-algorithm`, and the removed `--cuda-graph-max-bs` is an ambiguous prefix of
`--cuda-graph-max-bs-decode` and `--cuda-graph-max-bs-prefill`, as in 0.5.2x (the per-phase flags replaced it).
Flags outside this subset are rejected as `unrecognized arguments` where the real server might accept them.
"""
from __future__ import annotations

import argparse
import random

SPECULATIVE_ALGORITHM_CHOICES = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"]
CUDA_GRAPH_BACKENDS = ["full", "breakable", "disabled"]
DEFAULT_CONTEXT_LENGTH = 262144
DEFAULT_SPEC_MAX_RUNNING_REQUESTS = 48


def _add_model_args(parser):
    parser.add_argument("--model-path", "--model", type=str, required=True,
                        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.")
    parser.add_argument("--tokenizer-path", type=str, default=None, help="The path of the tokenizer.")
    parser.add_argument("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"], help="Tokenizer mode.")
    parser.add_argument("--skip-tokenizer-init", action="store_true", help="Skip tokenizer init.")
    parser.add_argument("--load-format", type=str, default="auto", help="The format of the model weights to load.")
    parser.add_argument("--trust-remote-code", action="store_true", help="Whether to allow custom models defined on the Hub.")
    parser.add_argument("--context-length", type=int, default=None, help="The model's maximum context length.")
    parser.add_argument("--revision", type=str, default=None, help="The specific model version to use.")
    parser.add_argument("--dtype", type=str, default="auto", help="Data type for model weights and activations.")
    parser.add_argument("--kv-cache-dtype", type=str, default="auto", help="Data type for kv cache storage.")
    parser.add_argument("--quantization", type=str, default=None, help="The quantization method.")
    parser.add_argument("--served-model-name", type=str, default=None, help="Override the model name returned by the v1/models endpoint.")
    parser.add_argument("--chat-template", type=str, default=None, help="The builtin chat template name or the path of the chat template file.")
    parser.add_argument("--random-seed", type=int, default=None, help="The random seed.")


def _add_serving_args(parser):
    parser.add_argument("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
    parser.add_argument("--port", type=int, default=30000, help="The port of the HTTP server.")
    parser.add_argument("--api-key", type=str, default=None, help="Set API key of the server.")
    parser.add_argument("--admin-api-key", type=str, default=None, help="Set admin API key for administrative endpoints.")
    parser.add_argument("--enable-metrics", action="store_true", help="Enable log prometheus metrics.")
    parser.add_argument("--log-level", type=str, default="info", help="The logging level of all loggers.")
    parser.add_argument("--log-level-http", type=str, default=None, help="The logging level of HTTP server.")
    parser.add_argument("--log-requests", action="store_true", help="Log metadata, inputs, outputs of all requests.")
    parser.add_argument("--log-requests-level", type=int, default=2, choices=[0, 1, 2, 3], help="Verbosity of --log-requests.")
    parser.add_argument("--decode-log-interval", type=int, default=40, help="The log interval of decode batch.")
    parser.add_argument("--watchdog-timeout", type=float, default=300, help="Set watchdog timeout in seconds.")
    parser.add_argument("--reasoning-parser", type=str, default=None, help="Specify the parser for reasoning models.")
    parser.add_argument("--tool-call-parser", type=str, default=None, help="Specify the parser for handling tool-call interactions.")
    parser.add_argument("--sampling-defaults", type=str, default="model", choices=["openai", "model"],
                        help="Where to get default sampling parameters: 'model' reads generation_config.json, 'openai' uses neutral defaults.")
    parser.add_argument("--preferred-sampling-params", type=str, default=None, help="json-formatted sampling settings.")
    parser.add_argument("--enable-cache-report", action="store_true", help="Return number of cached tokens in usage.prompt_tokens_details.")
    parser.add_argument("--show-time-cost", action="store_true", help="Show time cost of custom marks.")


def _add_memory_args(parser):
    parser.add_argument("--mem-fraction-static", type=float, default=None, help="The fraction of the memory used for static allocation.")
    parser.add_argument("--max-running-requests", type=int, default=None, help="The maximum number of running requests.")
    parser.add_argument("--max-total-tokens", type=int, default=None, help="The maximum number of tokens in the memory pool.")
    parser.add_argument("--chunked-prefill-size", type=int, default=None, help="The maximum number of tokens in a chunk for the chunked prefill.")
    parser.add_argument("--max-prefill-tokens", type=int, default=16384, help="The maximum number of tokens in a prefill batch.")
    parser.add_argument("--schedule-policy", type=str, default="fcfs", help="The scheduling policy of the requests.")
    parser.add_argument("--schedule-conservativeness", type=float, default=1.0, help="How conservative the schedule policy is.")
    parser.add_argument("--page-size", type=int, default=None, help="The number of tokens in a page.")
    parser.add_argument("--disable-radix-cache", action="store_true", help="Disable RadixAttention for prefix caching.")
    parser.add_argument("--max-mamba-cache-size", type=int, default=None, help="The maximum size of the mamba cache.")
    parser.add_argument("--mamba-ssm-dtype", type=str, default=None, choices=["float32", "bfloat16", "float16"],
                        help="The data type of the SSM states in mamba cache.")
    parser.add_argument("--mamba-full-memory-ratio", type=float, default=0.9, help="The ratio of mamba state memory to full kv cache memory.")
    parser.add_argument("--attention-backend", type=str, default=None, help="Choose the kernels for attention layers.")


def _add_parallel_args(parser):
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1, help="The tensor parallelism size.")
    parser.add_argument("--dp-size", "--data-parallel-size", type=int, default=1, help="The data parallelism size.")
    parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1, help="The pipeline parallelism size.")
    parser.add_argument("--ep-size", "--expert-parallel-size", type=int, default=1, help="The expert parallelism size.")
    parser.add_argument("--nnodes", type=int, default=1, help="The number of nodes.")
    parser.add_argument("--node-rank", type=int, default=0, help="The node rank.")
    parser.add_argument("--dist-init-addr", type=str, default=None, help="The host address for initializing distributed backend.")
    parser.add_argument("--base-gpu-id", type=int, default=0, help="The base GPU ID to start allocating GPUs from.")
    parser.add_argument("--disable-custom-all-reduce", action="store_true", help="Disable the custom all-reduce kernel.")


def _add_speculative_args(parser):
    parser.add_argument("--speculative-algorithm", type=str, default=None, choices=SPECULATIVE_ALGORITHM_CHOICES,
                        help="Speculative algorithm.")
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None,
                        help="The path of the draft model weights.")
    parser.add_argument("--speculative-draft-model-revision", type=str, default=None, help="The specific draft model version to use.")
    parser.add_argument("--speculative-num-steps", type=int, default=None, help="The number of steps sampled from draft model.")
    parser.add_argument("--speculative-eagle-topk", type=int, default=None, help="The number of tokens sampled from the draft model in eagle2.")
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=None, help="The number of tokens sampled from the draft model.")
    parser.add_argument("--speculative-accept-threshold-single", type=float, default=1.0, help="Accept a draft token if its probability is above this.")
    parser.add_argument("--speculative-accept-threshold-acc", type=float, default=1.0, help="The accept probability of a draft token is raised.")
    parser.add_argument("--speculative-token-map", type=str, default=None, help="The path of the draft model's small vocab table.")
    parser.add_argument("--speculative-attention-mode", type=str, default="prefill", choices=["prefill", "decode"],
                        help="Attention backend for speculative decoding operations.")


def _add_cuda_graph_args(parser):
    # 0.5.2x split the CUDA graph flags per phase; `--cuda-graph-max-bs` and `--cuda-graph-bs` are gone and
    # become ambiguous prefixes of these pairs.
    parser.add_argument("--cuda-graph-config", type=str, default=None, help="Per-phase CUDA graph settings as JSON.")
    parser.add_argument("--cuda-graph-backend-decode", type=str, default=None, choices=CUDA_GRAPH_BACKENDS, help="Backend for the decode phase.")
    parser.add_argument("--cuda-graph-backend-prefill", type=str, default=None, choices=CUDA_GRAPH_BACKENDS, help="Backend for the prefill phase.")
    parser.add_argument("--cuda-graph-max-bs-decode", type=int, default=None, help="Maximum batch size captured for the decode cuda graph.")
    parser.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None, help="Maximum batch size captured for the prefill cuda graph.")
    parser.add_argument("--cuda-graph-max-seq-len-prefill", type=int, default=None, help="Longest sequence a prefill cuda graph replay admits.")
    parser.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None, help="Explicit list of batch sizes for the decode cuda graph.")
    parser.add_argument("--cuda-graph-bs-prefill", type=int, nargs="+", default=None, help="Explicit list of batch sizes for the prefill cuda graph.")
    parser.add_argument("--disable-prefill-cuda-graph", action="store_true", help="Disable the prefill-phase CUDA graph.")
    parser.add_argument("--disable-decode-cuda-graph", action="store_true", help="Disable the decode-phase CUDA graph.")
    parser.add_argument("--disable-cuda-graph", action="store_true", help="Deprecated: use --cuda-graph-backend-{decode,prefill}=disabled.")
    parser.add_argument("--disable-cuda-graph-padding", action="store_true", help="Disable cuda graph when padding is needed.")
    parser.add_argument("--enable-torch-compile", action="store_true", help="Optimize the model with torch.compile.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang serve")
    _add_model_args(parser)
    _add_serving_args(parser)
    _add_memory_args(parser)
    _add_parallel_args(parser)
    _add_speculative_args(parser)
    _add_cuda_graph_args(parser)
    return parser


def parse_server_args(argv):
    """Parse like SGLang: argparse errors exit 2 with `sglang serve: error: ...` on stderr."""
    return build_parser().parse_args(argv)


def resolve_server_args(namespace) -> dict:
    """The resolved server args as /server_info and the `server_args=` line show them (SGLang resolves after parsing)."""
    args = dict(vars(namespace))
    args["tokenizer_path"] = args["tokenizer_path"] or args["model_path"]
    args["served_model_name"] = args["served_model_name"] or args["model_path"]
    if args["random_seed"] is None:
        args["random_seed"] = random.randint(0, 1 << 30)
    if args["context_length"] is None:
        args["context_length"] = DEFAULT_CONTEXT_LENGTH
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.83
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 8192
    if args["page_size"] is None:
        args["page_size"] = 1
    algorithm = args["speculative_algorithm"]
    if algorithm == "NEXTN":
        # SGLang runs NEXTN (built-in MTP heads) through the EAGLE worker and reports it as EAGLE.
        algorithm = args["speculative_algorithm"] = "EAGLE"
    if algorithm is not None:
        if args["speculative_num_steps"] is None:
            args["speculative_num_steps"] = 3
        if args["speculative_eagle_topk"] is None:
            args["speculative_eagle_topk"] = 1
        if args["speculative_eagle_topk"] == 1:
            # With topk 1 the draft is a chain: SGLang forces num_draft_tokens = num_steps + 1.
            args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
        elif args["speculative_num_draft_tokens"] is None:
            args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
        if args["max_running_requests"] is None:
            args["max_running_requests"] = DEFAULT_SPEC_MAX_RUNNING_REQUESTS
    if args["max_running_requests"] is None:
        args["max_running_requests"] = 256
    if args["cuda_graph_max_bs_decode"] is None:
        args["cuda_graph_max_bs_decode"] = min(args["max_running_requests"], 256)
    if args["max_mamba_cache_size"] is None:
        args["max_mamba_cache_size"] = args["max_running_requests"] * 2
    args["device"] = "cuda"
    args["disable_cuda_graph"] = bool(args["disable_cuda_graph"] or args["cuda_graph_backend_decode"] == "disabled"
                                      or args["disable_decode_cuda_graph"])
    return args
