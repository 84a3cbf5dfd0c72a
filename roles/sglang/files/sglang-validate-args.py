#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check SGLang server flags with the INSTALLED SGLang: its parser, then its own start-time resolution, no server.

Usage: python sglang-validate-args.py [--] FLAG...   (run with the SGLang virtualenv's python)

1. Parse: sglang.srt.server_args.prepare_server_args(argv), as `sglang serve` / launch_server does (a `--config`
   YAML merged in front). A bad flag exits 2 with argparse's message, e.g. `sglang serve: error: ambiguous option:
   --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill`.
2. Resolve: ServerArgs.resolve_once() and check_server_args(), what the server runs before it starts (launch_server.py:
   run_server; engine.py). A combination SGLang refuses there (an unknown speculative algorithm, steps without topk,
   no_buffer with the overlap schedule, ...) exits 3 with SGLang's exception and where it was raised. The model's
   config.json is read offline (HF_HUB_OFFLINE): a local --model-path is needed. Without a visible GPU the
   resolution runs as on a CUDA device (SGLang's override_platform(is_cuda=True), device "cuda"), and the figures it
   derives from the GPU are not the target's. When the resolution cannot run here (no model config, no resolution
   API, ...) only the parse is checked and a warning names what was not.
On success it prints one JSON line: the SGLang version, the options the argv set (secrets redacted), how far the
check went ("resolution": "full", "cuda-assumed" or "parse-only") and the warnings.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback

PROG = "sglang serve"
NOT_CHECKED = ("SGLang's start-time resolution and checks (ServerArgs.resolve_once, check_server_args: speculative "
               "decoding, mamba cache strategy, memory, parallelism) were not run")
# An exception raised inside these packages is about the environment (model files, hub, CUDA), not the flags.
ENVIRONMENT_PACKAGES = {"transformers", "huggingface_hub", "torch", "triton", "safetensors", "tokenizers", "requests",
                        "urllib3", "httpx", "filelock"}
REFUSAL_TYPES = (ValueError, AssertionError, NotImplementedError, TypeError)
SECRET_DEST = re.compile(r"(key|token|secret|password)$")


class Refused(Exception):
    pass


def sglang_version():
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        # Another distribution may provide the `sglang` import.
        import sglang  # pylint: disable=import-error

        return getattr(sglang, "__version__", None)


def redact(values):
    return {dest: ("********" if SECRET_DEST.search(dest) and value is not None else value)
            for dest, value in values.items()}


def given_values(server_args):
    """The ServerArgs fields the argv set (abbreviations such as --tp included): those that differ from the defaults."""
    from sglang.srt.server_args import ServerArgs  # pylint: disable=import-error

    parser = argparse.ArgumentParser(prog=PROG)
    ServerArgs.add_cli_args(parser)
    defaults = {action.dest: action.default for action in parser._actions}  # pylint: disable=protected-access
    return {dest: getattr(server_args, dest) for dest, default in defaults.items()
            if hasattr(server_args, dest) and getattr(server_args, dest) != default}


def raised_in(error):
    """`path:function` of the innermost frame, the path from the package folder on; and the source line."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "", "", ""
    frame = frames[-1]
    parts = frame.filename.replace(os.sep, "/").split("/")
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in ("site-packages", "dist-packages"):
            parts = parts[index + 1:]
            break
    else:
        parts = parts[-2:]
    return "/".join(parts), frame.name, (frame.line or "").strip()


def is_refusal(error):
    if not isinstance(error, REFUSAL_TYPES):
        return False
    path = raised_in(error)[0]
    return path.split("/", maxsplit=1)[0] not in ENVIRONMENT_PACKAGES


def describe(error):
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    path, function, line = raised_in(error)
    where = f" (raised in {path}:{function}" + (f": {line}" if line and not str(error) else "") + ")" if path else ""
    return text + where


def gpu_visible():
    """None without torch (not a real SGLang install), else whether torch sees a CUDA device."""
    try:
        import torch  # pylint: disable=import-error
    except ImportError:
        return None
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # pylint: disable=broad-except
        return False


def assume_cuda_device():
    """Run the resolution as on a CUDA device: SGLang's own platform override and a declared device."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view  # pylint: disable=import-error
    from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook  # pylint: disable=import-error
    from sglang.srt.runtime_context import override_platform  # pylint: disable=import-error

    override_platform(is_cuda=True).install()

    @register_resolution_hook("handle_missing_default_values")
    def _declare_cuda_device(server_args, previous):  # pylint: disable=unused-variable
        if resolving_view(server_args).device is None:
            declare_resolution(server_args, "sglang-validate-args", device="cuda")
        previous(server_args)


def resolve(server_args, warnings):
    """The resolution the server runs at start; returns how far it went. Raises Refused with SGLang's refusal."""
    if not hasattr(server_args, "resolve_once"):
        warnings.append(f"this SGLang has no ServerArgs.resolve_once: {NOT_CHECKED}.")
        return "parse-only"
    mode = "full"
    if gpu_visible() is False:
        try:
            assume_cuda_device()
        except Exception as error:  # pylint: disable=broad-except
            warnings.append(f"no GPU is visible and the resolution cannot be run as on a CUDA device "
                            f"({describe(error)}): {NOT_CHECKED}.")
            return "parse-only"
        mode = "cuda-assumed"
        warnings.append("no GPU is visible here: SGLang's resolution ran as on a CUDA device (device 'cuda'), so the "
                        "values it derives from the GPU (memory fraction, CUDA graph sizes, attention backend) are not "
                        "the target GPUs' and GPU-specific checks were not made.")
    try:
        server_args.resolve_once()
        server_args.check_server_args()
    except REFUSAL_TYPES as error:
        if is_refusal(error):
            raise Refused(describe(error)) from error
        warnings.append(f"SGLang's resolution could not run here ({describe(error)}): {NOT_CHECKED}.")
        return "parse-only"
    except Exception as error:  # pylint: disable=broad-except
        warnings.append(f"SGLang's resolution could not run here ({describe(error)}): {NOT_CHECKED}.")
        return "parse-only"
    return mode


def main(argv):
    if argv and argv[0] == "--":
        argv = argv[1:]
    # The model's config.json must come from the local --model-path; never from the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sglang.srt.server_args import prepare_server_args  # pylint: disable=import-error

    try:
        server_args = prepare_server_args(argv)
    except ValueError as error:
        # The --config merge (ConfigArgumentMerger) refuses the file.
        print(f"sglang-validate-args: SGLang refuses the --config file: {describe(error)}", file=sys.stderr)
        return 2
    given = given_values(server_args)
    warnings = []
    try:
        mode = resolve(server_args, warnings)
    except Refused as refusal:
        print(f"sglang-validate-args: SGLang's start-time resolution refuses these flags: {refusal}", file=sys.stderr)
        return 3
    resolved = {}
    if mode != "parse-only" and hasattr(server_args, "resolved_dict"):
        values = server_args.resolved_dict()
        resolved = {dest: values[dest] for dest in given if dest in values}
    print(json.dumps({"sglang_version": sglang_version(), "parsed": redact(given), "resolution": mode,
                      "resolved": redact(resolved), "warnings": warnings}, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
