# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's request log (``--log-requests``): what the server received, after the OpenAI adapter filled it in.

Modelled on ``sglang/srt/utils/request_logger.py`` (RequestLogger) and ``sglang/srt/utils/log_utils.py``
(create_log_targets, log_json); function docstrings name the SGLang function each follows.

- ``Receive: obj=GenerateReqInput(...)`` (or a ``request.received`` JSON event) for every generation request the
  tokenizer manager takes (managers/tokenizer_manager.py: TokenizerManager.generate_request, after
  ``obj.normalize_batch_and_arguments()``): /v1/chat/completions and /v1/completions with the GenerateReqInput
  the OpenAI adapter built, /generate with the request's own ``sampling_params`` (``--preferred-sampling-params``
  is merged later, in ``_create_tokenized_object``), /health and /health_generate with their 1-token
  ``HEALTH_CHECK_<hex>`` request.
- ``Receive OpenAI: obj={...}`` (``request.received.openai``) before it for the OpenAI endpoints, only at
  ``--log-requests-level`` 2 and 3 (entrypoints/openai/serving_base.py: OpenAIServingBase.handle_request).

The lines go to SGLang's own request logger, not to the server log: ``[%Y-%m-%d %H:%M:%S] message`` (never a
`` TPn`` tag or milliseconds), on stdout by default; each ``--log-requests-target`` directory gets a
``<hostname>_0.log`` file (hourly rotation, as SGLang's TimedRotatingFileHandler).

The simulator logs a subset of GenerateReqInput's fields, in SGLang's order (managers/io_struct.py:
GenerateReqInput): those it can fill honestly for the single, text-only requests it serves (GENERATE_REQ_FIELDS).
The chat prompt is left out: SGLang logs the chat template's token ids, which the simulator has no tokenizer to
produce. ``rid`` is the request's own or a fresh uuid hex, as SGLang's; it is not the id of the simulated response.
The raw OpenAI request is rebuilt as pydantic's ``model_dump(exclude_none=True)`` would write it (the request's
keys and the protocol model's non-null defaults, in the model's field order); messages are kept as sent less null
values, where SGLang's message models also drop keys they do not declare. Whitelisted headers (``x-smg-routing-key``
and SGLANG_LOG_REQUEST_HEADERS) are appended as SGLang does, and watermark keys are redacted with
``--enable-watermark``. Not simulated: batches (a list of texts, ``n`` > 1), ``response_format`` constraints, LoRA,
disaggregation fields, the ``Finish:`` lines (log_finished_request).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from datetime import datetime
from logging.handlers import TimedRotatingFileHandler

from sglang_sim import logfmt, sampling

LOGGER_NAME_PREFIX = "sglang_sim.request_log"
HEALTH_CHECK_RID_PREFIX = "HEALTH_CHECK"  # constants.py

