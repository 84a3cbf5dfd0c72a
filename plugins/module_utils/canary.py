# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Canaries that catch an SGLang server that is up but wrong; the logic behind the sglang_canary module.

Each canary returns ``{name, passed, message, details}`` (passed None: skipped, the message says why). The server is
reached through a ``Client`` (one method, ``call(method, path, body, timeout)`` -> parsed JSON or text), so the
functions run as well on synthetic answers. What the canaries read from SGLang (read from its sources):

- ``POST /generate`` answers ``{"text", "output_ids", "meta_info"}`` for a finished request (tokenizer_manager.py:
  _handle_batch_output; ``output_ids`` is beside ``meta_info``, not in it). ``meta_info.completion_tokens`` counts the
  generated tokens; with speculative decoding ``meta_info.spec_verify_ct`` counts the verify passes and
  ``spec_accept_length`` = completion_tokens / spec_verify_ct (_calculate_spec_decoding_metrics).
- A temperature below 1e-6 is greedy (sampling_params.py: _SAMPLING_EPS).
- ``/v1/chat/completions`` returns a parsed call as ``message.tool_calls[]`` (``function.name``, ``function.arguments``
  a JSON string) with ``finish_reason`` "tool_calls" (serving_chat.py: _process_tool_calls); the reasoning parser runs
  first, so a call written inside the thinking block ends up in ``reasoning_content`` (sgl-project/sglang #26172,
  #20789).
- ``/server_info`` has the resolved server args (``speculative_algorithm``, ``context_length``, ``tool_call_parser``,
  ``version``) and ``api_key`` in clear text: only named fields are taken from it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import random
import re
import threading
import time

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file, redact
from ansible_collections.llmops.serving.plugins.module_utils.sglang_metrics import gauge_values

CANARIES = ("greedy_reference", "speculative_lossless", "tool_call", "long_context_acceptance", "soak")
DEFAULT_PROMPTS = [
    "Explain in two sentences how a bicycle gear changes the effort needed to climb a hill.",
    "List the first five prime numbers and say what makes a number prime.",
    "Write a short, friendly note reminding a neighbour that the library opens at nine tomorrow.",
    "Describe the water cycle to a ten-year-old in three sentences.",
]
REFERENCE_FORMAT = 1
MAX_REFERENCE_BYTES = 4 * 1024 * 1024
REFERENCE_MODE = 0o644
TEXT_CHARS = 240
WINDOW = 8

TOOL_NAME = "get_weather"
TOOL_ARGUMENT = "city"
WEATHER_TOOL = {"type": "function", "function": {
    "name": TOOL_NAME, "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {TOOL_ARGUMENT: {"type": "string", "description": "The city name."}},
                   "required": [TOOL_ARGUMENT]}}}
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool to find out."
# How a call looks when it was not parsed: Qwen3.5/3.6's XML form (qwen3_coder) or the JSON form (qwen, hermes).
_RAW_CALL_RE = re.compile(r"<tool_call>|<function=\s*%s\b|\"name\"\s*:\s*\"%s\"" % (TOOL_NAME, TOOL_NAME))

# A short and a long prompt for the acceptance canary: neutral prose from these words, then a task.
_PROSE_WORDS = (
    "the river runs past the old mill and under a stone bridge where children stop to watch the boats while "
    "traders carry bread fruit and cloth to the market square each morning before the bells ring across the valley "
    "and farmers talk about rain soil harvest prices roads and the long winter that shaped the town and its people"
).split()
SUMMARY_TASK = "\n\nSummarise the text above in one sentence."
SHORT_PROSE_WORDS = 200
# Room left in the context beside the long prompt: the generated tokens and the template's.
CONTEXT_MARGIN = 256


class CanaryError(Exception):
    """A request gave nothing to use (the reason is free of the API key once the module has scrubbed it)."""


class ReferenceFileError(Exception):
    """The reference file cannot be used (``fatal``: not even replaced by refresh_reference - a symlink, not a file)."""

    def __init__(self, message, fatal=False):
        super().__init__(message)
        self.fatal = fatal


