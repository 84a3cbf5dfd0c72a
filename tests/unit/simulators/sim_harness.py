# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers that run the SGLang simulator (simulators/sglang_sim) as a subprocess on 127.0.0.1 with a free port."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "sglang_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

READY_LINE = "The server is fired up and ready to roll!"
# What the spec_decode_stats parser reads: an optional millisecond part and optional DP/TP tags.
LINE_PREFIX = r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?: DP\d+)?(?: TP(?P<tp>\d+))?\] "
DECODE_RE = re.compile(
    LINE_PREFIX + r"Decode batch, #running-req: (?P<running>\d+), #full token: (?P<full>\d+), full token usage: (?P<usage>\d+\.\d{2}), "
    r"mamba num: (?P<mamba>\d+), mamba usage: (?P<mamba_usage>\d+\.\d{2}), accept len: (?P<len>\d+\.\d{2}), "
    r"accept rate: (?P<rate>\d+\.\d{2}), cuda graph: (?P<graph>True|False), gen throughput \(token/s\): (?P<tput>\d+\.\d{2}), "
    r"#queue-req: (?P<queue>\d+)$")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sim_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SIM_SOURCE + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SGLANG_LOG_MS", None)
    for key in [key for key in env if key.startswith("SGLANG_SIM_")]:
        env.pop(key)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def run_cli(args, timeout=20, **env):
    """Run the simulator to completion (argument errors) and return the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "sglang_sim"] + list(args), env=sim_env(**env), capture_output=True, text=True,
                          timeout=timeout, check=False)


def http(method, url, body=None, headers=None, timeout=10):
    """(status, headers, body bytes); never raises for HTTP error statuses."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class SimProcess:
    """One simulator run: its Popen, port, log file and helpers."""

    def __init__(self, tmp_path, args, **env):
        self.port = free_port()
        self.log_path = tmp_path / ("sim-%d.log" % self.port)
        self.url = "http://127.0.0.1:%d" % self.port
        command = [sys.executable, "-m", "sglang_sim", "--model-path", "Qwen/Qwen3.6-27B", "--host", "127.0.0.1", "--port", str(self.port)]
        command += list(args)
        env.setdefault("SGLANG_SIM_STARTUP_SECONDS", "0.3")
        env.setdefault("SGLANG_SIM_ITERATION_MS", "1")
        # A fixed seed makes the acceptance draws, and so the assertions on their means, repeatable.
        env.setdefault("SGLANG_SIM_SEED", "20261129")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, env=sim_env(**env), stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, text, timeout=15.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                return text in self.log()
            time.sleep(0.05)
        return False

    def wait_ready(self, timeout=15.0):
        assert self.wait_for_log(READY_LINE, timeout), "simulator never became ready:\n" + self.log()[-3000:]

    def children(self):
        """{pid: (comm, cmdline)} of this run's child processes."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry, "rb") as handle:
                    stat = handle.read()
                ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
                if ppid != self.proc.pid:
                    continue
                with open("/proc/%s/comm" % entry, encoding="utf-8") as handle:
                    comm = handle.read().strip()
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode().strip()
            except (OSError, ValueError, IndexError):
                continue
            found[int(entry)] = (comm, cmdline)
        return found

    def is_sim_child(self, pid: int) -> bool:
        try:
            with open("/proc/%d/comm" % pid, encoding="utf-8") as handle:
                return handle.read().startswith("sglang::")
        except OSError:
            return False

    def chat(self, body, api_key=None, timeout=30):
        headers = {"Authorization": "Bearer " + api_key} if api_key else {}
        status, _headers, raw = http("POST", self.url + "/v1/chat/completions", body, headers, timeout=timeout)
        return status, json.loads(raw or b"null")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def pid_alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    # A zombie has exited; only its parent's wait is missing.
    return stat[stat.rindex(b")") + 2:].split()[0] != b"Z"


def wait_gone(pids, timeout=10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(pid_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


SPEC_ARGS = ["--speculative-algo", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4", "--reasoning-parser", "qwen3"]


# One simulated H200 (nvidia-smi memory.total 143771 MiB), for runs with TP 1: the 27B bf16 model with MTP does not fit
# one 48 GB card, and on one 80 GB card its state pool serves no request: SGLang refuses both starts, so does the simulator.
ONE_BIG_CARD = str(143771 / 1024.0)


@pytest.fixture
def start_sim_on_one_big_card(start_sim):
    """start_sim with a simulated GPU large enough for TP 1 (test modules import it as their start_sim)."""
    def _start(args=(), **env):
        env.setdefault("SGLANG_SIM_GPU_MEMORY_GB", ONE_BIG_CARD)
        return start_sim(args, **env)
    return _start
