# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The argparse type converters SGLang 0.5.23's parser uses, reimplemented with the standard library.

The spec (sglang_0_5_23_args.json) names each option's converter; TYPE_CONVERTERS maps those names to these
functions. Each keeps SGLang's function name, because argparse's error text names it (`invalid human_readable_int
value: 'x'` when a converter raises ValueError; an ArgumentTypeError's own message otherwise).
"""
from __future__ import annotations

import argparse
import json
import re
from decimal import Decimal

CUDA_GRAPH_PHASES = ("decode", "prefill")
# sglang/srt/model_executor/cuda_graph_config.py: ALLOWED_KEYS_PER_PHASE.
CUDA_GRAPH_ALLOWED_KEYS_PER_PHASE = {
    "decode": ("backend", "max_bs", "bs"),
    "prefill": ("backend", "max_bs", "bs", "max_context_size", "full_prefill_max_req",
                "full_prefill_prefix_chunk_tokens", "max_seq_len"),
}
_INT64 = (-(1 << 63), (1 << 64) - 1)


def human_readable_int(value: str) -> int:
    """sglang/srt/utils/common.py: human_readable_int: `128k` -> 128000, `1Ki` -> 1024, plain integers as int()."""
    value = value.strip()
    si_multiplier = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec_multiplier = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec_multiplier:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec_multiplier[suffix]
        return int(Decimal(number) * si_multiplier[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def _reject_constant(name):
    # orjson, which SGLang's json_list_type uses, has no NaN/Infinity literals.
    raise json.JSONDecodeError("unexpected character", name, 0)


def _int64(text):
    number = int(text)
    if not _INT64[0] <= number <= _INT64[1]:
        # orjson: "Integer exceeds 64-bit range".
        raise json.JSONDecodeError("Integer exceeds 64-bit range", text, 0)
    return number


def json_list_type(value):
    """sglang/srt/utils/common.py: json_list_type (orjson.loads; a JSON error becomes argparse's message)."""
    try:
        return json.loads(value, parse_constant=_reject_constant, parse_int=_int64)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def nullable_str(val: str):
    """sglang/srt/utils/common.py: nullable_str: empty or "None" is None."""
    if not val or val == "None":
        return None
    return val


def parse_cuda_graph_backend_arg(raw: str) -> str:
    """sglang/srt/model_executor/cuda_graph_config.py: parse_cuda_graph_backend_arg."""
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError(
            "tc_piecewise was removed; select breakable, full, or disabled"
        )
    return raw


def parse_cuda_graph_config_arg(raw: str):
    """sglang/srt/model_executor/cuda_graph_config.py: parse_cuda_graph_config_arg (JSON phase -> settings)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
        )
    result = {}
    for phase, phase_settings in parsed.items():
        phase = str(phase)
        if phase not in CUDA_GRAPH_PHASES:
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config: unknown phase '{phase}', expected one of {CUDA_GRAPH_PHASES}"
            )
        if not isinstance(phase_settings, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config['{phase}'] must be a JSON object, got "
                f"{type(phase_settings).__name__}"
            )
        if "backend" in phase_settings:
            parse_cuda_graph_backend_arg(phase_settings["backend"])
        allowed = CUDA_GRAPH_ALLOWED_KEYS_PER_PHASE[phase]
        result[phase] = {}
        for key, value in phase_settings.items():
            if key not in allowed:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {allowed}"
                )
            result[phase][key] = value
    return result


# The names the spec uses (dump_sglang_args.py: builtins by name, SGLang's converters by module and name).
TYPE_CONVERTERS = {
    "int": int,
    "float": float,
    "str": str,
    "json.loads": json.loads,
    "sglang.srt.utils.common.human_readable_int": human_readable_int,
    "sglang.srt.utils.common.json_list_type": json_list_type,
    "sglang.srt.utils.common.nullable_str": nullable_str,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}