def quote(text, limit=TEXT_CHARS, secret=None):
    """``text`` for a message: control characters escaped (json's escapes), the key masked, cut to ``limit``."""
    if text is None:
        return None
    escaped = json.dumps(str(text), ensure_ascii=False)[1:-1]
    return redact.shortened(escaped, limit, secrets=(secret,) if secret else (), ellipsis="...")


def canary(name, passed, message, **details):
    return {"name": name, "passed": passed, "message": message, "details": details}


def skipped(name, why):
    return canary(name, None, "skipped: " + why)


# ---- the reference file ---------------------------------------------------------------------------------------------
def _canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def key_hash(key, reference_tokens):
    """The hash a reference is filed under: the caller's key (model revision, SGLang release, the flags that change
    numerics) and the number of tokens compared."""
    return hashlib.sha256(_canonical({"key": key, "reference_tokens": reference_tokens}).encode("utf-8")).hexdigest()


def base_key(key):
    """The key without its speculative-decoding entries (names starting with ``speculative``): a deployment without
    speculation of the same model, release and numerics has this key."""
    return dict((name, value) for name, value in key.items() if not str(name).startswith("speculative"))


def _is_ids(value):
    return isinstance(value, list) and all(isinstance(item, int) and not isinstance(item, bool) for item in value)


def _entry_error(entry_hash, entry):
    if not isinstance(entry, dict):
        return "entry %s is not an object" % entry_hash[:12]
    if not isinstance(entry.get("key"), dict) or not isinstance(entry.get("reference_tokens"), int):
        return "entry %s has no key or reference_tokens" % entry_hash[:12]
    if key_hash(entry["key"], entry["reference_tokens"]) != entry_hash:
        return "entry %s was written for another key (its key hashes to something else)" % entry_hash[:12]
    if not isinstance(entry.get("speculative"), bool) or not isinstance(entry.get("prompts"), dict):
        return "entry %s has no speculative flag or prompts" % entry_hash[:12]
    for prompt, output in entry["prompts"].items():
        if not isinstance(output, dict) or not _is_ids(output.get("output_ids")) or not isinstance(output.get("text"), str):
            return "entry %s: the output of prompt %s is not output_ids and text" % (entry_hash[:12], quote(prompt, 60))
    return None


def load_references(path):
    """The references in ``path`` ({"format": 1, "entries": {hash: entry}}); an empty set when there is no file.

    Raises ReferenceFileError for a file that cannot be trusted: not a regular file (a symlink is never followed:
    fatal), larger than MAX_REFERENCE_BYTES, not JSON, or an entry that does not hash to its own key."""
    try:
        raw = atomic_file.read_regular(path, MAX_REFERENCE_BYTES + 1)
    except FileNotFoundError:
        return {"format": REFERENCE_FORMAT, "entries": {}}
    except atomic_file.NotARegularFile as exc:
        raise ReferenceFileError("the reference file %s is %s, not a regular file; it is left alone" % (path, exc.found),
                                 fatal=True) from None
    except OSError as exc:
        raise ReferenceFileError("the reference file %s cannot be read: %s" % (path, exc.strerror or exc), fatal=True) from None
    if len(raw) > MAX_REFERENCE_BYTES:
        raise ReferenceFileError("the reference file %s is larger than %d bytes" % (path, MAX_REFERENCE_BYTES))
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReferenceFileError("the reference file %s is not JSON (%s)" % (path, quote(str(exc), 120))) from None
    if not isinstance(data, dict) or data.get("format") != REFERENCE_FORMAT or not isinstance(data.get("entries"), dict):
        raise ReferenceFileError("the reference file %s is not a format-%d reference file" % (path, REFERENCE_FORMAT))
    for entry_hash, entry in data["entries"].items():
        problem = _entry_error(entry_hash, entry)
        if problem:
            raise ReferenceFileError("the reference file %s is corrupt: %s" % (path, problem))
    return data


