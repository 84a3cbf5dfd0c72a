# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Simulator-only settings: SGLANG_SIM_* environment variables, overridden by `--sim-*` flags.

`--sim-*` flags are taken out of argv before SGLang's own parser sees it, so they never change how SGLang's
flags (and their abbreviations) parse. Without a fault in either, the installed `sglang` stand-in release's
STANDIN_FAULT applies, so a mirror can offer a release that fails to start.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field

FAULT_MODES = ("healthy", "oom", "never-ready", "low-accept", "ignore-sigterm", "degenerate", "wrong-drafts", "rejected-drafts",
               "tool-call-in-reasoning", "long-context-accept", "hang-after")
SIGTERM_EXITS = ("sigkill", "clean")

# Knobs taken away, with why: a run that still sets one is refused rather than silently run on other figures.
REMOVED_KNOBS = {
    ("SGLANG_SIM_GPU_MEMORY_GB", "--sim-gpu-memory-gb"): "the GPUs and their memory are what the NVIDIA driver stand-in "
                                                         "reports (sglang_sim/cuda.py, SGLANG_SIM_NVIDIA_STANDIN_DIR)",
}

# The generation_config.json the simulated model ships (used with --sampling-defaults model).
DEFAULT_GENERATION_CONFIG = {"temperature": 1.0, "top_p": 0.95, "top_k": 20}


@dataclass
class SimKnobs:
    startup_seconds: float = 4.0
    faults: frozenset = field(default_factory=frozenset)
    iteration_ms: float = 30.0
    seed: int = None
    generation_config: dict = field(default_factory=lambda: dict(DEFAULT_GENERATION_CONFIG))
    max_loop_tokens: int = 1024
    sigterm_exit: str = "sigkill"
    # long-context-accept: prompts longer than this many tokens get no draft accepted.
    long_context_tokens: int = 32768
    # hang-after: the requests served before every further one hangs.
    hang_after: int = 100

    def has(self, fault: str) -> bool:
        return fault in self.faults


def _sim_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang-sim", allow_abbrev=False, add_help=False)
    parser.add_argument("--sim-startup-seconds", type=float)
    parser.add_argument("--sim-fault", type=str)
    parser.add_argument("--sim-iteration-ms", type=float)
    parser.add_argument("--sim-seed", type=int)
    parser.add_argument("--sim-generation-config", type=str)
    parser.add_argument("--sim-max-loop-tokens", type=int)
    parser.add_argument("--sim-sigterm-exit", type=str, choices=SIGTERM_EXITS)
    parser.add_argument("--sim-long-context-tokens", type=int)
    parser.add_argument("--sim-hang-after", type=int)
    return parser


def split_sim_argv(argv):
    """Separate `--sim-NAME VALUE` / `--sim-NAME=VALUE` tokens from SGLang's own arguments."""
    sglang_argv, sim_argv = [], []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token.startswith("--sim-"):
            sim_argv.append(token)
            if "=" not in token and index + 1 < len(argv):
                sim_argv.append(argv[index + 1])
                index += 1
        else:
            sglang_argv.append(token)
        index += 1
    return sglang_argv, sim_argv


def parse_faults(text: str) -> frozenset:
    faults = frozenset(part.strip() for part in (text or "").split(",") if part.strip())
    unknown = sorted(faults - set(FAULT_MODES))
    if unknown:
        raise ValueError("unknown fault mode(s) %s; choose from %s" % (", ".join(unknown), ", ".join(FAULT_MODES)))
    return faults - {"healthy"}


def standin_fault() -> str:
    """The fault the installed `sglang` stand-in release carries (its STANDIN_FAULT); "" without one."""
    try:
        import sglang  # pylint: disable=import-outside-toplevel
    except ImportError:
        return ""
    return getattr(sglang, "STANDIN_FAULT", "") or ""


def load_knobs(sim_argv, environ=None) -> SimKnobs:
    environ = os.environ if environ is None else environ
    parser = _sim_parser()
    for (env_name, flag), reason in REMOVED_KNOBS.items():
        if environ.get(env_name) or any(token.split("=", 1)[0] == flag for token in sim_argv):
            parser.error("%s / %s was removed: %s" % (env_name, flag, reason))
    flags = parser.parse_args(sim_argv)

    def pick(flag_value, env_name, convert, default):
        if flag_value is not None:
            return flag_value
        raw = environ.get(env_name)
        if raw is None or raw == "":
            return default
        try:
            return convert(raw)
        except ValueError:
            parser.error("%s=%r is not valid" % (env_name, raw))
        return default

    knobs = SimKnobs()
    knobs.startup_seconds = max(0.0, pick(flags.sim_startup_seconds, "SGLANG_SIM_STARTUP_SECONDS", float, knobs.startup_seconds))
    knobs.iteration_ms = max(0.0, pick(flags.sim_iteration_ms, "SGLANG_SIM_ITERATION_MS", float, knobs.iteration_ms))
    knobs.seed = pick(flags.sim_seed, "SGLANG_SIM_SEED", int, None)
    knobs.max_loop_tokens = max(1, pick(flags.sim_max_loop_tokens, "SGLANG_SIM_MAX_LOOP_TOKENS", int, knobs.max_loop_tokens))
    knobs.long_context_tokens = max(1, pick(flags.sim_long_context_tokens, "SGLANG_SIM_LONG_CONTEXT_TOKENS", int,
                                            knobs.long_context_tokens))
    knobs.hang_after = max(0, pick(flags.sim_hang_after, "SGLANG_SIM_HANG_AFTER", int, knobs.hang_after))
    knobs.sigterm_exit = pick(flags.sim_sigterm_exit, "SGLANG_SIM_SIGTERM_EXIT", str, knobs.sigterm_exit)
    if knobs.sigterm_exit not in SIGTERM_EXITS:
        parser.error("SGLANG_SIM_SIGTERM_EXIT must be one of %s" % ", ".join(SIGTERM_EXITS))
    fault_text = pick(flags.sim_fault, "SGLANG_SIM_FAULT", str, None)
    fault_origin = ""
    if fault_text is None:
        fault_text, fault_origin = standin_fault() or "healthy", "the installed sglang stand-in's STANDIN_FAULT: "
    try:
        knobs.faults = parse_faults(fault_text)
    except ValueError as error:
        parser.error(fault_origin + str(error))
    config_text = pick(flags.sim_generation_config, "SGLANG_SIM_GENERATION_CONFIG", str, None)
    if config_text:
        try:
            config = json.loads(config_text)
        except ValueError:
            parser.error("the simulated generation config must be a JSON object")
        if not isinstance(config, dict):
            parser.error("the simulated generation config must be a JSON object")
        knobs.generation_config = config
    return knobs
