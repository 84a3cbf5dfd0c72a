# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
---
module: generation_probe
short_description: Probe an SGLang server's chat output for degeneration with the model card's sampling values
description:
  - Sends O(num_samples) chat completions to an OpenAI-compatible endpoint (SGLang's C(/v1/chat/completions)) with
    the sampling parameters of the chosen O(mode) from the Qwen3.6 model card, or with O(sampling) overriding them.
  - Measures degeneration in each response, separately for C(reasoning_content) and C(content) when present, with
    the longest back-to-back repeated n-gram run (from a repeated word up to a repeated paragraph), distinct-1/2/3
    of the words and the zlib compression ratio, with the thresholds documented in the collection's
    C(degeneration) module_utils.
  - Chinese and Japanese text is read one character per token (it has no spaces), and ruler lines (C(-----),
    C(=====), C(***), markdown table separators, box drawing) count as markup, so that healthy markdown is not
    called a loop and a paragraph repeated in CJK text is.
  - Returns per-sample metrics, RV(degenerate), the sampling actually sent, and a RV(diagnosis) that combines the
    verdict with the speculative-decoding stats from P(llmops.serving.spec_decode_stats#module) when O(spec_stats) is
    given. A repetition loop while acceptance is near 1.0 is a sampling loop (the draft head predicts the loop), not an
    MTP fault; healthy text with low acceptance points at the draft path.
  - The API key is sent as a bearer token and never returned or logged.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  path:
    description: Path of the chat-completions endpoint.
    type: str
    default: /v1/chat/completions
  model:
    description: The C(model) field of each request; set it to the server's C(--served-model-name).
    type: str
    default: default
  api_key:
    description: The server's C(--api-key), sent as a bearer token in the C(Authorization) header. Never returned.
    type: str
  prompts:
    description:
      - User prompts; sample I(i) uses prompt I(i) modulo the list's length.
      - The default set asks short questions with short answers, including the incident's C(What is 2+2?).
    type: list
    elements: str
  num_samples:
    description: Number of chat completions to send (one at a time). Defaults to the number of O(prompts).
    type: int
  mode:
    description:
      - Which model-card preset supplies the sampling values.
      - V(thinking_general) temperature 1.0, top_p 0.95, top_k 20, min_p 0.0, presence_penalty 0.0,
        repetition_penalty 1.0.
      - V(thinking_coding) temperature 0.6, top_p 0.95, top_k 20, min_p 0.0, presence_penalty 0.0,
        repetition_penalty 1.0.
      - V(non_thinking) temperature 0.7, top_p 0.80, top_k 20, min_p 0.0, presence_penalty 1.5,
        repetition_penalty 1.0, and C(chat_template_kwargs) with C(enable_thinking) V(false).
    type: str
    choices: [thinking_general, thinking_coding, non_thinking]
    default: thinking_general
  sampling:
    description:
      - Request fields that override the preset's. A value of V(null) removes the key from the request, so
        C(temperature) V(0.7) with every other preset key set to V(null) reproduces a client that sends only a temperature.
      - Other keys (C(seed), C(frequency_penalty)) are sent as given.
    type: dict
    default: {}
  max_tokens:
    description: C(max_tokens) of each request. A loop needs room to show; a few hundred tokens is enough.
    type: int
    default: 512
  timeout:
    description:
      - Seconds that each request may take in all - connecting, the status line, the headers and the whole body; a
        server that sends its answer slowly or never ends it fails the request at this deadline.
    type: int
    default: 120
  validate_certs:
    description: Verify the server's TLS certificate for an C(https) O(url).
    type: bool
    default: true
  use_proxy:
    description: Send the requests through the proxy in the environment. Off by default, because the probe targets the local server.
    type: bool
    default: false
  spec_stats:
    description:
      - The result of P(llmops.serving.spec_decode_stats#module) for the same run (read after this probe's requests, or
        from a previous probe). Its recomputed acceptance rate separates a sampling loop from a draft-path fault.
    type: dict
  fail_on_degenerate:
    description: Fail with the diagnosis when any sample is degenerate.
    type: bool
    default: true
  fail_on_draft_path:
    description: Fail with the diagnosis when the verdict is C(draft path) (healthy text, low acceptance).
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details:
      - The probe only generates text; a chat completion changes nothing on the server (beyond its prefix cache), so the
        module sends the same requests and returns the same result in check mode.
  diff_mode:
    support: none
    details: The module never changes anything.
notes:
  - The verdict is degenerate when any sample is; one looping sample in a handful at the card's values is already a
    problem for clients.
  - A request that fails (HTTP error, timeout, invalid JSON) fails the module with the server's status and message;
    the API key is removed from any text before it is returned, and so is whatever else looks like a credential (an
    C(Authorization) header or C(api_key) a server or proxy echoes, the password of a URL).
seealso:
  - module: llmops.serving.spec_decode_stats
"""

EXAMPLES = r"""
- name: Probe with the model card's thinking-mode values
  llmops.serving.generation_probe:
    url: http://127.0.0.1:30000
    model: qwen3.6-27b
    api_key: "{{ sglang_api_key }}"
    spec_stats: "{{ spec_stats }}"
  register: probe

- name: Reproduce the incident's client (temperature 0.7 only) without failing
  llmops.serving.generation_probe:
    model: qwen3.6-27b
    sampling:
      temperature: 0.7
      top_p: null
      top_k: null
      min_p: null
      presence_penalty: null
      repetition_penalty: null
    num_samples: 1
    fail_on_degenerate: false
  register: incident
"""

RETURN = r"""
degenerate:
  description: Whether any sample's content or reasoning is degenerate.
  returned: always
  type: bool
  sample: false
degenerate_samples:
  description: Number of degenerate samples.
  returned: always
  type: int
  sample: 0
samples:
  description:
    - One entry per request, with index, prompt, finish_reason, completion_tokens, degenerate, reasons, and the metrics of
      C(content) and C(reasoning_content) (null when the response has none) with a short preview of each; C(tokens)
      counts all tokens, C(word_tokens) those distinct-n is computed on (words, without punctuation and markup).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      prompt: What is 2+2?
      finish_reason: stop
      completion_tokens: 182
      degenerate: false
      reasons: []
      content: {"tokens": 9, "distinct_2": 1.0, "compression_ratio": 1.4, "longest_run": {"n": 0, "repeats": 1}, "preview": "2 + 2 = 4."}
      reasoning_content: {"tokens": 160, "distinct_2": 0.93, "compression_ratio": 0.55, "preview": "The user asks ..."}
sampling:
  description: The sampling fields actually sent in each request.
  returned: always
  type: dict
  sample: {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
chat_template_kwargs:
  description: The C(chat_template_kwargs) sent (null in thinking modes).
  returned: always
  type: dict
  sample: {"enable_thinking": false}
mode:
  description: The preset used.
  returned: always
  type: str
  sample: thinking_general
differs_from_card:
  description: Sampling keys whose sent values differ from the model card's values for O(mode) (sent and card value).
  returned: always
  type: dict
  sample: {"presence_penalty": {"sent": null, "card": 0.0}}
diagnosis:
  description:
    - C(verdict) (sampling loop, draft path, healthy, degenerate output (no speculative stats to separate causes), degenerate
      output (acceptance not near 1.0)), C(message), and the acceptance rate, accept length and draft tokens used.
  returned: always
  type: dict
  sample: {"verdict": "healthy", "message": "the output is healthy and acceptance is 0.61 (accept length 2.83 of 4 draft tokens)",
           "acceptance_rate": 0.61, "accept_length": 2.83, "num_draft_tokens": 4}
endpoint:
  description: The URL the requests went to.
  returned: always
  type: str
  sample: http://127.0.0.1:30000/v1/chat/completions
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils.degeneration import VERDICT_DRAFT_PATH, diagnose, measure
from ansible_collections.llmops.serving.plugins.module_utils.sampling_presets import (
    MODES,
    differences_from_preset,
    request_sampling,
)

DEFAULT_PROMPTS = [
    "What is 2+2?",
    "Name three primary colors and say in one sentence why they are called primary.",
    "Write a Python function that returns the n-th Fibonacci number, with a one-line docstring.",
]
PREVIEW_CHARS = 160
MAX_ERROR_BODY_CHARS = 500
METRIC_KEYS = ("tokens", "word_tokens", "bytes", "longest_run", "distinct_1", "distinct_2", "distinct_3", "compression_ratio",
               "degenerate", "reasons")


class ProbeError(Exception):
    """A request failed; the message is already free of the API key."""


def _scrub(text, secret):
    """``text`` with ``secret`` and whatever else redact recognises (an echoed Authorization header, api_key=...)
    masked: a server or proxy may echo the request in an error."""
    return redact.redact_text("" if text is None else text, secrets=(secret,))


def _scrub_deep(value, secret):
    """Copy of ``value`` with every string passed through _scrub()."""
    return redact.redact_deep(value, secrets=(secret,))


def _endpoint(url, path):
    return url.rstrip("/") + "/" + path.lstrip("/")


def _post(module, endpoint, body, api_key):
    try:
        status, text = http_exchange.exchange(endpoint, method="POST", body=body, api_key=api_key,
                                              timeout=module.params["timeout"], use_proxy=module.params["use_proxy"])
    except http_exchange.ExchangeError as exc:
        raise ProbeError("POST %s failed: %s" % (endpoint, _shortened(exc.reason, MAX_ERROR_BODY_CHARS, api_key)))
    if status != 200:
        raise ProbeError("POST %s returned %s: %s" % (endpoint, status, _shortened(text, MAX_ERROR_BODY_CHARS, api_key)))
    try:
        return json.loads(text)
    except ValueError:
        raise ProbeError("POST %s returned a body that is not JSON: %r" % (endpoint, _shortened(text, 200, api_key)))


def _shortened(text, limit, secret):
    """``text`` masked as _scrub() masks it, then cut to ``limit`` characters (redact.shortened: never cut first)."""
    return redact.shortened("" if text is None else text, limit, secrets=(secret,))


def _text_metrics(text, secret=None):
    """Metrics and a preview of a generated text. The key is masked before anything is measured or quoted: a server
    may echo it, and a repeated n-gram or the preview would otherwise quote a cut of it."""
    if text is None or text == "":
        return None
    text = redact.mask_secrets(text, (secret,))
    metrics = measure(text)
    result = dict((key, metrics[key]) for key in METRIC_KEYS)
    result["preview"] = _shortened(text, PREVIEW_CHARS, secret)
    return result


def measure_response(index, prompt, response, secret=None):
    """Per-sample record from one OpenAI-style chat-completion response; ``secret`` (the API key) is masked in it."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ProbeError("response %d has no choices: %s" % (
            index, _shortened(json.dumps(response), MAX_ERROR_BODY_CHARS, secret)))
    choice = choices[0]
    message = choice.get("message") or {}
    content = _text_metrics(message.get("content"), secret)
    reasoning = _text_metrics(message.get("reasoning_content"), secret)
    reasons = []
    for label, metrics in (("reasoning_content", reasoning), ("content", content)):
        if metrics and metrics["degenerate"]:
            reasons.extend("%s: %s" % (label, reason) for reason in metrics["reasons"])
    usage = response.get("usage") or {}
    return {
        "index": index,
        "prompt": prompt,
        "finish_reason": choice.get("finish_reason"),
        "completion_tokens": usage.get("completion_tokens"),
        "degenerate": bool(reasons),
        "reasons": reasons,
        "content": content,
        "reasoning_content": reasoning,
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            path=dict(type="str", default="/v1/chat/completions"),
            model=dict(type="str", default="default"),
            api_key=dict(type="str", no_log=True),
            prompts=dict(type="list", elements="str"),
            num_samples=dict(type="int"),
            mode=dict(type="str", default="thinking_general", choices=list(MODES)),
            sampling=dict(type="dict", default={}),
            max_tokens=dict(type="int", default=512, no_log=False),
            timeout=dict(type="int", default=120),
            validate_certs=dict(type="bool", default=True),
            use_proxy=dict(type="bool", default=False),
            spec_stats=dict(type="dict"),
            fail_on_degenerate=dict(type="bool", default=True),
            fail_on_draft_path=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    api_key = params["api_key"]
    prompts = params["prompts"] or list(DEFAULT_PROMPTS)
    num_samples = params["num_samples"] if params["num_samples"] is not None else len(prompts)
    endpoint = _endpoint(params["url"], params["path"])
    sampling, chat_template_kwargs = request_sampling(params["mode"], params["sampling"])
    result = dict(
        changed=False,
        endpoint=endpoint,
        mode=params["mode"],
        sampling=sampling,
        chat_template_kwargs=chat_template_kwargs,
        differs_from_card=differences_from_preset(sampling, params["mode"]),
        samples=[],
        degenerate=False,
        degenerate_samples=0,
        diagnosis=None,
    )
    if num_samples < 1 or num_samples > 100:
        module.fail_json(msg="num_samples must be between 1 and 100, got %d" % num_samples, **_scrub_deep(result, api_key))
    if params["max_tokens"] < 1 or params["timeout"] < 1:
        module.fail_json(msg="max_tokens and timeout must be >= 1", **_scrub_deep(result, api_key))

    for index in range(num_samples):
        prompt = prompts[index % len(prompts)]
        body = {
            "model": params["model"],
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": params["max_tokens"],
            "stream": False,
        }
        body.update(sampling)
        if chat_template_kwargs is not None:
            body["chat_template_kwargs"] = chat_template_kwargs
        try:
            response = _post(module, endpoint, body, api_key)
            result["samples"].append(_scrub_deep(measure_response(index, prompt, response, api_key), api_key))
        except ProbeError as exc:
            module.fail_json(msg="generation probe request %d of %d failed: %s" % (index + 1, num_samples, _scrub(exc, api_key)),
                             **_scrub_deep(result, api_key))

    degenerate_samples = sum(1 for sample in result["samples"] if sample["degenerate"])
    result["degenerate_samples"] = degenerate_samples
    result["degenerate"] = degenerate_samples > 0
    diagnosis = diagnose(result["degenerate"], params["spec_stats"])
    result["diagnosis"] = diagnosis

    message = diagnosis["message"]
    if result["degenerate"]:
        first = next(sample for sample in result["samples"] if sample["degenerate"])
        message = "%d of %d samples degenerate (sample %d: %s). %s" % (
            degenerate_samples, num_samples, first["index"], "; ".join(first["reasons"][:2]), message)
        if result["differs_from_card"]:
            message += ". Sent values that differ from the card for %s: %s" % (
                params["mode"], ", ".join("%s=%s (card %s)" % (key, value["sent"], value["card"])
                                          for key, value in sorted(result["differs_from_card"].items())))
    message = _scrub(message, api_key)
    result = _scrub_deep(result, api_key)
    if result["degenerate"] and params["fail_on_degenerate"]:
        module.fail_json(msg=message, **result)
    if diagnosis["verdict"] == VERDICT_DRAFT_PATH and params["fail_on_draft_path"]:
        module.fail_json(msg=message, **result)
    module.exit_json(msg=message, **result)


if __name__ == "__main__":
    main()
