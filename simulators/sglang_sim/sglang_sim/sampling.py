# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which sampling parameters count as the Qwen3.6 model card's, and the text the simulated model writes.

Pure functions; the scheduler and HTTP layer call them. See README.md, "Degenerate mode", for the rules.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import zlib

# Qwen3.6-27B model card (see /work/shared/reference/sglang.md): name -> (thinking, exact values, presence range).
CARD_PROFILES = (
    ("thinking-general", True, {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}, (0.0, 2.0)),
    ("thinking-coding", True, {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}, (0.0, 2.0)),
    ("non-thinking", False, {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0}, (1.0, 2.0)),
)
FLOAT_TOLERANCE = 1e-3

# SGLang's neutral sampling defaults: the chat adapter's _DEFAULT_SAMPLING_PARAMS (entrypoints/openai/protocol.py:
# ChatCompletionRequest) for keys generation_config.json lacks, CompletionRequest's field defaults, and
# sampling/sampling_params.py: SamplingParams' defaults for /generate; presence/frequency penalty 0.0 everywhere.
NEUTRAL_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                    "presence_penalty": 0.0, "frequency_penalty": 0.0}
# Keys --sampling-defaults model takes from generation_config.json; presence_penalty is never among them.
MODEL_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")

# Per-draft-token acceptance probabilities: E[accept len] = 1 + p + p^2 + ... + p^steps.
ACCEPT_PROB_HEALTHY = 0.85   # 3 steps: ~3.19 of 4
ACCEPT_PROB_LOW = 0.25       # 3 steps: ~1.33 of 4
ACCEPT_PROB_LOOP = 0.99      # 3 steps: ~3.94 of 4 (the draft head predicts the loop)

_VOCABULARY = (
    "the a an this that these those it its we they one two three several many each every other another some any "
    "model server request token cache memory batch draft target layer head kernel graph stream queue prefix "
    "answer question value result number sum check step case rule reason method idea example detail point "
    "first second next then after before while because although therefore however also still only even just "
    "compute verify measure compare consider note assume derive count add split merge sort filter return "
    "quick careful simple clear exact small large early late new old common rare useful likely possible "
    "addition arithmetic integer digit carry total equation operand proof claim premise conclusion statement "
    "river mountain garden window kitchen library market harbor bridge station forest valley island desert "
    "write read move hold keep turn open close start finish build test change follow lead bring carry find "
    "quietly slowly directly roughly nearly exactly usually rarely often briefly finally simply clearly "
    "because of in on at by for with from into over under between through during without within across "
    "four five six seven eight nine ten twenty hundred thousand half quarter double triple single pair"
).split()


def _close(left, right) -> bool:
    try:
        return abs(float(left) - float(right)) <= FLOAT_TOLERANCE
    except (TypeError, ValueError):
        return False


def thinking_enabled(request: dict) -> bool:
    kwargs = request.get("chat_template_kwargs") or {}
    value = kwargs.get("enable_thinking", kwargs.get("thinking", True)) if isinstance(kwargs, dict) else True
    return value is not False


def load_generation_config(model_path, fallback: dict) -> dict:
    """The model's generation_config.json: read from a local model directory as SGLang does
    (utils/hf_transformers/common.py: get_generation_config -> GenerationConfig.from_pretrained(model_path)), ``{}``
    when the directory has none; ``fallback`` (the SGLANG_SIM_GENERATION_CONFIG knob) for a hub id."""
    if model_path and os.path.isdir(model_path):
        path = os.path.join(model_path, "generation_config.json")
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return dict(fallback)


def model_default_sampling(sampling_defaults: str, generation_config: dict) -> dict:
    """configs/model_config.py: ModelConfig.get_default_sampling_params - with --sampling-defaults model, the
    keys of MODEL_DEFAULT_KEYS that generation_config.json sets (never presence_penalty); {} with openai."""
    if sampling_defaults != "model":
        return {}
    # SGLang's order: repetition_penalty, temperature, top_k, top_p, min_p.
    order = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
    return {key: generation_config[key] for key in order if generation_config.get(key) is not None}


