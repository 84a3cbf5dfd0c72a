# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A continuous-batching loop that stands in for SGLang's scheduler: it admits requests, runs simulated decode
iterations with speculative acceptance, and writes the `Prefill batch, ...` / `Decode batch, ...` lines (TP0 tag).
"""
from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import deque

from sglang_sim import logfmt, sampling

THINK_OPEN = "<think>\n"
THINK_CLOSE = "\n</think>\n\n"
# wrong-drafts: greedy output leaves the target model's after this many tokens.
WRONG_DRAFTS_AFTER = 4
MAMBA_SLOTS_PER_REQUEST = 3


class SimRequest:
    """One generation: its planned token stream, its acceptance probability and its progress."""

    def __init__(self, prompt_tokens, planned_tokens, max_new_tokens, accept_prob, looping, thinking):
        self.rid = uuid.uuid4().hex
        self.prompt_tokens = prompt_tokens
        self.planned = planned_tokens
        self.max_new_tokens = max_new_tokens
        self.accept_prob = accept_prob
        self.looping = looping
        self.thinking = thinking
        self.generated = 0
        self.done = threading.Event()
        self.created = time.time()
        # Per request, as SGLang reports them in meta_info: verify passes and correct drafts per pass.
        self.spec_verify_ct = 0
        self.spec_correct_drafts = 0
        self.spec_histogram = []
        # Only the API's own requests count for hang-after (not the warm-up or /health_generate).
        self.counts = False

    @property
    def target(self) -> int:
        return min(len(self.planned), self.max_new_tokens)

    @property
    def finish_reason(self) -> str:
        return "stop" if len(self.planned) <= self.max_new_tokens else "length"

    def text(self) -> str:
        return "".join(self.planned[:self.generated]).rstrip(" ")

    def output_ids(self):
        return [sampling.token_id(piece) for piece in self.planned[:self.generated]]


class Scheduler:
    def __init__(self, server_args: dict, knobs, max_total_num_tokens: int):
        self.args = server_args
        self.knobs = knobs
        self.max_total_num_tokens = max_total_num_tokens
        self.tag = logfmt.rank_tag(0, server_args["tp_size"])
        self.spec_steps = server_args["speculative_num_steps"] if server_args["speculative_algorithm"] else 0
        self.num_draft_tokens = server_args["speculative_num_draft_tokens"] or (self.spec_steps + 1)
        self.rng = random.Random(knobs.seed)
        self._seed_counter = itertools.count()
        self.waiting = deque()
        self.running = []
        self.cond = threading.Condition()
        self.stopped = False
        self.forward_ct_decode = 0
        # Interval counters (reset at each decode log line) and lifetime totals, as SGLang keeps them.
        self.interval_accepted = 0
        self.interval_forward = 0
        self.interval_generated = 0
        self.last_decode_log = time.perf_counter()
        self.last_prefill_log = time.perf_counter()
        self.total_accepted = 0
        self.total_forward = 0
        self.last_gen_throughput = 0.0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.counters = {"prompt_tokens_total": 0, "generation_tokens_total": 0, "num_requests_total": 0}
        # hang-after: API requests admitted so far; once knobs.hang_after were, nothing more is admitted.
        self.admitted_requests = 0
        self.thread = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)

    # ---- request construction -------------------------------------------------------------------------------
    def build_request(self, body: dict, max_new_tokens, degenerate_mode: bool, effective=None, prompt_tokens=None):
        """``effective``: the sampling values an endpoint resolved (default: a chat request's, with the model's
        generation_config.json defaults). ``prompt_tokens``: the prompt's length when the endpoint knows it (native
        text has no chat template). A greedy request (temperature 0) plans its tokens from the prompt alone."""
        messages = body.get("messages") or []
        thinking = sampling.thinking_enabled(body)
        if effective is None:
            effective = sampling.effective_sampling(body, self.args["sampling_defaults"], self.knobs.generation_config)
        profile = sampling.profile_of(effective, thinking)
        seed = body.get("seed")
        question = sampling.last_user_text(messages)
        greedy = sampling.is_greedy(effective)
        # The degenerate fault is a model that loops outside its card's sampling, greedy included (Qwen's card: greedy
        # decoding "can lead to ... endless repetitions"): its greedy tokens are not the healthy model's.
        looping = degenerate_mode and profile is None
        if greedy:
            rng = sampling.greedy_rng(question, thinking)
        else:
            rng = random.Random(seed if isinstance(seed, int) else "%s-%d" % (self.rng.random(), next(self._seed_counter)))
        limit = max_new_tokens if max_new_tokens is not None else self.knobs.max_loop_tokens
        tool_call = self._tool_call(body, question)
        if looping:
            planned = sampling.loop_tokens(question, limit + 1)
            if thinking:
                planned = [THINK_OPEN] + planned
        else:
            answer = sampling.varied_tokens(rng, rng.randint(12, 60)) if tool_call is None else tool_call
            reasoning = sampling.varied_tokens(rng, rng.randint(40, 160)) if thinking else []
            if thinking and tool_call is not None and self.knobs.has("tool-call-in-reasoning"):
                # Qwen3.5/3.6 with SGLang (sgl-project/sglang #26172, #20789): the call is written before </think>.
                planned = [THINK_OPEN] + reasoning + ["\n\n"] + tool_call + [THINK_CLOSE]
            elif thinking:
                planned = [THINK_OPEN] + reasoning + [THINK_CLOSE] + answer
            else:
                planned = answer
        if greedy and self.spec_steps and self.knobs.has("wrong-drafts") and not looping:
            # Lossy verification: after a few tokens the output follows the drafts, not the target model.
            wrong = sampling.greedy_rng("wrong-drafts", question, thinking)
            keep = WRONG_DRAFTS_AFTER + (1 if planned[:1] == [THINK_OPEN] else 0)
            planned = planned[:keep] + sampling.varied_tokens(wrong, max(0, len(planned) - keep))
        prompt_tokens = sampling.count_prompt_tokens(messages) if prompt_tokens is None else prompt_tokens
        if looping:
            accept_prob = sampling.ACCEPT_PROB_LOOP
        elif self.knobs.has("rejected-drafts"):
            accept_prob = 0.0
        elif self.knobs.has("long-context-accept") and prompt_tokens > self.knobs.long_context_tokens:
            accept_prob = 0.0
        elif self.knobs.has("low-accept"):
            accept_prob = sampling.ACCEPT_PROB_LOW
        else:
            accept_prob = sampling.ACCEPT_PROB_HEALTHY
        request = SimRequest(prompt_tokens, planned, limit, accept_prob, looping, thinking)
        request.card_profile = profile
        request.sampling = effective
        request.tool_call = tool_call is not None
        return request

    @staticmethod
    def _tool_call(body: dict, question: str):
        """The call the simulated model writes when the request offers tools (tool_choice not "none"): the first
        offered function, in the model's own (qwen3_coder) format; None otherwise."""
        tools = body.get("tools")
        if not tools or body.get("tool_choice") == "none":
            return None
        tool = tools[0]
        name = (tool.get("function") or {}).get("name")
        return sampling.qwen3_coder_call(name, sampling.tool_call_arguments(tool, question))

    # ---- public API ---------------------------------------------------------------------------------------------
    def start(self):
        self.thread.start()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def submit(self, request: SimRequest):
        with self.cond:
            self.waiting.append(request)
            self.counters["num_requests_total"] += 1
            self.cond.notify_all()

    def hung(self) -> bool:
        """hang-after: once knobs.hang_after API requests were admitted, no request is admitted any more (they wait,
        accepted and never answered; /health, which runs no generation, keeps answering)."""
        return self.knobs.has("hang-after") and self.admitted_requests >= self.knobs.hang_after

    def num_queue(self) -> int:
        return len(self.waiting)

    def avg_spec_accept_length(self) -> float:
        return self.total_accepted / self.total_forward if self.total_forward else 0.0

    def usage(self):
        used = sum(request.prompt_tokens + request.generated for request in self.running)
        mamba_used = len(self.running) * MAMBA_SLOTS_PER_REQUEST
        mamba_size = max(1, self.args["max_mamba_cache_size"])
        return used, used / max(1, self.max_total_num_tokens), mamba_used, min(1.0, mamba_used / mamba_size)

    # ---- the loop -----------------------------------------------------------------------------------------------
    def _loop(self):
        while True:
            with self.cond:
                while not self.stopped and not self.running and (not self.waiting or self.hung()):
                    self.cond.wait()
                if self.stopped:
                    return
                admitted = []
                while (self.waiting and not self.hung()
                       and len(self.running) + len(admitted) < self.args["max_running_requests"]):
                    request = self.waiting.popleft()
                    self.admitted_requests += 1 if request.counts else 0
                    admitted.append(request)
            if admitted:
                self._prefill(admitted)
            self._decode_iteration()
            if self.knobs.iteration_ms:
                time.sleep(self.knobs.iteration_ms / 1000.0)

    def _prefill(self, admitted):
        new_tokens = sum(request.prompt_tokens for request in admitted)
        gap = max(1e-6, time.perf_counter() - self.last_prefill_log)
        self.last_prefill_log = time.perf_counter()
        for request in admitted:
            # The prefill forward yields each request's first token.
            request.generated = min(1, request.target)
            self.counters["prompt_tokens_total"] += request.prompt_tokens
            self.counters["generation_tokens_total"] += request.generated
        self.running.extend(admitted)
        _used, token_usage, _mamba_used, mamba_usage = self.usage()
        logfmt.log(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, full token usage: %.2f, mamba usage: %.2f, "
            "#running-req: %d, #queue-req: %d, #pending-token: 0, cuda graph: False, input throughput (token/s): %.2f"
            % (len(admitted), new_tokens, token_usage, mamba_usage, len(self.running) - len(admitted), len(self.waiting),
               new_tokens / gap), self.tag)
        self._finish_done()

    def _accepted_for(self, request) -> int:
        accepted = 1
        for _step in range(self.spec_steps):
            if self.rng.random() >= request.accept_prob:
                break
            accepted += 1
        return accepted

    def _decode_iteration(self):
        if not self.running:
            return
        batch_size = len(self.running)
        for request in self.running:
            remaining = request.target - request.generated
            if remaining <= 0:
                continue
            accepted = min(self._accepted_for(request), remaining)
            request.generated += accepted
            if self.spec_steps:
                request.spec_verify_ct += 1
                request.spec_correct_drafts += accepted - 1
                if not request.spec_histogram:
                    request.spec_histogram = [0] * self.num_draft_tokens
                request.spec_histogram[min(accepted - 1, self.num_draft_tokens - 1)] += 1
            self.interval_accepted += accepted
            self.interval_forward += 1
            self.interval_generated += accepted
            self.counters["generation_tokens_total"] += accepted
            if self.spec_steps:
                self.total_accepted += accepted
                self.total_forward += 1
        self.forward_ct_decode += 1
        if self.forward_ct_decode % max(1, self.args["decode_log_interval"]) == 0:
            self._log_decode(batch_size)
        self._finish_done()

    def _log_decode(self, batch_size):
        now = time.perf_counter()
        gap = max(1e-6, now - self.last_decode_log)
        self.last_decode_log = now
        self.last_gen_throughput = self.interval_generated / gap
        used, token_usage, mamba_used, mamba_usage = self.usage()
        message = "Decode batch, #running-req: %d, #full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f, " % (
            batch_size, used, token_usage, mamba_used, mamba_usage)
        if self.spec_steps and self.interval_forward:
            accept_length = self.interval_accepted / self.interval_forward
            # 0.5.23: correct drafts / (forward passes x (num_draft_tokens - 1)); with topk 1 that is (len - 1) / steps.
            accept_rate = (self.interval_accepted - self.interval_forward) / (self.interval_forward * max(1, self.num_draft_tokens - 1))
            self.last_accept_length, self.last_accept_rate = accept_length, accept_rate
            message += "accept len: %.2f, accept rate: %.2f, " % (accept_length, accept_rate)
        cuda_graph = not self.args["disable_cuda_graph"] and batch_size <= self.args["cuda_graph_max_bs_decode"]
        message += "cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d" % (cuda_graph, self.last_gen_throughput, len(self.waiting))
        self.interval_accepted = self.interval_forward = self.interval_generated = 0
        logfmt.log(message, self.tag)

    def _finish_done(self):
        finished = [request for request in self.running if request.generated >= request.target]
        if finished:
            self.running = [request for request in self.running if request.generated < request.target]
            for request in finished:
                request.done.set()