# The GenerateReqInput fields the simulator logs, in io_struct.py's order.
GENERATE_REQ_FIELDS = ("rid", "session_id", "text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                       "top_logprobs_num", "return_text_in_logprobs", "stream", "log_metrics")

# request_logger.py: RequestLogger._compute_metadata, per --log-requests-level: (max_length, names left out).
_INPUT_NAMES = frozenset(("text", "input_ids", "input_embeds", "image_data", "audio_data", "video_data", "lora_path"))
LEVEL_METADATA = {
    0: (1 << 30, _INPUT_NAMES | {"sampling_params"}),
    1: (1 << 30, _INPUT_NAMES),
    2: (2048, frozenset()),
    3: (1 << 30, frozenset()),
}
# serving_base.py: the raw OpenAI request is logged from this level on.
OPENAI_REQUEST_MIN_LEVEL = 2

# request_logger.py: WHITELISTED_HEADERS (always x-smg-routing-key, plus SGLANG_LOG_REQUEST_HEADERS).
DEFAULT_LOGGED_HEADERS = ("x-smg-routing-key",)

# sampling/watermarking/core.py: names whose values the log redacts when watermarking is on.
WATERMARK_SECRET_FIELD_NAMES = frozenset(("watermark_key", "watermark_key_b", "watermark_config"))
WATERMARK_CONTAINER_FIELD_NAMES = frozenset(("watermark", "sampling_params", "preferred_sampling_params"))
_SCALARS = (int, float, str, bool, bytes, type(None))

# entrypoints/openai/protocol.py (0.5.23): the request models' fields in declaration order and their non-null
# defaults (dumped from the installed package), which pydantic's model_dump(exclude_none=True) writes.
CHAT_REQUEST_FIELDS = (
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank", "disagg_prefill_dp_rank", "messages", "model",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens", "max_completion_tokens", "n",
    "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options", "temperature", "top_p", "user",
    "tools", "tool_choice", "parallel_tool_calls", "return_hidden_states", "return_routed_experts",
    "routed_experts_start_len", "return_cached_tokens_details", "return_spec_tokens_details", "return_prompt_token_ids",
    "return_token_ids", "return_meta_info", "return_input_ids_in_sglext", "return_output_ids_in_sglext",
    "return_sampling_mask", "sampling_logprobs_mode", "return_flat_raw_output_top_logprobs",
    "return_flat_raw_top_logprobs_b64", "reasoning_effort", "thinking", "task", "top_k", "min_p", "min_tokens", "regex",
    "ebnf", "repetition_penalty", "stop_token_ids", "stop_regex", "no_stop_trim", "ignore_eos", "continue_final_message",
    "skip_special_tokens", "lora_path", "session_id", "session_params", "separate_reasoning", "stream_reasoning",
    "chat_template_kwargs", "max_dynamic_patch", "min_dynamic_patch", "use_audio_in_video", "images_config",
    "video_config", "mm_processor_kwargs", "custom_logit_processor", "custom_params", "watermark", "input_ids", "rid",
    "extra_key", "cache_salt", "priority", "data_parallel_rank")
CHAT_REQUEST_DEFAULTS = {
    "model": "default", "frequency_penalty": 0.0, "logprobs": False, "n": 1, "presence_penalty": 0.0, "stream": False,
    "tool_choice": "auto", "parallel_tool_calls": True, "return_hidden_states": False, "return_routed_experts": False,
    "routed_experts_start_len": 0, "return_cached_tokens_details": False, "return_spec_tokens_details": False,
    "return_prompt_token_ids": False, "return_token_ids": False, "return_meta_info": False,
    "return_input_ids_in_sglext": False, "return_output_ids_in_sglext": False, "return_sampling_mask": False,
    "return_flat_raw_output_top_logprobs": False, "return_flat_raw_top_logprobs_b64": True, "min_tokens": 0,
    "no_stop_trim": False, "ignore_eos": False, "continue_final_message": False, "skip_special_tokens": True,
    "separate_reasoning": True, "stream_reasoning": True, "use_audio_in_video": False}
COMPLETION_REQUEST_FIELDS = (
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank", "disagg_prefill_dp_rank", "model", "prompt",
    "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty", "seed", "stop",
    "stream", "stream_options", "suffix", "temperature", "top_p", "user", "return_hidden_states", "return_routed_experts",
    "routed_experts_start_len", "return_cached_tokens_details", "return_spec_tokens_details", "return_token_ids", "top_k",
    "min_p", "min_tokens", "json_schema", "regex", "ebnf", "repetition_penalty", "stop_token_ids", "stop_regex",
    "no_stop_trim", "ignore_eos", "skip_special_tokens", "lora_path", "session_id", "session_params", "response_format",
    "custom_params", "custom_logit_processor", "watermark", "images_config", "mm_processor_kwargs", "data_parallel_rank",
    "rid", "extra_key", "cache_salt", "priority", "custom_labels")
COMPLETION_REQUEST_DEFAULTS = {
    "model": "default", "echo": False, "frequency_penalty": 0.0, "max_tokens": 16, "n": 1, "presence_penalty": 0.0,
    "stream": False, "temperature": 1.0, "top_p": 1.0, "return_hidden_states": False, "return_routed_experts": False,
    "routed_experts_start_len": 0, "return_cached_tokens_details": False, "return_spec_tokens_details": False,
    "return_token_ids": False, "top_k": -1, "min_p": 0.0, "min_tokens": 0, "repetition_penalty": 1.0,
    "no_stop_trim": False, "ignore_eos": False, "skip_special_tokens": True}
# Fields pydantic's lax mode turns into float (an int) or int (an integral float) in both request models.
_FLOAT_FIELDS = frozenset(("frequency_penalty", "presence_penalty", "temperature", "top_p", "min_p", "repetition_penalty"))
_INT_FIELDS = frozenset(("top_logprobs", "logprobs", "max_tokens", "max_completion_tokens", "n", "seed", "top_k",
                         "min_tokens", "best_of", "priority", "routed_experts_start_len"))


# ---- formatting (request_logger.py) -------------------------------------------------------------------------------
def redact(value, in_watermark_config=False):
    """sampling/watermarking/core.py: redact_watermark_secrets, for JSON values."""
    if isinstance(value, dict):
        return {key: ("<redacted>" if key in WATERMARK_SECRET_FIELD_NAMES or (in_watermark_config and key in ("key", "key_b"))
                      else redact(item, in_watermark_config or key == "watermark"))
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        redacted = [item if isinstance(item, _SCALARS) else redact(item, in_watermark_config) for item in value]
        return redacted if isinstance(value, list) else tuple(redacted)
    return value


def redact_field(name, value, enabled):
    """request_logger.py: _redact_field - by field name, only while watermark redaction is on."""
    if not enabled:
        return value
    if name in WATERMARK_SECRET_FIELD_NAMES:
        return "<redacted>"
    if name in WATERMARK_CONTAINER_FIELD_NAMES:
        return redact(value, in_watermark_config=name == "watermark")
    return value


def to_text(data, max_length=2048, skip_names=frozenset(), redacting=False):
    """request_logger.py: _dataclass_to_string_truncated for a dict or JSON value (a GenerateReqInput: to_text_obj)."""
    if isinstance(data, str):
        if len(data) > max_length:
            half = max_length // 2
            return "%r ... %r" % (data[:half], data[-half:])
        return repr(data)
    if isinstance(data, (list, tuple)):
        maybe_redacted = redact if redacting else (lambda value: value)
        if len(data) > max_length:
            half = max_length // 2
            return str(maybe_redacted(data[:half])) + " ... " + str(maybe_redacted(data[-half:]))
        return str(maybe_redacted(data))
    if isinstance(data, dict):
        parts = ["'%s': %s" % (key, to_text(redact_field(key, value, redacting), max_length, redacting=redacting))
                 for key, value in data.items() if key not in skip_names]
        return "{" + ", ".join(parts) + "}"
    return str(redact(data) if redacting else data)


def to_text_obj(class_name, fields, max_length, skip_names, redacting=False):
    """_dataclass_to_string_truncated's dataclass branch: ``Class(name=value, ...)``, skipped names left out."""
    parts = ["%s=%s" % (name, to_text(redact_field(name, value, redacting), max_length, redacting=redacting))
             for name, value in fields.items() if name not in skip_names]
    return "%s(%s)" % (class_name, ", ".join(parts))


def to_json_value(data, max_length=2048, skip_names=frozenset(), redacting=False):
    """request_logger.py: _transform_data_for_logging."""
    if isinstance(data, str):
        if len(data) > max_length:
            half = max_length // 2
            return data[:half] + "..." + data[-half:]
        return data
    if isinstance(data, (list, tuple)):
        if len(data) > max_length:
            half = max_length // 2
            return ([to_json_value(item, max_length, redacting=redacting) for item in data[:half]] + ["..."]
                    + [to_json_value(item, max_length, redacting=redacting) for item in data[-half:]])
        return [to_json_value(item, max_length, redacting=redacting) for item in data]
    if isinstance(data, dict):
        return {key: to_json_value(redact_field(key, value, redacting), max_length, redacting=redacting)
                for key, value in data.items() if key not in skip_names}
    if isinstance(data, (int, float, bool, type(None))):
        return data
    return str(redact(data) if redacting else data)


def json_event(event: str, data: dict) -> str:
    """log_utils.py: log_json - the message of one JSON event."""
    log_data = {"timestamp": datetime.now().isoformat(), "event": event}
    log_data.update(data)
    return json.dumps(log_data, ensure_ascii=False)


# ---- targets (log_utils.py) ---------------------------------------------------------------------------------------
class _StdoutLineHandler(logging.Handler):
    """logging.StreamHandler(sys.stdout), written as the simulator writes stdout: one os.write per line."""

    def emit(self, record):
        try:
            logfmt._emit(1, self.format(record))  # pylint: disable=protected-access
        except Exception:  # pylint: disable=broad-except
            self.handleError(record)


def _logger_with_handler(name: str, handler: logging.Handler) -> logging.Logger:
    """log_utils.py: _create_logger_with_handler - INFO, not propagated, ``[%(asctime)s] %(message)s``."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
    return logger


def create_log_targets(targets):
    """log_utils.py: create_log_targets - stdout without targets; ``stdout`` or a directory per target (the
    directory gets ``<hostname>_<rank>.log``; the tokenizer manager's rank is 0)."""
    loggers = []
    for target in targets or ["stdout"]:
        if target.lower() == "stdout":
            loggers.append(_logger_with_handler(LOGGER_NAME_PREFIX + ".stdout", _StdoutLineHandler()))
            continue
        os.makedirs(target, exist_ok=True)
        hostname = socket.gethostname()
        handler = TimedRotatingFileHandler(os.path.join(target, "%s_0.log" % hostname), when="H", backupCount=0,
                                           encoding="utf-8")
        loggers.append(_logger_with_handler("%s.file.%s.%s_0" % (LOGGER_NAME_PREFIX, target, hostname), handler))
    return loggers


# ---- what the adapters build ------------------------------------------------------------------------------------------
def _pydantic_lax(body: dict) -> dict:
    """The numbers as the request model holds them: 1 -> 1.0 in float fields, 20.0 -> 20 in int fields."""
    values = dict(body)
    for key, value in body.items():
        if isinstance(value, bool):
            continue
        if key in _FLOAT_FIELDS and isinstance(value, int):
            values[key] = float(value)
        elif key in _INT_FIELDS and isinstance(value, float) and value.is_integer():
            values[key] = int(value)
    return values


def _without_nulls(value):
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _has_message_level_tools(messages) -> bool:
    """protocol.py: _has_message_level_tools."""
    return isinstance(messages, list) and any(
        isinstance(message, dict) and isinstance(message.get("role"), str)
        and message["role"].lower() in ("root", "system", "developer") and bool(message.get("tools"))
        for message in messages)


def chat_request_values(body: dict) -> dict:
    """A chat body as ChatCompletionRequest holds it after its validators (protocol.py): numbers in the fields'
    types, ``tool_choice`` "none" without tools (set_tool_choice_default), and ``reasoning``/``reasoning_effort``
    copied into chat_template_kwargs as thinking/enable_thinking (normalize_reasoning_inputs)."""
    values = _pydantic_lax(body)
    if values.get("tool_choice") is None:
        tools = values.get("tools") is not None or _has_message_level_tools(values.get("messages"))
        values["tool_choice"] = "auto" if tools else "none"
    thinking = None
    reasoning = values.get("reasoning")
    if isinstance(reasoning, dict):
        effort = reasoning.get("effort")
        if effort is None:
            effort = reasoning.get("reasoning_effort")
        if isinstance(effort, (int, float)) and not isinstance(effort, bool):
            effort = float(effort)
        if effort is not None:
            values["reasoning_effort"] = effort
        enabled = reasoning.get("enabled") if reasoning.get("enabled") is not None else reasoning.get("enable", False)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower() in ("1", "true", "yes", "y", "on")
        if enabled:
            thinking = True
    if values.get("reasoning_effort") is not None:
        thinking = values["reasoning_effort"] != "none"
    if thinking is not None:
        kwargs = dict(values["chat_template_kwargs"]) if isinstance(values.get("chat_template_kwargs"), dict) else {}
        kwargs.setdefault("thinking", thinking)
        kwargs.setdefault("enable_thinking", thinking)
        values["chat_template_kwargs"] = kwargs
    if isinstance(values.get("messages"), list):
        values["messages"] = _without_nulls(values["messages"])
    return values


def openai_request_dump(body: dict, fields, defaults) -> dict:
    """The request model's ``model_dump(exclude_none=True)``: the request's keys the model declares and its non-null
    defaults, in field order (keys it does not declare are dropped)."""
    values = chat_request_values(body) if fields is CHAT_REQUEST_FIELDS else _pydantic_lax(body)
    dump = {}
    for name in fields:
        value = values.get(name)
        if value is None:
            value = defaults.get(name)
        if value is not None:
            dump[name] = value
    return dump


def _value(body: dict, name: str, default):
    value = body.get(name)
    return default if value is None else value


# The sampling_params keys of protocol.py: ChatCompletionRequest.to_sampling_params and serving_completions.py:
# _build_sampling_params, in their order; the keys copied from a request field: (field, the field's default).
CHAT_SAMPLING_KEYS = ("temperature", "max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "stop_regex", "top_p", "top_k",
                      "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "regex", "ebnf", "n",
                      "no_stop_trim", "ignore_eos", "skip_special_tokens", "logit_bias", "custom_params", "sampling_seed",
                      "spaces_between_special_tokens", "watermark")
COMPLETION_SAMPLING_KEYS = ("temperature", "max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "stop_regex", "top_p",
                            "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "regex",
                            "json_schema", "ebnf", "n", "no_stop_trim", "ignore_eos", "skip_special_tokens", "logit_bias",
                            "custom_params", "sampling_seed", "watermark")
_COPIED_SAMPLING_KEYS = {
    "min_new_tokens": ("min_tokens", 0), "stop": ("stop", None), "stop_token_ids": ("stop_token_ids", None),
    "stop_regex": ("stop_regex", None), "regex": ("regex", None), "json_schema": ("json_schema", None), "ebnf": ("ebnf", None),
    "n": ("n", 1), "no_stop_trim": ("no_stop_trim", False), "ignore_eos": ("ignore_eos", False),
    "skip_special_tokens": ("skip_special_tokens", True), "logit_bias": ("logit_bias", None),
    "custom_params": ("custom_params", None), "sampling_seed": ("seed", None), "watermark": ("watermark", None)}


def adapter_sampling_params(keys, body: dict, chosen: dict, extra: dict) -> dict:
    """An OpenAI adapter's sampling_params dict: the sampling values it resolved (``chosen``), the endpoint's own
    entries (``extra``) and the rest copied from the request or its model's defaults."""
    params = {}
    for key in keys:
        if key in chosen:
            params[key] = chosen[key]
        elif key in extra:
            params[key] = extra[key]
        else:
            field, default = _COPIED_SAMPLING_KEYS[key]
            params[key] = _value(body, field, default)
    return params


def chat_generate_fields(body: dict, sampling_defaults: str, generation_config: dict) -> dict:
    """The GenerateReqInput of a chat request (entrypoints/openai/serving_chat.py:
    OpenAIServingChat._convert_to_internal_request), whose sampling_params is protocol.py:
    ChatCompletionRequest.to_sampling_params: temperature, top_p, top_k, min_p and repetition_penalty are the
    request's, else generation_config.json's (--sampling-defaults model), else the adapter's defaults
    (sampling.effective_sampling); the penalties are the request's or 0.0."""
    body = chat_request_values(body)
    chosen = sampling.effective_sampling(body, sampling_defaults, generation_config)
    kwargs = body.get("chat_template_kwargs")
    spaces = kwargs.get("spaces_between_special_tokens", True) if isinstance(kwargs, dict) else True
    extra = {"max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens"),
             "spaces_between_special_tokens": spaces}
    sampling_params = adapter_sampling_params(CHAT_SAMPLING_KEYS, body, chosen, extra)
    return {"rid": body.get("rid") or uuid.uuid4().hex, "session_id": body.get("session_id"),
            "sampling_params": sampling_params, "return_logprob": _value(body, "logprobs", False), "logprob_start_len": -1,
            "top_logprobs_num": body.get("top_logprobs") or 0, "return_text_in_logprobs": True,
            "stream": _value(body, "stream", False), "log_metrics": True}


def completion_generate_fields(body: dict) -> dict:
    """The GenerateReqInput of a /v1/completions request (entrypoints/openai/serving_completions.py:
    _convert_to_internal_request, _build_sampling_params): every value the request's or CompletionRequest's default
    (sampling.completion_sampling); nothing from the server."""
    body = _pydantic_lax(body)
    chosen = sampling.completion_sampling(body)
    logprobs = body.get("logprobs")
    extra = {"max_new_tokens": _value(body, "max_tokens", COMPLETION_REQUEST_DEFAULTS["max_tokens"])}
    sampling_params = adapter_sampling_params(COMPLETION_SAMPLING_KEYS, body, chosen, extra)
    return {"rid": body.get("rid") or uuid.uuid4().hex, "session_id": body.get("session_id"), "text": body.get("prompt"),
            "input_ids": None, "sampling_params": sampling_params, "return_logprob": logprobs is not None,
            "logprob_start_len": 0 if body.get("echo") and logprobs else -1,
            "top_logprobs_num": logprobs if logprobs is not None else 0, "return_text_in_logprobs": True,
            "stream": _value(body, "stream", False), "log_metrics": True}


def native_generate_fields(body: dict) -> dict:
    """A /generate body as GenerateReqInput after normalize_batch_and_arguments (managers/io_struct.py:
    _normalize_single_inputs): the request's own sampling_params ({} when absent); --preferred-sampling-params is
    merged into them later (tokenizer_manager.py: _create_tokenized_object), after the log line."""
    sampling_params = body.get("sampling_params")
    return {"rid": body.get("rid") or uuid.uuid4().hex, "session_id": body.get("session_id"), "text": body.get("text"),
            "input_ids": body.get("input_ids"), "sampling_params": {} if sampling_params is None else sampling_params,
            "return_logprob": _value(body, "return_logprob", False), "logprob_start_len": _value(body, "logprob_start_len", -1),
            "top_logprobs_num": _value(body, "top_logprobs_num", 0),
            "return_text_in_logprobs": _value(body, "return_text_in_logprobs", False),
            "stream": _value(body, "stream", False), "log_metrics": _value(body, "log_metrics", True)}


def health_check_fields() -> dict:
    """entrypoints/http_server.py: health_generate - one token from input_ids [0], not counted in the metrics."""
    return {"rid": "%s_%s" % (HEALTH_CHECK_RID_PREFIX, uuid.uuid4().hex), "session_id": None, "text": None, "input_ids": [0],
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}, "return_logprob": False, "logprob_start_len": -1,
            "top_logprobs_num": 0, "return_text_in_logprobs": False, "stream": False, "log_metrics": False}


def _env_bool(name: str, default: bool) -> bool:
    """environ.py: EnvBool."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.lower() in ("true", "1", "yes", "y")


# ---- the logger -------------------------------------------------------------------------------------------------------
class RequestLogger:
    """request_logger.py: RequestLogger, created with the server (its targets, and a target directory's log file,
    exist even without --log-requests, as the tokenizer manager always creates one)."""

    def __init__(self, args: dict, generation_config: dict):
        self.log_requests = bool(args.get("log_requests"))
        self.level = args.get("log_requests_level")
        self.level = 2 if self.level is None else self.level
        self.format = args.get("log_requests_format") or "text"
        self.max_length, self.skip_names = LEVEL_METADATA[self.level] if self.log_requests else (None, frozenset())
        self.targets = create_log_targets(args.get("log_requests_target"))
        # request_logger.py: _watermark_redaction_enabled - in a running server, with watermarking on.
        self.redacting = bool(args.get("enable_watermark"))
        self.sampling_defaults = args.get("sampling_defaults")
        self.generation_config = generation_config
        extra = os.environ.get("SGLANG_LOG_REQUEST_HEADERS", "")
        self.logged_headers = DEFAULT_LOGGED_HEADERS + tuple(name.strip().lower() for name in extra.split(",") if name.strip())

    def _emit(self, message: str) -> None:
        for target in self.targets:
            target.info(message)

    def _headers(self, headers):
        """request_logger.py: _extract_whitelisted_headers."""
        if headers is None:
            return None
        found = {}
        for name in self.logged_headers:
            value = headers.get(name)
            if value:
                found[name] = value
        return found

    def received(self, fields: dict, headers=None) -> None:
        """RequestLogger.log_received_request: the GenerateReqInput the tokenizer manager took."""
        if not self.log_requests:
            return
        fields = {name: fields[name] for name in GENERATE_REQ_FIELDS if name in fields}
        found = self._headers(headers)
        if self.format == "json":
            data = {"rid": fields["rid"], "obj": to_json_value(fields, self.max_length, self.skip_names, self.redacting)}
            if found:
                data["headers"] = found
            self._emit(json_event("request.received", data))
        else:
            suffix = ", headers=%s" % (found,) if found else ""
            obj = to_text_obj("GenerateReqInput", fields, self.max_length, self.skip_names, self.redacting)
            self._emit("Receive: obj=%s%s" % (obj, suffix))

    def openai_received(self, dump: dict, headers=None) -> None:
        """serving_base.py: handle_request logs the raw request at level 2 and 3 (log_openai_received_request)."""
        if not self.log_requests or self.level < OPENAI_REQUEST_MIN_LEVEL:
            return
        max_length = self.max_length if self.max_length is not None else 2048
        found = self._headers(headers)
        if self.format == "json":
            data = {"obj": to_json_value(dump, max_length, redacting=self.redacting)}
            if found:
                data["headers"] = found
            self._emit(json_event("request.received.openai", data))
        else:
            suffix = ", headers=%s" % (found,) if found else ""
            self._emit("Receive OpenAI: obj=%s%s" % (to_text(dump, max_length, redacting=self.redacting), suffix))

    # What the HTTP handlers call, once a request has passed the checks SGLang makes before logging it.
    def log_chat(self, body: dict, headers=None) -> None:
        self.openai_received(openai_request_dump(body, CHAT_REQUEST_FIELDS, CHAT_REQUEST_DEFAULTS), headers)
        self.received(chat_generate_fields(body, self.sampling_defaults, self.generation_config), headers)

    def log_completion(self, body: dict, headers=None) -> None:
        self.openai_received(openai_request_dump(body, COMPLETION_REQUEST_FIELDS, COMPLETION_REQUEST_DEFAULTS), headers)
        self.received(completion_generate_fields(body), headers)

    def log_generate(self, body: dict, headers=None) -> None:
        # io_struct.py: _validate_inputs refuses a request without text or input_ids before the log line.
        if body.get("text") is None and body.get("input_ids") is None:
            return
        self.received(native_generate_fields(body), headers)

    def log_health_check(self, path: str, status: str, draining: bool, headers=None) -> None:
        """http_server.py: health_generate - nothing while starting or draining; /health generates (and logs) only
        while SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is on (the default)."""
        if status == "Starting" or draining:
            return
        if path.split("?", 1)[0] == "/health" and not _env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
            return
        self.received(health_check_fields(), headers)
