# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's HTTP surface on the standard library: health, info, OpenAI chat, native /generate, Prometheus /metrics."""
from __future__ import annotations

import json
import socket
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_sim import SIMULATED_SGLANG_VERSION, logfmt, request_log, sampling
from sglang_sim.scheduler import THINK_CLOSE, THINK_OPEN

AUTH_EXEMPT_PREFIXES = ("/health", "/metrics", "/ready")
REQUEST_TIMEOUT_SECONDS = 600


class ServerState:
    """What the HTTP handlers read: resolved args, status and the scheduler."""

    def __init__(self, args: dict, knobs, scheduler, launch_command: str, max_total_num_tokens: int):
        self.args = args
        self.knobs = knobs
        self.scheduler = scheduler
        self.launch_command = launch_command
        self.max_total_num_tokens = max_total_num_tokens
        self.status = "Starting"
        self.gracefully_exit = False
        self.created = int(time.time())
        self.request_log = request_log.RequestLogger(args, knobs.generation_config)

    def server_info(self) -> dict:
        info = dict(self.args)
        info.update({
            "launch_command": self.launch_command,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_req_input_len": self.args["context_length"] - 1,
            "status": self.status,
            "version": SIMULATED_SGLANG_VERSION,
            "internal_states": [self.internal_state()],
        })
        return info

    def internal_state(self) -> dict:
        scheduler = self.scheduler
        state = {"last_gen_throughput": scheduler.last_gen_throughput,
                 "memory_usage": {"weight": 25.87, "kvcache": 7.12, "token_capacity": self.max_total_num_tokens, "graph": 0.41}}
        if self.args["speculative_algorithm"]:
            state["avg_spec_accept_length"] = scheduler.avg_spec_accept_length()
        return state

    def model_info(self) -> dict:
        # The parser already turned the flag into a dict (its type is json.loads); one reading of it, in sampling.
        preferred = sampling.parse_preferred(self.args.get("preferred_sampling_params"))
        return {"model_path": self.args["model_path"], "tokenizer_path": self.args["tokenizer_path"], "is_generation": True,
                "preferred_sampling_params": preferred, "weight_version": "default", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
                "served_model_name": self.args["served_model_name"]}

    def metrics_text(self) -> str:
        scheduler = self.scheduler
        used, token_usage, _mamba_used, mamba_usage = scheduler.usage()
        labels = 'engine_type="unified",model_name="%s",pp_rank="0",tp_rank="0"' % self.args["served_model_name"]
        # managers/scheduler.py init_metrics: the scheduler collector's labels are updated with --extra-metric-labels.
        for name, value in (self.args.get("extra_metric_labels") or {}).items():
            labels += ',%s="%s"' % (name, str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"'))
        gauges = [
            ("num_running_reqs", "The number of running requests.", len(scheduler.running)),
            ("num_queue_reqs", "The number of requests in the waiting queue.", scheduler.num_queue()),
            ("num_used_tokens", "The number of used tokens.", used),
            ("token_usage", "The token usage.", token_usage),
            ("mamba_usage", "The mamba state usage.", mamba_usage),
            ("gen_throughput", "The generation throughput (token/s).", scheduler.last_gen_throughput),
            ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
            ("spec_accept_length", "The average acceptance length of speculative decoding.", scheduler.last_accept_length),
            ("spec_accept_rate", "The average acceptance rate of speculative decoding (accepted drafts / drafts).", scheduler.last_accept_rate),
        ]
        lines = []
        for name, helptext, value in gauges:
            lines += ["# HELP sglang:%s %s" % (name, helptext), "# TYPE sglang:%s gauge" % name,
                      "sglang:%s{%s} %s" % (name, labels, float(value))]
        counter_labels = 'model_name="%s"' % self.args["served_model_name"]
        for name, helptext in (("prompt_tokens", "Number of prefill tokens processed."),
                               ("generation_tokens", "Number of generation tokens processed."),
                               ("num_requests", "Number of requests processed.")):
            lines += ["# HELP sglang:%s_total %s" % (name, helptext), "# TYPE sglang:%s_total counter" % name,
                      "sglang:%s_total{%s} %s" % (name, counter_labels, float(scheduler.counters[name + "_total"]))]
        return "\n".join(lines) + "\n"


def split_reasoning(text: str, reasoning_parser):
    """(reasoning_content, content) as SGLang's qwen3 reasoning parser returns them for a thinking response."""
    if not reasoning_parser or not text.startswith(THINK_OPEN.strip()):
        return None, text
    body = text[len(THINK_OPEN):] if text.startswith(THINK_OPEN) else text[len(THINK_OPEN.strip()):]
    marker = THINK_CLOSE.strip()
    if marker in body:
        reasoning, content = body.split(marker, 1)
        return reasoning.strip(), content.strip()
    return body.strip(), ""


def _tools_error(body: dict):
    """What protocol.py's ChatCompletionRequest (pydantic) refuses in ``tools`` / ``tool_choice``, or None."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools must be a list."
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                return "Each tool must be an object with type 'function' and a function with a name."
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("none", "auto", "required") and not isinstance(choice, dict):
        return "tool_choice must be 'none', 'auto', 'required' or a named function."
    return None


def _error(message: str, status: int = 400) -> dict:
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    state: ServerState = None

    # ---- plumbing -----------------------------------------------------------------------------------------------
    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def log_request(self, code="-", size="-"):
        level = (self.state.args.get("log_level_http") or self.state.args.get("log_level") or "info").lower()
        if level in ("debug", "info"):
            code = int(code) if str(code).isdigit() else 0
            phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
            logfmt.log_access("%s:%d" % self.client_address[:2], self.requestline, code, phrase)

    def _send(self, status: int, body=b"", content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        elif isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(status)
        if body or status != 200:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _authorized(self, path: str) -> bool:
        api_key = self.state.args.get("api_key")
        if not api_key or self.command == "OPTIONS" or path.startswith(AUTH_EXEMPT_PREFIXES):
            return True
        return self.headers.get("Authorization") == "Bearer " + api_key

    def _route(self):
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        routes = GET_ROUTES if self.command in ("GET", "HEAD") else POST_ROUTES
        handler = routes.get(path)
        if handler is None:
            other = POST_ROUTES if routes is GET_ROUTES else GET_ROUTES
            if path in other:
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})
            return
        handler(self)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._route()

    def do_HEAD(self):  # noqa: N802
        self._route()

    def do_POST(self):  # noqa: N802
        self._route()

    # ---- endpoints ----------------------------------------------------------------------------------------------
    def health(self):
        self.state.request_log.log_health_check(self.path, self.state.status, self.state.gracefully_exit, self.headers)
        ok = self.state.status == "Up" and not self.state.gracefully_exit
        self._send(200 if ok else 503)

    def health_generate(self):
        self.state.request_log.log_health_check(self.path, self.state.status, self.state.gracefully_exit, self.headers)
        if self.state.status != "Up" or self.state.gracefully_exit:
            self._send(503)
            return
        request = self.state.scheduler.build_request({"messages": [{"role": "user", "content": "health"}]}, 1, False)
        self.state.scheduler.submit(request)
        self._send(200 if request.done.wait(20) else 503)

    def ready(self):
        self._send(200 if self.state.status == "Up" and not self.state.gracefully_exit else 503)

    def server_info(self):
        self._send(200, self.state.server_info())

    def model_info(self):
        self._send(200, self.state.model_info())

    def models(self):
        name = self.state.args["served_model_name"]
        card = {"id": name, "object": "model", "created": self.state.created, "owned_by": "sglang", "root": name,
                "max_model_len": self.state.args["context_length"]}
        self._send(200, {"object": "list", "data": [card]})

    def metrics(self):
        if not self.state.args.get("enable_metrics"):
            self._send(404, {"detail": "Not Found"})
            return
        self._send(200, self.state.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")

    def flush_cache(self):
        self._send(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, "
                        "the operation will not be performed.)\n", "text/plain")

    def _generate(self, body: dict, max_new_tokens, effective=None, prompt_tokens=None):
        if self.state.status != "Up" or self.state.gracefully_exit:
            return None
        request = self.state.scheduler.build_request(body, max_new_tokens, self.state.knobs.has("degenerate"), effective,
                                                     prompt_tokens)
        request.counts = True
        self.state.scheduler.submit(request)
        request.done.wait(REQUEST_TIMEOUT_SECONDS)
        return request

    def _too_long(self, prompt_tokens):
        """managers/tokenizer_manager.py: _validate_one_request - the message of a prompt the context cannot hold."""
        context_len = self.state.args["context_length"]
        if prompt_tokens >= context_len:
            return "The input (%d tokens) is longer than the model's context length (%d tokens)." % (prompt_tokens, context_len)
        return None

    def spec_meta_info(self, request) -> dict:
        """managers/tokenizer_manager.py: _calculate_spec_decoding_metrics - per request, with speculative decoding on."""
        if not self.state.args["speculative_algorithm"] or request.spec_verify_ct <= 0:
            return {}
        proposed = request.spec_verify_ct * (self.state.scheduler.num_draft_tokens - 1)
        meta = {"spec_accept_rate": request.spec_correct_drafts / proposed if proposed else 0.0,
                "spec_accept_length": request.generated / request.spec_verify_ct,
                "spec_num_correct_drafts": request.spec_correct_drafts, "spec_num_proposed_drafts": proposed,
                "spec_verify_ct": request.spec_verify_ct,
                "spec_accepted_drafts": request.spec_correct_drafts, "spec_proposed_drafts": proposed}
        if request.spec_histogram:
            meta["spec_correct_drafts_histogram"] = list(request.spec_histogram)
            meta["spec_accept_histogram"] = list(request.spec_histogram)
        return meta

    def chat_completions(self):
        body = self._read_json()
        if body is None:
            self._send(400, _error("The request body is not a JSON object."))
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._send(400, _error("messages must be a non-empty list."))
            return
        max_new = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_new is not None and (not isinstance(max_new, int) or max_new < 1):
            self._send(400, _error("max_tokens must be a positive integer."))
            return
        tools_error = _tools_error(body)
        if tools_error:
            self._send(400, _error(tools_error))
            return
        too_long = self._too_long(sampling.count_prompt_tokens(messages))
        if too_long:
            self._send(400, _error(too_long))
            return
        self.state.request_log.log_chat(body, self.headers)
        request = self._generate(body, max_new)
        if request is None or not request.done.is_set():
            self._send(503, _error("The server is not ready.", 503))
            return
        reasoning, content = split_reasoning(request.text(), self.state.args.get("reasoning_parser") if request.thinking else None)
        finish_reason = request.finish_reason
        tool_calls = None
        parser = self.state.args.get("tool_call_parser")
        if parser and body.get("tools") and body.get("tool_choice") != "none" and not body.get("stream"):
            # serving_chat.py: _process_tool_calls - the parser reads the content (after the reasoning parser took the
            # thinking block); a call found there becomes tool_calls and finish_reason "stop" becomes "tool_calls".
            content, calls = sampling.parse_tool_calls(content or "", parser)
            if calls:
                tool_calls = [{"id": "call_%s" % uuid.uuid4().hex[:24], "index": index, "type": "function",
                               "function": {"name": name, "arguments": arguments}} for index, (name, arguments) in enumerate(calls)]
                finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
                content = content or None
        model = body.get("model") or self.state.args["served_model_name"]
        completion_id = uuid.uuid4().hex
        usage = {"prompt_tokens": request.prompt_tokens, "completion_tokens": request.generated,
                 "total_tokens": request.prompt_tokens + request.generated, "prompt_tokens_details": None}
        if body.get("stream"):
            self._stream_chat(completion_id, model, reasoning, content, request.finish_reason, usage)
            return
        message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": tool_calls}
        self._send(200, {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
                         "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
                                      "matched_stop": None}],
                         "usage": usage})

    def _stream_chat(self, completion_id, model, reasoning, content, finish_reason, usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def chunk(delta, finish=None):
            payload = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            self.wfile.write(("data: %s\n\n" % json.dumps(payload)).encode("utf-8"))

        chunk({"role": "assistant", "content": ""})
        for key, text in (("reasoning_content", reasoning), ("content", content)):
            words = (text or "").split(" ")
            for start in range(0, len(words) if text else 0, 8):
                piece = " ".join(words[start:start + 8]) + (" " if start + 8 < len(words) else "")
                chunk({key: piece})
        chunk({}, finish_reason)
        final = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model, "choices": [],
                 "usage": usage}
        self.wfile.write(("data: %s\n\ndata: [DONE]\n\n" % json.dumps(final)).encode("utf-8"))

    def generate(self):
        body = self._read_json()
        if body is None:
            self._send(400, _error("The request body is not a JSON object."))
            return
        self.state.request_log.log_generate(body, self.headers)
        params = body.get("sampling_params") or {}
        text = body.get("text")
        if not isinstance(text, str) and body.get("input_ids") is None:
            # managers/io_struct.py: GenerateReqInput.normalize_batch_and_arguments; http_server.py answers a ValueError so.
            self._send(400, {"error": {"message": "Either text, input_ids or input_embeds should be provided."}})
            return
        if not isinstance(text, str):
            # input_ids are not simulated beyond their count (no tokenizer): the ids stand for the words.
            ids = body.get("input_ids")
            if not isinstance(ids, list) or not all(isinstance(item, int) and not isinstance(item, bool) for item in ids):
                self._send(400, {"error": {"message": "input_ids must be a list of token ids."}})
                return
            text = " ".join("t%d" % item for item in ids)
        if not isinstance(params, dict):
            self._send(400, {"error": {"message": "sampling_params must be a dict."}})
            return
        prompt_tokens = max(1, len(text.split()))
        too_long = self._too_long(prompt_tokens)
        if too_long:
            self._send(400, {"error": {"message": too_long}})
            return
        # tokenizer_manager.py: {**preferred_sampling_params, **obj.sampling_params} - the server's values fill the keys
        # the request leaves out; generation_config.json plays no part here.
        preferred = sampling.parse_preferred(self.state.args.get("preferred_sampling_params"))
        effective = sampling.native_sampling(params, preferred)
        chat_like = {"messages": [{"role": "user", "content": text}], "chat_template_kwargs": {"enable_thinking": False}}
        merged = dict(preferred or {})
        merged.update(params)
        request = self._generate(chat_like, merged.get("max_new_tokens", 128), effective, prompt_tokens)
        if request is None or not request.done.is_set():
            self._send(503, _error("The server is not ready.", 503))
            return
        meta_info = {"id": request.rid, "finish_reason": {"type": request.finish_reason}, "prompt_tokens": request.prompt_tokens,
                     "weight_version": "default", "reasoning_tokens": 0, "completion_tokens": request.generated, "cached_tokens": 0}
        meta_info.update(self.spec_meta_info(request))
        # tokenizer_manager.py: _handle_batch_output - a finished non-streaming request: text, output_ids, meta_info.
        self._send(200, {"text": request.text(), "output_ids": request.output_ids(), "meta_info": meta_info})

    def completions(self):
        """/v1/completions: the request's own values or the request model's defaults (sampling.completion_sampling)."""
        body = self._read_json()
        if body is None or not isinstance(body.get("prompt"), str):
            self._send(400, _error("prompt must be a string."))
            return
        max_new = body.get("max_tokens", 16)
        if not isinstance(max_new, int) or max_new < 1:
            self._send(400, _error("max_tokens must be a positive integer."))
            return
        self.state.request_log.log_completion(body, self.headers)
        chat_like = {"messages": [{"role": "user", "content": body["prompt"]}], "chat_template_kwargs": {"enable_thinking": False}}
        request = self._generate(chat_like, max_new, sampling.completion_sampling(body))
        if request is None or not request.done.is_set():
            self._send(503, _error("The server is not ready.", 503))
            return
        usage = {"prompt_tokens": request.prompt_tokens, "completion_tokens": request.generated,
                 "total_tokens": request.prompt_tokens + request.generated, "prompt_tokens_details": None}
        self._send(200, {"id": uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                         "model": body.get("model") or self.state.args["served_model_name"],
                         "choices": [{"index": 0, "text": request.text(), "logprobs": None,
                                      "finish_reason": request.finish_reason, "matched_stop": None}],
                         "usage": usage})


GET_ROUTES = {
    "/health": Handler.health, "/health_generate": Handler.health_generate, "/ready": Handler.ready,
    "/server_info": Handler.server_info, "/get_server_info": Handler.server_info,
    "/model_info": Handler.model_info, "/get_model_info": Handler.model_info,
    "/v1/models": Handler.models, "/metrics": Handler.metrics, "/flush_cache": Handler.flush_cache,
}
POST_ROUTES = {
    "/v1/chat/completions": Handler.chat_completions, "/v1/completions": Handler.completions,
    "/generate": Handler.generate, "/flush_cache": Handler.flush_cache,
}


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(state: ServerState) -> SimHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    host = state.args["host"]
    server_class = SimHTTPServer
    if ":" in host:
        server_class = type("SimHTTPServer6", (SimHTTPServer,), {"address_family": socket.AF_INET6})
    return server_class((host, state.args["port"]), handler)


class DummyHealthHandler(BaseHTTPRequestHandler):
    """utils/common.py: launch_dummy_health_check_server - what a node with node_rank >= 1 serves on --port: GET
    /ping, /health and /health_generate answer 200 with an empty body whatever the schedulers do; /metrics with
    --enable-metrics (add_prometheus_middleware); anything else FastAPI's 404/405. uvicorn runs it with
    log_level="warning", so no access lines."""
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    enable_metrics = False
    PATHS = ("/ping", "/health", "/health_generate")

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def _send(self, status: int, body=b"", content_type="application/json"):
        if isinstance(body, dict):
            body = json.dumps(body).encode("utf-8")
        self.send_response(status)
        if body or status != 200:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path in self.PATHS:
            self._send(200)
        elif path == "/metrics" and self.enable_metrics:
            self._send(200, b"", "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, {"detail": "Not Found"})

    def _other(self):
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if path in self.PATHS:
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    do_POST = do_PUT = do_DELETE = do_HEAD = _other  # noqa: N815


def make_dummy_health_server(host: str, port: int, enable_metrics: bool) -> SimHTTPServer:
    handler = type("BoundDummyHealthHandler", (DummyHealthHandler,), {"enable_metrics": bool(enable_metrics)})
    server_class = SimHTTPServer
    if ":" in host:
        server_class = type("SimHTTPServer6", (SimHTTPServer,), {"address_family": socket.AF_INET6})
    return server_class((host, port), handler)
