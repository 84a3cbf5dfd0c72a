# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sampling presets from the Qwen3.6-27B model card, as data shared by roles and modules.

SGLang's ``--sampling-defaults model`` takes temperature, top_p, top_k, min_p and repetition_penalty
from generation_config.json but never presence_penalty, and for /v1/chat/completions the request's
values win anyway, so clients (and the smoke probe) should send these values themselves. What the
server can still supply per endpoint and key is below (``server_protection``; docs/sampling.md).
"""

from __future__ import annotations

import copy
import json

MODE_THINKING_GENERAL = "thinking_general"
MODE_THINKING_CODING = "thinking_coding"
MODE_NON_THINKING = "non_thinking"

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty")

PRESETS = {
    MODE_THINKING_GENERAL: {
        "description": "thinking mode, general tasks",
        "sampling": {
            "temperature": 1.0,
            "top_p": 0.95,
            "top_k": 20,
            "min_p": 0.0,
            "presence_penalty": 0.0,
            "repetition_penalty": 1.0,
        },
        "chat_template_kwargs": None,
    },
    MODE_THINKING_CODING: {
        "description": "thinking mode, precise coding",
        "sampling": {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "min_p": 0.0,
            "presence_penalty": 0.0,
            "repetition_penalty": 1.0,
        },
        "chat_template_kwargs": None,
    },
    MODE_NON_THINKING: {
        "description": "non-thinking (instruct) mode",
        "sampling": {
            "temperature": 0.7,
            "top_p": 0.80,
            "top_k": 20,
            "min_p": 0.0,
            "presence_penalty": 1.5,
            "repetition_penalty": 1.0,
        },
        "chat_template_kwargs": {"enable_thinking": False},
    },
}

MODES = tuple(PRESETS)

SOURCE = "Qwen3.6-27B model card, recommended sampling parameters"


def get_preset(mode):
    """Return a deep copy of the preset for ``mode``; ValueError for an unknown mode."""
    if mode not in PRESETS:
        raise ValueError("unknown sampling mode %r; choose one of %s" % (mode, ", ".join(MODES)))
    return copy.deepcopy(PRESETS[mode])


def request_sampling(mode, overrides=None):
    """Sampling fields of a chat-completion request body for ``mode``, with ``overrides`` applied.

    Returns ``(sampling, chat_template_kwargs)``. An override of None removes that key (the server's
    default then applies); other override keys (``seed``, ``frequency_penalty``) are passed through.
    """
    preset = get_preset(mode)
    sampling = preset["sampling"]
    for key, value in (overrides or {}).items():
        if value is None:
            sampling.pop(key, None)
        else:
            sampling[key] = value
    return sampling, preset["chat_template_kwargs"]


def differences_from_preset(sampling, mode):
    """Keys of ``sampling`` whose values differ from (or are missing against) ``mode``'s preset.

    Returns a dict ``{key: {"sent": value_or_None, "card": card_value}}``; empty when the request
    matches the card. Used to name the parameters behind a sampling loop.
    """
    card = get_preset(mode)["sampling"]
    differences = {}
    for key in SAMPLING_KEYS:
        sent = sampling.get(key)
        if sent is None or float(sent) != float(card[key]):
            differences[key] = {"sent": sent, "card": card[key]}
    return differences


# ---- what the server can supply (SGLang 0.5.23; docs/sampling.md has the table and the source lines) ---------------
# configs/model_config.py: ModelConfig.get_default_sampling_params - the keys --sampling-defaults model takes from
# generation_config.json for /v1/chat/completions. presence_penalty is not among them.
GENERATION_CONFIG_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
ENDPOINT_CHAT = "/v1/chat/completions"
ENDPOINT_COMPLETIONS = "/v1/completions"
ENDPOINT_GENERATE = "/generate"
ENDPOINTS = (ENDPOINT_CHAT, ENDPOINT_COMPLETIONS, ENDPOINT_GENERATE)
MECHANISM_GENERATION_CONFIG = "generation_config.json"
MECHANISM_PREFERRED = "--preferred-sampling-params"


def card_generation_config(existing, mode, overrides=None):
    """The staged model's generation_config.json with the card's values for the keys SGLang takes from it.

    ``existing``: the checkpoint's own generation_config.json (a dict, or None); its other keys (eos_token_id,
    do_sample, ...) are kept. Keys the card does not set, or that an override removes, are left as they were.
    """
    sampling, _kwargs = request_sampling(mode, overrides)
    config = dict(existing or {})
    for key in GENERATION_CONFIG_KEYS:
        if key in sampling:
            config[key] = sampling[key]
    if any(key in sampling for key in ("temperature", "top_p", "top_k", "min_p")):
        # transformers ignores (and warns about) sampling values unless do_sample is on.
        config["do_sample"] = True
    return config


def preferred_sampling_params(mode, overrides=None):
    """The card's values as SGLang's --preferred-sampling-params JSON (keys sorted, compact): /generate requests get
    every key they leave out from it."""
    sampling, _kwargs = request_sampling(mode, overrides)
    values = {key: sampling[key] for key in SAMPLING_KEYS if key in sampling}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def server_protection(mode, overrides=None, sampling_defaults="model"):
    """Per endpoint and key: whether the server supplies the card's value when a client leaves the key out.

    Returns ``{endpoint: {key: {"protected": bool, "mechanism": str or None, "default": value a client that leaves
    the key out gets}}}``. A value a client sends itself always wins and is never protected.
    """
    sampling, _kwargs = request_sampling(mode, overrides)
    neutral = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "presence_penalty": 0.0,
               "repetition_penalty": 1.0}
    table = {}
    for endpoint in ENDPOINTS:
        rows = {}
        for key in SAMPLING_KEYS:
            card = sampling.get(key)
            mechanism = None
            if endpoint == ENDPOINT_CHAT and key in GENERATION_CONFIG_KEYS and sampling_defaults == "model":
                mechanism = MECHANISM_GENERATION_CONFIG
            elif endpoint == ENDPOINT_GENERATE:
                mechanism = MECHANISM_PREFERRED
            protected = mechanism is not None and card is not None
            rows[key] = {"protected": protected, "mechanism": mechanism if protected else None,
                         "default": card if protected else neutral[key], "card": card}
        table[endpoint] = rows
    return table


def applied_by_server(chat_defaults, mode, overrides=None):
    """Which card keys the running server applies to chat requests, from the defaults SGLang logged at start.

    ``chat_defaults``: sglang_log.parse_sampling_defaults_line's dict ({} when SGLang logged none). Returns
    ``{"applied": [keys with the card's value], "differs": {key: {"server": v, "card": c}}, "missing": [keys the
    server does not supply]}``.
    """
    sampling, _kwargs = request_sampling(mode, overrides)
    applied, differs, missing = [], {}, []
    for key in SAMPLING_KEYS:
        if key not in sampling:
            continue
        if key not in (chat_defaults or {}):
            missing.append(key)
        elif float(chat_defaults[key]) == float(sampling[key]):
            applied.append(key)
        else:
            differs[key] = {"server": chat_defaults[key], "card": sampling[key]}
    return {"applied": applied, "differs": differs, "missing": missing}
