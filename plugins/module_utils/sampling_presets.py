# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sampling presets from the Qwen3.6-27B model card, as data shared by roles and modules.

SGLang's ``--sampling-defaults model`` takes temperature, top_p, top_k, min_p and repetition_penalty
from generation_config.json but never presence_penalty, and for /v1/chat/completions the request's
values win anyway, so clients (and the smoke probe) must send these values themselves.
"""

from __future__ import annotations

import copy

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
