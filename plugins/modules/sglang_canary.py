# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_canary
short_description: Canaries that catch an SGLang server that is up but wrong
description:
  - Runs canaries against one SGLang server and returns each one's verdict. They catch what C(/health) does not
    see, reported for SGLang with Qwen3.5/3.6 and MTP speculative decoding.
  - V(greedy_reference) sends O(prompts) at temperature 0 through the native C(/generate) with
    C(max_new_tokens) O(reference_tokens); the C(output_ids) must equal the reference recorded for the same
    O(reference_key). The reference is recorded when the key has none, and again when O(refresh_reference) is true.
    A mismatch names the prompt, the first differing position, the expected and actual token ids and texts.
  - V(speculative_lossless) (with speculative decoding on) sends the same prompts again, which must give the same
    tokens, and compares the tokens with the reference recorded under the same key without speculation, when one was
    recorded (see the notes for what this can and cannot prove).
  - V(tool_call) (with O(tool_call_parser) set) offers one tool, C(get_weather(city)), in a chat completion whose
    prompt needs it, with the model card's thinking-mode sampling; the answer must carry C(tool_calls) with that name
    and JSON arguments with C(city). A call found inside C(reasoning_content) or as text in C(content) is named as
    such (the known SGLang bug, sgl-project/sglang #26172, #20789), not as a missing call.
  - V(long_context_acceptance) (with speculative decoding on) measures the accept length of a short prompt and of one
    of about O(long_context_tokens) tokens (bounded by the server's context length) from each request's C(meta_info)
    (C(completion_tokens) / C(spec_verify_ct)), and fails when the long one is below O(long_context_min_ratio) of
    the short one, or when even the short one is below O(min_accept_length) (every draft rejected).
  - V(soak) sends O(soak_requests) short requests, O(soak_concurrency) at a time, each bounded by O(soak_timeout);
    all must complete. After the first failure no new request starts, and the message says how many completed before it.
  - Canaries that do not apply (no speculation, no tool-call parser) are returned as skipped with the reason.
  - The API key is sent as a bearer token and never returned or logged; the server's C(/server_info), which holds the
    key in clear text, is read only for the fields the canaries need.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  model:
    description: The C(model) field of the chat completion; set it to the server's C(--served-model-name).
    type: str
    default: default
  api_key:
    description: The server's C(--api-key), sent as a bearer token in the C(Authorization) header. Never returned.
    type: str
  canaries:
    description: The canaries to run (in this order, whatever the order given). Default all that apply.
    type: list
    elements: str
    choices: [greedy_reference, speculative_lossless, tool_call, long_context_acceptance, soak]
  prompts:
    description:
      - The fixed prompts of V(greedy_reference) and V(speculative_lossless), sent as native C(/generate) text.
      - Default four short neutral prompts (a gear, prime numbers, a note to a neighbour, the water cycle).
    type: list
    elements: str
  reference_tokens:
    description: C(max_new_tokens) of the greedy requests; the reference compares this many tokens.
    type: int
    default: 32
  reference_key:
    description:
      - What the greedy output depends on - the model revision, the SGLang release and the server flags that change
        numerics (tensor parallel size, dtype, attention backend, quantization, speculative settings). It is hashed with
        O(reference_tokens); a reference is only compared with one recorded under the same hash.
      - Entries whose names start with C(speculative) describe speculative decoding; without them the key names the
        same deployment without speculation, whose reference V(speculative_lossless) compares with.
    type: dict
    required: true
  key_from_server:
    description:
      - Add to O(reference_key) the resolved server arguments that change numerics, as C(/server_info) reports them
        (C(model_path), C(revision), C(dtype), C(quantization), C(kv_cache_dtype), C(tp_size), C(attention_backend), the
        C(speculative_*) settings and a few more; never the port, the key or the parsers), so that the caller passes only
        what the server cannot tell (the model revision on disk, the package versions).
    type: bool
    default: true
  reference_path:
    description:
      - The JSON file that keeps the references of every key, kept by the caller beside the deployment record (for
        example C(/var/lib/llmops-serving/<instance>/canary-reference.json)). Written atomically, mode 0644 (it holds
        no secret). A symbolic link or anything but a regular file there is never followed or replaced.
    type: path
    required: true
  refresh_reference:
    description:
      - Record the greedy outputs as the reference for O(reference_key) even when one exists (after a deliberate change).
        Also replaces a corrupt reference file (the old one is set aside as C(<path>.corrupt-<time>)).
    type: bool
    default: false
  speculative:
    description:
      - Whether the server runs speculative decoding. Default from C(/server_info)'s C(speculative_algorithm).
    type: bool
  tool_call_parser:
    description: The server's C(--tool-call-parser). Unset skips V(tool_call).
    type: str
  tool_call_max_tokens:
    description: C(max_tokens) of the tool-call chat completion (the thinking block comes first).
    type: int
    default: 4096
  long_context_tokens:
    description: The length of the long prompt in tokens, at most the server's context length less the generated tokens.
    type: int
    default: 32768
  long_context_min_ratio:
    description: The long prompt's accept length must be at least this fraction of the short prompt's.
    type: float
    default: 0.5
  min_accept_length:
    description: The short prompt's accept length must reach this (1.0 means no draft is ever accepted).
    type: float
    default: 1.2
  acceptance_tokens:
    description: C(max_new_tokens) of the two acceptance requests (enough verify passes to average over).
    type: int
    default: 64
  long_context_timeout:
    description: Seconds the long prompt's request may take (its prefill is long).
    type: int
    default: 600
  soak_requests:
    description: Requests of the soak.
    type: int
    default: 32
  soak_concurrency:
    description: Soak requests in flight at once.
    type: int
    default: 4
  soak_timeout:
    description: Seconds each soak request may take.
    type: int
    default: 60
  timeout:
    description: Seconds each other request may take in all (connect, headers and the whole body).
    type: int
    default: 120
  validate_certs:
    description: Verify the server's TLS certificate for an C(https) O(url).
    type: bool
    default: true
  use_proxy:
    description: Send the requests through the proxy in the environment. Off by default (the canaries target the local server).
    type: bool
    default: false
  fail_on_canary_failure:
    description: Fail when any canary fails (the message names each failed one). Off returns the verdicts only.
    type: bool
    default: true
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details:
      - The canaries send their requests (generation changes nothing on the server but its prefix cache) and nothing is
        recorded; RV(reference) says C(recorded) false and the V(greedy_reference) message says what would be recorded.
  diff_mode:
    support: none
    details: The reference file is the only thing written; its content is returned in part (RV(reference)).
notes:
  - What V(speculative_lossless) can prove on a live server. At temperature 0 speculative decoding is lossless in
    theory - the target model verifies every draft token - so a server with speculation must write the tokens the
    same deployment writes without it. A live server runs one configuration, so the comparison needs a reference
    recorded by a deployment of the same key without speculation (the same O(reference_key) less its C(speculative*)
    entries, recorded in the same O(reference_path)); without one, the canary only checks that two identical greedy
    requests agree, which catches nondeterministic drafts but not drafts that are wrong the same way every time.
    V(greedy_reference) then compares with the first reference recorded with speculation, which is only as good as the
    server that recorded it.
  - On real GPUs greedy output is reproducible for the same configuration, but SGLang is not batch-invariant unless
    started with C(--enable-deterministic-inference) - concurrent load, the radix cache or different kernels (a
    speculative verify pass has other shapes than a plain decode step) may change a near-tie token. The canaries send
    their requests one at a time and compare O(reference_tokens) tokens (32 by default) to keep such flips rare; a
    mismatch past the first few tokens of an otherwise healthy server is worth recording again with O(refresh_reference)
    after looking at both texts.
  - Acceptance is read per request from C(meta_info) (SGLang reports C(spec_verify_ct) and C(spec_accept_length)
    for finished requests with speculative decoding); where it is missing, the C(sglang:spec_accept_length) gauge of
    C(/metrics) right after the request is used, which is only that request's on an otherwise idle server.
  - The long prompt is sized from the short prompt's C(meta_info.prompt_tokens) per word, so the measured length
    (returned) is close to, not exactly, O(long_context_tokens).
  - A failed request fails its canary (the others still run); a canary message quotes the server's texts with control
    characters escaped and cut short; the API key is masked everywhere.
seealso:
  - module: llmops.serving.generation_probe
  - module: llmops.serving.spec_decode_stats
"""

EXAMPLES = r"""
- name: Canaries after the cutover
  llmops.serving.sglang_canary:
    url: http://127.0.0.1:30000
    model: qwen3.6-27b
    api_key: "{{ sglang_api_key }}"
    reference_path: /var/lib/llmops-serving/main/canary-reference.json
    reference_key:
      model_revision: "{{ model_revision }}"
      sglang: "{{ sglang_version }}"
      tp_size: 2
      speculative_algorithm: EAGLE
      speculative_num_steps: 3
    tool_call_parser: qwen3_coder
    soak_requests: 32
    soak_concurrency: 4
  register: canary

- name: Record the reference again after a deliberate change, without the long-context canary
  llmops.serving.sglang_canary:
    reference_path: /var/lib/llmops-serving/main/canary-reference.json
    reference_key: "{{ canary_key }}"
    refresh_reference: true
    canaries: [greedy_reference, speculative_lossless, tool_call, soak]
"""

RETURN = r"""
canaries:
  description:
    - One entry per canary, in order - C(name), C(passed) (true, false, or null when skipped), C(message) and C(details)
      (the canary's figures - mismatches with prompt, position, expected_ids, actual_ids, expected_text, actual_text;
      tool-call finish_reason, found_in; acceptance prompt tokens, ratio and source; soak completed, failure).
  returned: always
  type: list
  elements: dict
  sample:
    - {"name": "greedy_reference", "passed": true, "message": "4 prompts match the recorded greedy reference",
       "details": {"mismatches": [], "recorded": false}}
    - {"name": "tool_call", "passed": false, "details": {"found_in": "reasoning_content", "finish_reason": "stop"},
       "message": "the tool call came back inside reasoning_content and tool_calls is null (the known SGLang bug)"}
acceptance:
  description: Accept length (tokens per verify pass, bonus token included) of the short and the long prompt; null when not measured.
  returned: always
  type: dict
  sample: {"short": 3.21, "long": 1.04}
reference:
  description: The reference file, the hash of O(reference_key) and whether this run recorded (wrote) anything.
  returned: always
  type: dict
  sample: {"path": "/var/lib/llmops-serving/main/canary-reference.json", "key_hash": "9f2c...", "recorded": true}
server:
  description: What the canaries took from C(/server_info) (never the rest of it), or C(error) when it could not be read.
  returned: always
  type: dict
  sample: {"speculative_algorithm": "EAGLE", "context_length": 262144, "tool_call_parser": "qwen3_coder", "version": "0.5.23"}
failed_canaries:
  description: The names of the canaries that failed.
  returned: always
  type: list
  elements: str
  sample: ["soak"]
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file, canary, http_exchange, redact
from ansible_collections.llmops.serving.plugins.module_utils.sampling_presets import request_sampling

# A chat completion or a /generate answer is a few KiB; the canaries take at most this much of one.
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_ERROR_CHARS = 300


class Client:
    """The server, for the canaries: one JSON request at a time through http_exchange; the key masked in every error."""

    def __init__(self, url, api_key, validate_certs, use_proxy):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.validate_certs = validate_certs
        self.use_proxy = use_proxy

    def _short(self, text, limit=MAX_ERROR_CHARS):
        return canary.quote(text, limit, self.api_key)

    def call(self, method, path, body, timeout, text=False):
        url = self.url + path
        try:
            status, answer = http_exchange.exchange(url, method=method, body=body, api_key=self.api_key, timeout=timeout,
                                                    validate_certs=self.validate_certs, use_proxy=self.use_proxy,
                                                    max_body_bytes=MAX_BODY_BYTES)
        except http_exchange.ExchangeError as exc:
            raise canary.CanaryError("%s %s failed: %s" % (method, path, self._short(exc.reason))) from None
        if status != 200:
            raise canary.CanaryError("%s %s returned %s: %s" % (method, path, status, self._short(answer)))
        if text:
            return answer
        try:
            return json.loads(answer)
        except ValueError:
            raise canary.CanaryError("%s %s returned a body that is not JSON: %s" % (method, path, self._short(answer, 120))) from None


def _positive(module, names):
    for name in names:
        if module.params[name] < 1:
            module.fail_json(msg="%s must be >= 1, got %d" % (name, module.params[name]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            model=dict(type="str", default="default"),
            api_key=dict(type="str", no_log=True),
            canaries=dict(type="list", elements="str", choices=list(canary.CANARIES)),
            prompts=dict(type="list", elements="str"),
            reference_tokens=dict(type="int", default=32, no_log=False),
            reference_key=dict(type="dict", required=True, no_log=False),
            key_from_server=dict(type="bool", default=True),
            reference_path=dict(type="path", required=True),
            refresh_reference=dict(type="bool", default=False),
            speculative=dict(type="bool"),
            tool_call_parser=dict(type="str"),
            tool_call_max_tokens=dict(type="int", default=4096, no_log=False),
            long_context_tokens=dict(type="int", default=32768, no_log=False),
            long_context_min_ratio=dict(type="float", default=0.5),
            min_accept_length=dict(type="float", default=1.2),
            acceptance_tokens=dict(type="int", default=64, no_log=False),
            long_context_timeout=dict(type="int", default=600),
            soak_requests=dict(type="int", default=32),
            soak_concurrency=dict(type="int", default=4),
            soak_timeout=dict(type="int", default=60),
            timeout=dict(type="int", default=120),
            validate_certs=dict(type="bool", default=True),
            use_proxy=dict(type="bool", default=False),
            fail_on_canary_failure=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    api_key = params["api_key"]
    _positive(module, ("reference_tokens", "tool_call_max_tokens", "long_context_tokens", "acceptance_tokens",
                       "long_context_timeout", "soak_requests", "soak_concurrency", "soak_timeout", "timeout"))
    if params["reference_tokens"] > 4096 or params["soak_requests"] > 10000 or params["soak_concurrency"] > 256:
        module.fail_json(msg="reference_tokens must be <= 4096, soak_requests <= 10000 and soak_concurrency <= 256")
    prompts = params["prompts"] or list(canary.DEFAULT_PROMPTS)
    if any(not prompt.strip() for prompt in prompts) or len(set(prompts)) != len(prompts) or len(prompts) > 32:
        module.fail_json(msg="prompts must be 1 to 32 distinct, non-empty texts")
    selected = [name for name in canary.CANARIES if name in (params["canaries"] or canary.CANARIES)]
    key = params["reference_key"]
    try:
        canary._canonical(key)  # pylint: disable=protected-access
    except (TypeError, ValueError) as exc:
        module.fail_json(msg="reference_key must hold JSON values only: %s" % exc)
    tokens = params["reference_tokens"]
    path = params["reference_path"]
    client = Client(params["url"], api_key, params["validate_certs"], params["use_proxy"])
    timeout = params["timeout"]

    server = canary.server_facts(client, timeout)
    if params["key_from_server"]:
        key = dict(key, **server.get("numerics", {}))
    key_hash = canary.key_hash(key, tokens)
    base_hash = canary.key_hash(canary.base_key(key), tokens)
    speculative = params["speculative"]
    if speculative is None:
        speculative = bool(server.get("speculative_algorithm"))
    results, acceptance, recorded = [], {"short": None, "long": None}, False
    outputs = None
    references, reference_problem = None, None
    try:
        references = canary.load_references(path)
    except canary.ReferenceFileError as exc:
        reference_problem = exc

    def run(name, function):
        try:
            results.append(function())
        except canary.CanaryError as exc:
            results.append(canary.canary(name, False, "a request failed: %s" % exc))

    if "greedy_reference" in selected or "speculative_lossless" in selected:
        try:
            outputs = canary.run_greedy(client, prompts, tokens, timeout)
        except canary.CanaryError as exc:
            outputs = exc
    if "greedy_reference" in selected:
        entry = None
        if isinstance(outputs, canary.CanaryError):
            results.append(canary.canary("greedy_reference", False, "a request failed: %s" % outputs))
        elif reference_problem is not None and (reference_problem.fatal or not params["refresh_reference"]):
            results.append(canary.canary("greedy_reference", False, "%s%s" % (
                reference_problem, "" if reference_problem.fatal else "; refresh_reference=true replaces it (set aside)")))
        else:
            entries = references["entries"] if references else {}
            entry = entries.get(key_hash)
            verdict, to_record = canary.greedy_reference(outputs, entry, params["refresh_reference"], module.check_mode, api_key)
            results.append(verdict)
            if to_record and not module.check_mode:
                new_entry = dict(entry or {}) if not params["refresh_reference"] else {}
                new_entry.update({"key": key, "reference_tokens": tokens, "speculative": bool(speculative),
                                  "base_hash": base_hash, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "server_version": server.get("version")})
                new_entry["prompts"] = dict(new_entry.get("prompts") or {}, **to_record)
                data = references or {"format": canary.REFERENCE_FORMAT, "entries": {}}
                try:
                    if reference_problem is not None:
                        atomic_file.set_aside(path, "corrupt")
                        data = {"format": canary.REFERENCE_FORMAT, "entries": {}}
                    data["entries"][key_hash] = new_entry
                    canary.write_references(path, data)
                    recorded = True
                except OSError as exc:
                    results[-1] = canary.canary("greedy_reference", False, "the reference could not be written to %s: %s" % (
                        path, exc.strerror or exc))
    if "speculative_lossless" in selected:
        if isinstance(outputs, canary.CanaryError):
            results.append(canary.canary("speculative_lossless", False, "a request failed: %s" % outputs)
                           if speculative else canary.skipped("speculative_lossless", "the server runs without speculative decoding"))
        else:
            plain = None
            if speculative and references:
                plain = next((entry for entry in references["entries"].values()
                              if entry.get("base_hash") == base_hash and entry["speculative"] is False
                              and entry["reference_tokens"] == tokens), None)
            run("speculative_lossless",
                lambda: canary.speculative_lossless(client, outputs, prompts, tokens, timeout, speculative, plain, api_key))
    if "tool_call" in selected:
        sampling, template_kwargs = request_sampling("thinking_general")
        run("tool_call", lambda: canary.tool_call(client, params["model"], params["tool_call_parser"], sampling, template_kwargs,
                                                  params["tool_call_max_tokens"], timeout, api_key))
    if "long_context_acceptance" in selected:
        def acceptance_canary():
            verdict, measured = canary.long_context_acceptance(
                client, speculative, server.get("context_length"), params["long_context_tokens"], params["long_context_min_ratio"],
                params["min_accept_length"], params["acceptance_tokens"], timeout, params["long_context_timeout"])
            acceptance.update(measured)
            return verdict
        run("long_context_acceptance", acceptance_canary)
    if "soak" in selected:
        run("soak", lambda: canary.soak(client, params["soak_requests"], params["soak_concurrency"], params["soak_timeout"], 16))

    failed = [item for item in results if item["passed"] is False]
    result = dict(changed=recorded, canaries=results, acceptance=acceptance, server=server,
                  reference={"path": path, "key_hash": key_hash, "recorded": recorded},
                  failed_canaries=[item["name"] for item in failed])
    result = redact.redact_deep(result, secrets=(api_key,) if api_key else ())
    if failed:
        message = "canaries failed: " + "; ".join("%s (%s)" % (item["name"], item["message"])
                                                  for item in result["canaries"] if item["passed"] is False)
    else:
        passed_names = [item["name"] for item in results if item["passed"]]
        message = "canaries passed: %s" % (", ".join(passed_names) or "none")
        skipped_names = [item["name"] for item in results if item["passed"] is None]
        if skipped_names:
            message += "; skipped: %s" % ", ".join(skipped_names)
    message = redact.redact_text(message.replace("\n", " "), secrets=(api_key,) if api_key else ())
    if failed and params["fail_on_canary_failure"]:
        module.fail_json(msg=message, **result)
    module.exit_json(msg=message, **result)


if __name__ == "__main__":
    main()