def effective_sampling(request: dict, sampling_defaults: str, generation_config: dict) -> dict:
    """/v1/chat/completions (protocol.py: ChatCompletionRequest.to_sampling_params): the request's value, else the
    model's generation_config.json value (--sampling-defaults model), else the neutral default. presence_penalty and
    frequency_penalty are the request's or 0.0. --preferred-sampling-params never applies: the adapter has filled
    every key before tokenizer_manager.py merges them ({**preferred, **obj.sampling_params})."""
    values = dict(NEUTRAL_DEFAULTS)
    values.update(model_default_sampling(sampling_defaults, generation_config))
    for key in list(NEUTRAL_DEFAULTS):
        if request.get(key) is not None:
            values[key] = request[key]
    return values


def completion_sampling(request: dict) -> dict:
    """/v1/completions (serving_completions.py: _build_sampling_params): every key from the request, whose fields
    default to the neutral values (protocol.py: CompletionRequest); neither generation_config.json nor
    --preferred-sampling-params reaches it."""
    values = dict(NEUTRAL_DEFAULTS)
    for key in NEUTRAL_DEFAULTS:
        if request.get(key) is not None:
            values[key] = request[key]
    return values


def native_sampling(sampling_params: dict, preferred) -> dict:
    """/generate (managers/tokenizer_manager.py: _create_tokenized_object): {**preferred, **sampling_params} per key,
    then SamplingParams' neutral defaults; generation_config.json is not consulted."""
    values = dict(NEUTRAL_DEFAULTS)
    for source in (preferred or {}, sampling_params or {}):
        for key in NEUTRAL_DEFAULTS:
            if key in source and source[key] is not None:
                values[key] = source[key]
    return values


def parse_preferred(text):
    """--preferred-sampling-params as SGLang reads it (a JSON object), or None."""
    if not text:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def card_profile(request: dict, sampling_defaults: str, generation_config: dict):
    """The name of the card profile a chat request's effective parameters match, or None when they match none."""
    return profile_of(effective_sampling(request, sampling_defaults, generation_config), thinking_enabled(request))


def profile_of(values: dict, thinking: bool):
    """The name of the card profile ``values`` (all keys of NEUTRAL_DEFAULTS) match in this thinking mode, or None."""
    for name, profile_thinking, exact, (presence_low, presence_high) in CARD_PROFILES:
        if profile_thinking != thinking:
            continue
        if not all(_close(values[key], wanted) for key, wanted in exact.items()):
            continue
        try:
            presence = float(values["presence_penalty"])
        except (TypeError, ValueError):
            continue
        if presence_low - FLOAT_TOLERANCE <= presence <= presence_high + FLOAT_TOLERANCE:
            return name
    return None


def last_user_text(messages) -> str:
    for message in reversed(messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content or "")
    return ""


def loop_phrase(question: str) -> str:
    """The sentence a looping model repeats: "The user's question is 2+2. " for "What is 2+2?"."""
    words = re.sub(r"\s+", " ", question).strip()
    words = re.sub(r"^(what|what's|how much|please|tell me|compute|calculate)\s+(is|are)?\s*", "", words, flags=re.I)
    words = words.rstrip("?.! ") or "unclear"
    return "The user's question is %s. " % " ".join(words.split()[:12])


def loop_tokens(question: str, count: int):
    phrase = loop_phrase(question).split(" ")
    phrase = [word + " " for word in phrase if word]
    return [phrase[index % len(phrase)] for index in range(count)]


def varied_tokens(rng: random.Random, count: int):
    """Sentences of words drawn at random: few repeated n-grams, high distinct-n."""
    tokens = []
    sentence_left = 0
    for _index in range(count):
        if sentence_left == 0:
            sentence_left = rng.randint(6, 16)
            word = rng.choice(_VOCABULARY).capitalize()
        else:
            word = rng.choice(_VOCABULARY)
        sentence_left -= 1
        tokens.append(word + ("." if sentence_left == 0 else "") + " ")
    return tokens


def count_prompt_tokens(messages) -> int:
    text = " ".join(str(message.get("content", "")) for message in messages or [] if isinstance(message, dict))
    # Roughly one token per word plus the chat template's role markers.
    return len(text.split()) + 5 * max(1, len(messages or [])) + 3