def reference_text(data):
    return (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode("utf-8")


def write_references(path, data):
    atomic_file.atomic_write(path, reference_text(data), REFERENCE_MODE)


# ---- talking to the server ------------------------------------------------------------------------------------------
def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


# The SGLang release and the resolved server arguments /server_info reports that change the numbers behind a greedy
# token: the model and its weights, parallelism, precision, kernels, speculative decoding. Port, key, log level or parsers do not, and are left out
# so that a reference survives them, and so is random_seed (SGLang draws one per start; greedy tokens do not use it).
# The speculative_* ones are what base_key() drops.
NUMERIC_SERVER_FIELDS = (
    "version", "model_path", "revision", "tokenizer_path", "dtype", "quantization", "kv_cache_dtype", "tp_size", "pp_size", "dp_size",
    "ep_size", "enable_dp_attention", "attention_backend", "sampling_backend", "moe_runner_backend",
    "enable_deterministic_inference", "disable_cuda_graph", "chunked_prefill_size",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def numeric_server_args(info):
    """{name: value} of NUMERIC_SERVER_FIELDS in a /server_info answer (scalars only, strings cut)."""
    found = {}
    for name in NUMERIC_SERVER_FIELDS:
        value = info.get(name)
        if isinstance(value, str):
            found[name] = quote(value, 200)
        elif value is None or isinstance(value, (bool, int)) or (isinstance(value, float) and not math.isnan(value)):
            found[name] = value
    return found


def server_facts(client, timeout):
    """The fields of /server_info the canaries need (never the rest: it holds the API key in clear text)."""
    try:
        info = client.call("GET", "/server_info", None, timeout)
    except CanaryError as exc:
        return {"error": str(exc)}
    if not isinstance(info, dict):
        return {"error": "/server_info is not a JSON object"}
    facts = {}
    algorithm = info.get("speculative_algorithm")
    facts["speculative_algorithm"] = algorithm if isinstance(algorithm, str) and algorithm else None
    for name in ("context_length", "speculative_num_draft_tokens", "speculative_num_steps"):
        value = info.get(name)
        facts[name] = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    for name in ("tool_call_parser", "reasoning_parser", "version"):
        value = info.get(name)
        facts[name] = quote(value, 80) if isinstance(value, str) and value else None
    facts["numerics"] = numeric_server_args(info)
    return facts


def generate(client, text, max_new_tokens, timeout):
    """(output_ids, text, meta_info) of one greedy /generate request; CanaryError for an answer without them."""
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    answer = client.call("POST", "/generate", body, timeout)
    if not isinstance(answer, dict):
        raise CanaryError("/generate answered something that is not a JSON object: %s" % quote(answer, 120))
    ids, out_text, meta = answer.get("output_ids"), answer.get("text"), answer.get("meta_info")
    if not _is_ids(ids):
        raise CanaryError("/generate answered without output_ids (a list of token ids)")
    if not isinstance(out_text, str) or not isinstance(meta, dict):
        raise CanaryError("/generate answered without text or meta_info")
    if len(ids) > max_new_tokens:
        raise CanaryError("/generate answered %d token ids for max_new_tokens %d" % (len(ids), max_new_tokens))
    return ids, out_text, meta


def first_difference(expected, actual):
    """The first position where two id lists differ (a shorter list differs where it ends), or None."""
    for position, (left, right) in enumerate(zip(expected, actual)):
        if left != right:
            return position
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def mismatch(prompt, expected, actual, secret=None, what="reference"):
    """Details and a sentence for outputs that differ: the prompt, the first differing position, the ids from there and
    both texts."""
    position = first_difference(expected["output_ids"], actual["output_ids"])
    details = {"prompt": quote(prompt, 120, secret), "position": position,
               "expected_ids": expected["output_ids"][position:position + WINDOW],
               "actual_ids": actual["output_ids"][position:position + WINDOW],
               "expected_text": quote(expected["text"], TEXT_CHARS, secret), "actual_text": quote(actual["text"], TEXT_CHARS, secret)}
    sentence = ("prompt %s: token %d differs from the %s (expected ids %s, got %s; expected text \"%s\", got \"%s\")" % (
        details["prompt"], position, what, details["expected_ids"], details["actual_ids"], quote(expected["text"], 80, secret),
        quote(actual["text"], 80, secret)))
    return details, sentence


# ---- the canaries ---------------------------------------------------------------------------------------------------
def run_greedy(client, prompts, tokens, timeout):
    """Each prompt's greedy output: {prompt: {"output_ids", "text"}}, or CanaryError."""
    outputs = {}
    for prompt in prompts:
        ids, text, _meta = generate(client, prompt, tokens, timeout)
        outputs[prompt] = {"output_ids": ids, "text": text}
    return outputs


def greedy_reference(outputs, entry, refresh, check_mode, secret=None):
    """Compare ``outputs`` with the recorded ``entry`` (None: none for this key). Returns (canary, prompts to record)."""
    name = "greedy_reference"
    recorded = dict(entry["prompts"]) if entry else {}
    missing = [prompt for prompt in outputs if prompt not in recorded]
    if refresh or not entry:
        changed = [quote(prompt, 120, secret) for prompt in outputs if prompt in recorded and recorded[prompt] != outputs[prompt]]
        why = "refresh_reference is set" if refresh else "no reference was recorded for this key"
        verb = "would record" if check_mode else "recorded"
        return canary(name, True, "%s the greedy reference of %d prompts (%s)" % (verb, len(outputs), why),
                      recorded=not check_mode, differed_from_previous=changed), dict(outputs)
    failures, details = [], []
    for prompt, output in outputs.items():
        if prompt in recorded and recorded[prompt]["output_ids"] != output["output_ids"]:
            detail, sentence = mismatch(prompt, recorded[prompt], output, secret)
            failures.append(sentence)
            details.append(detail)
    to_record = dict((prompt, outputs[prompt]) for prompt in missing)
    if failures:
        return canary(name, False, "%d of %d prompts differ from the recorded greedy reference; first: %s" % (
            len(failures), len(outputs) - len(missing), failures[0]), mismatches=details, recorded=False), to_record
    message = "%d prompts match the recorded greedy reference" % (len(outputs) - len(missing))
    if missing:
        message += "; %s %d new prompts" % ("would record" if check_mode else "recorded", len(missing))
    return canary(name, True, message, mismatches=[], recorded=bool(missing) and not check_mode), to_record


def speculative_lossless(client, outputs, prompts, tokens, timeout, speculative, plain_entry, secret=None):
    """With speculation on: a second identical greedy request per prompt must give the same tokens, and the tokens must
    equal the reference of the same key recorded without speculation when there is one."""
    name = "speculative_lossless"
    if not speculative:
        return skipped(name, "the server runs without speculative decoding")
    failures, details = [], []
    again = run_greedy(client, prompts, tokens, timeout)
    for prompt in prompts:
        if again[prompt]["output_ids"] != outputs[prompt]["output_ids"]:
            detail, sentence = mismatch(prompt, outputs[prompt], again[prompt], secret, "first identical request")
            failures.append("two identical greedy requests disagree: " + sentence)
            details.append(detail)
    compared = 0
    if plain_entry:
        for prompt in prompts:
            expected = plain_entry["prompts"].get(prompt)
            if expected is None:
                continue
            compared += 1
            if expected["output_ids"] != outputs[prompt]["output_ids"]:
                detail, sentence = mismatch(prompt, expected, outputs[prompt], secret, "reference recorded without speculation")
                failures.append("speculative decoding is not lossless: " + sentence)
                details.append(detail)
    checked = "two identical greedy requests per prompt agree"
    if compared:
        checked += " and %d prompts match the reference recorded without speculation" % compared
    else:
        checked += "; no reference recorded without speculation for this key, so lossless output was not compared"
    if failures:
        return canary(name, False, "%d problems; first: %s" % (len(failures), failures[0]), mismatches=details,
                      compared_without_speculation=compared)
    return canary(name, True, checked, mismatches=[], compared_without_speculation=compared)


def _tool_call_found(message):
    """(field, excerpt) of a call to the tool written as text in ``reasoning_content`` or ``content``, or (None, None)."""
    for field in ("reasoning_content", "content"):
        text = message.get(field)
        if isinstance(text, str):
            match = _RAW_CALL_RE.search(text)
            if match and TOOL_NAME in text:
                return field, text[max(0, match.start() - 20):match.start() + 120]
    return None, None


def judge_tool_call(response, parser, secret=None):
    """The tool_call canary's verdict on one chat completion."""
    name = "tool_call"
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return canary(name, False, "the chat completion has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        names = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            names.append(quote(function.get("name"), 60, secret) if isinstance(function.get("name"), str) else None)
            if function.get("name") != TOOL_NAME:
                continue
            arguments = function.get("arguments")
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else None
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                return canary(name, False, "the call to %s carries arguments that are not a JSON object: %s" % (
                    TOOL_NAME, quote(arguments, 120, secret)), finish_reason=finish)
            city = parsed.get(TOOL_ARGUMENT)
            if not isinstance(city, str) or not city.strip():
                return canary(name, False, "the call to %s has no %s argument: %s" % (TOOL_NAME, TOOL_ARGUMENT, quote(arguments, 120, secret)),
                              finish_reason=finish)
            return canary(name, True, "the model called %s(%s=%s) as a tool call (finish_reason %s)" % (
                TOOL_NAME, TOOL_ARGUMENT, quote(city, 60, secret), finish), finish_reason=finish, arguments=quote(arguments, 120, secret))
        return canary(name, False, "tool_calls name %s, not %s" % (names, TOOL_NAME), finish_reason=finish)
    field, excerpt = _tool_call_found(message)
    if field == "reasoning_content":
        return canary(name, False, "the tool call came back inside reasoning_content and tool_calls is null: the model wrote "
                      "it in its thinking block, where the reasoning parser takes it before the tool-call parser %s sees it "
                      "(the known SGLang bug with Qwen3.5/3.6, sgl-project/sglang #26172, #20789)" % parser,
                      finish_reason=finish, found_in=field, excerpt=quote(excerpt, 160, secret))
    if field == "content":
        return canary(name, False, "the tool call came back as text in content and tool_calls is null: the tool-call parser "
                      "%s did not parse it (is --tool-call-parser the model's format, qwen3_coder for Qwen3.5/3.6?)" % parser,
                      finish_reason=finish, found_in=field, excerpt=quote(excerpt, 160, secret))
    why = " (the answer was cut at max_tokens)" if finish == "length" else ""
    return canary(name, False, "no tool call in the answer%s: content %s" % (why, quote(message.get("content"), 120, secret)),
                  finish_reason=finish, found_in=None)


def tool_call(client, model, parser, sampling, chat_template_kwargs, max_tokens, timeout, secret=None):
    name = "tool_call"
    if not parser:
        return skipped(name, "no tool_call_parser is set (the server's --tool-call-parser)")
    body = {"model": model, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": [WEATHER_TOOL],
            "tool_choice": "auto", "max_tokens": max_tokens, "stream": False}
    body.update(sampling)
    if chat_template_kwargs is not None:
        body["chat_template_kwargs"] = chat_template_kwargs
    response = client.call("POST", "/v1/chat/completions", body, timeout)
    return judge_tool_call(response, parser, secret)


def prose(words, seed="canary"):
    """``words`` words of neutral, varied prose (the same for the same arguments)."""
    rng = random.Random(seed)
    out = []
    for index in range(words):
        word = rng.choice(_PROSE_WORDS)
        out.append(word.capitalize() if index % 14 == 0 else word)
        if index % 14 == 13:
            out[-1] += "."
    return " ".join(out)


def accept_length(meta, client=None, timeout=None):
    """(accept length, source) of one finished request: meta_info's spec_accept_length, else completion_tokens /
    spec_verify_ct, else (with ``client``) /metrics' sglang:spec_accept_length right after it; (None, why) otherwise."""
    value = meta.get("spec_accept_length")
    if _number(value) and value > 0:
        return float(value), "meta_info.spec_accept_length"
    verify, completion = meta.get("spec_verify_ct"), meta.get("completion_tokens")
    if _number(verify) and _number(completion) and verify > 0:
        return float(completion) / verify, "meta_info completion_tokens / spec_verify_ct"
    if client is None:
        return None, "meta_info has no spec_verify_ct"
    try:
        text = client.call("GET", "/metrics", None, timeout, text=True)
        values = gauge_values(text if isinstance(text, str) else "", "sglang:spec_accept_length")
    except (CanaryError, ValueError) as exc:
        return None, "meta_info has no spec_verify_ct and /metrics gave none (%s)" % quote(str(exc), 120)
    values = [item for item in values if _number(item) and item > 0]
    if not values:
        return None, "meta_info has no spec_verify_ct and /metrics has no sglang:spec_accept_length"
    return float(values[0]), "/metrics sglang:spec_accept_length (last decode interval)"


def long_context_acceptance(client, speculative, context_length, target_tokens, min_ratio, min_accept, tokens, timeout,
                            long_timeout):
    """Accept length of a short prompt and of one of about ``target_tokens`` tokens (bounded by the context). Returns
    (canary, {"short", "long"})."""
    name = "long_context_acceptance"
    acceptance = {"short": None, "long": None}
    if not speculative:
        return skipped(name, "the server runs without speculative decoding"), acceptance
    short_text = prose(SHORT_PROSE_WORDS) + SUMMARY_TASK
    _ids, _text, short_meta = generate(client, short_text, tokens, timeout)
    short, source = accept_length(short_meta, client, timeout)
    prompt_tokens = short_meta.get("prompt_tokens")
    if not (_number(prompt_tokens) and prompt_tokens > 0):
        return canary(name, False, "/generate reported no prompt_tokens, so the long prompt cannot be sized"), acceptance
    per_word = float(prompt_tokens) / len(short_text.split())
    target = target_tokens
    if context_length:
        target = min(target, context_length - tokens - CONTEXT_MARGIN)
    if target <= prompt_tokens * 2:
        return skipped(name, "the context (%s tokens) leaves no room for a long prompt" % context_length), acceptance
    words = max(1, int((target - len(SUMMARY_TASK.split()) * per_word) / per_word) - 1)
    _ids, _text, long_meta = generate(client, prose(words, "long") + SUMMARY_TASK, tokens, long_timeout)
    long, long_source = accept_length(long_meta, client, timeout)
    acceptance = {"short": short, "long": long}
    details = {"short_prompt_tokens": prompt_tokens, "long_prompt_tokens": long_meta.get("prompt_tokens"),
               "target_tokens": target, "source": source if long_source == source else "%s / %s" % (source, long_source),
               "min_ratio": min_ratio, "min_accept_length": min_accept}
    if short is None or long is None:
        return canary(name, None, "skipped: the server reports no acceptance per request (%s)" % (
            source if short is None else long_source), **details), acceptance
    ratio = long / short
    details["ratio"] = round(ratio, 4)
    summary = "accept length %.2f at %s prompt tokens, %.2f at %s" % (short, prompt_tokens, long, long_meta.get("prompt_tokens"))
    if short < min_accept:
        return canary(name, False, "speculative acceptance is lost: %s (below %.2f even for the short prompt: every draft "
                      "rejected)" % (summary, min_accept), **details), acceptance
    if ratio < min_ratio:
        return canary(name, False, "acceptance collapses with context: %s, %.2f of the short prompt's (below %.2f)" % (
            summary, ratio, min_ratio), **details), acceptance
    return canary(name, True, "%s (%.2f of the short prompt's)" % (summary, ratio), **details), acceptance


def soak(client, requests, concurrency, timeout, tokens):
    """``requests`` short greedy requests, ``concurrency`` at a time; no new one starts after the first failure. A hang
    names how many completed before it."""
    name = "soak"
    lock = threading.Lock()
    state = {"completed": 0, "failure": None, "started": 0}
    stop = threading.Event()

    def one(index):
        if stop.is_set():
            return
        with lock:
            state["started"] += 1
        started = time.monotonic()
        try:
            generate(client, "Soak request %d: name a colour of the sky." % index, tokens, timeout)
        except CanaryError as exc:
            with lock:
                if state["failure"] is None:
                    state["failure"] = {"request": index + 1, "completed_before": state["completed"],
                                        "seconds": round(time.monotonic() - started, 1), "reason": str(exc)}
            stop.set()
            return
        with lock:
            state["completed"] += 1

    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(one, index) for index in range(requests)]
        for future in futures:
            future.result()
    failure = state["failure"]
    details = {"requests": requests, "concurrency": concurrency, "completed": state["completed"], "started": state["started"],
               "timeout": timeout, "failure": failure}
    if failure:
        return canary(name, False, "%d of %d requests completed; request %d failed after %.1f s with %d completed before "
                      "it: %s" % (state["completed"], requests, failure["request"], failure["seconds"], failure["completed_before"],
                                  failure["reason"]), **details)
    return canary(name, True, "all %d requests completed (%d at a time, %d s each at most)" % (requests, concurrency, timeout),
                  **details)