# ---- greedy decoding, token ids and tool calls --------------------------------------------------------------------
# sampling/sampling_params.py: a temperature below _SAMPLING_EPS is greedy (SGLang sets top_k 1 and temperature 1.0).
SAMPLING_EPS = 1e-6
# Qwen3's <think> / </think> token ids; the simulator's other ids are its own (no tokenizer), stable across runs.
THINK_OPEN_ID = 151667
THINK_CLOSE_ID = 151668
_WORD_ID_BASE = 1000
_OTHER_ID_BASE = 100000
_WORD_INDEX = {word: index for index, word in enumerate(dict.fromkeys(_VOCABULARY))}


def is_greedy(values: dict) -> bool:
    try:
        return float(values.get("temperature")) < SAMPLING_EPS
    except (TypeError, ValueError):
        return False


def greedy_rng(*parts) -> random.Random:
    """The generator of a greedy request: a function of the prompt only, so the same prompt gives the same tokens."""
    digest = hashlib.sha256("\0".join(str(part) for part in parts).encode("utf-8")).hexdigest()
    return random.Random(int(digest[:16], 16))


def token_id(piece: str) -> int:
    """The simulated tokenizer's id of one generated piece (a vocabulary word, capitalised or closing a sentence, the
    thinking markers, or any other text by its CRC)."""
    stripped = piece.strip()
    if stripped == "<think>":
        return THINK_OPEN_ID
    if stripped == "</think>":
        return THINK_CLOSE_ID
    period = stripped.endswith(".")
    word = stripped[:-1] if period else stripped
    capital = word[:1].isupper()
    index = _WORD_INDEX.get(word.lower())
    if index is not None and (not capital or word == word.lower().capitalize()):
        return _WORD_ID_BASE + index * 4 + (1 if capital else 0) + (2 if period else 0)
    return _OTHER_ID_BASE + zlib.crc32(piece.encode("utf-8")) % 50000


def tool_call_arguments(tool: dict, question: str) -> dict:
    """The arguments the simulated model fills in: each required string property takes the last capitalised word of
    the question that does not start it (the city of "What is the weather in Paris?"), else its first word."""
    function = tool.get("function") or {}
    properties = ((function.get("parameters") or {}).get("properties") or {})
    required = (function.get("parameters") or {}).get("required") or list(properties)
    words = [word.strip("?.!,;:'\"") for word in question.split()]
    capitalised = [word for word in words[1:] if word[:1].isupper()]
    value = capitalised[-1] if capitalised else (words[0] if words else "")
    return {name: value for name in required if isinstance(name, str)}


def qwen3_coder_call(name: str, arguments: dict):
    """The pieces of the call as Qwen3.5/3.6 write it (the format SGLang's qwen3_coder detector parses)."""
    pieces = ["<tool_call>\n", "<function=%s>\n" % name]
    for key, value in arguments.items():
        pieces += ["<parameter=%s>\n" % key, "%s\n" % value, "</parameter>\n"]
    return pieces + ["</function>\n", "</tool_call>"]


_QWEN3_CODER_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
_QWEN3_CODER_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def parse_tool_calls(text: str, parser: str):
    """(remaining text, [(name, arguments JSON)]) as SGLang's detector for ``parser`` reads ``text``: qwen3_coder reads
    the XML form Qwen3.5/3.6 write; the JSON-in-<tool_call> parsers (qwen, qwen25, hermes) find no JSON there, so
    the text stays as it is; other parsers are not simulated (nothing parsed)."""
    calls = []
    if parser == "qwen3_coder":
        for match in _QWEN3_CODER_CALL.finditer(text):
            arguments = {key.strip(): value for key, value in _QWEN3_CODER_PARAM.findall(match.group(2))}
            calls.append((match.group(1).strip(), json.dumps(arguments, ensure_ascii=False)))
        if calls:
            text = text[:text.index("<tool_call>")].strip()
    elif parser in ("qwen", "qwen25", "hermes"):
        for match in re.finditer(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", text, re.S):
            try:
                call = json.loads(match.group(1))
            except ValueError:
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                calls.append((call["name"], json.dumps(call.get("arguments") or {}, ensure_ascii=False)))
        if calls:
            text = text[:text.index("<tool_call>")].strip()
    return text, calls
