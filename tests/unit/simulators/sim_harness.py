# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers that run the SGLang simulator (simulators/sglang_sim) as a subprocess on 127.0.0.1 with a free port,
on the GPUs of a GPU kit (GpuKit: the NVIDIA driver stand-in with its own proc files, device nodes and memory ledger)."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "sglang_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from sglang_sim import cuda as sim_cuda  # noqa: E402  pylint: disable=wrong-import-position

DRIVER_STANDIN = os.path.abspath(os.path.join(SIM_SOURCE, "..", "standins", "nvidia_driver", "nvidia_standin.py"))
DRIVER_VERSION = "580.95.05"
KERNEL_VERSION_LINE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (pve-sim@gpu-kit)  "
                       "Tue Sep 30 10:00:00 UTC 2025\n" % DRIVER_VERSION)
UVM_MAJOR = 508      # nvidia-uvm's major is dynamic (/proc/devices); one a host could give it
A6000_MIB = 49140    # nvidia-smi memory.total of an RTX A6000
H200_MIB = 143771    # of an H200
# (PCI bus ID, UUID) of the kit's GPUs, in bus order; device minors follow the index.
KIT_GPUS = [("0000:18:00.0", "GPU-3b1f8c2e-7d4a-5e90-b6c1-2f8e9a0d4c17"),
            ("0000:28:00.0", "GPU-a6e0d953-1c7b-4f28-8e3d-90b5c7f1e246")]


class GpuKit:
    """GPUs as the NVIDIA driver stand-in shows them to a container: the kernel module's proc files, the device nodes
    (real character nodes made with mknod: root only), the node's memory ledger, and the driver stand-in installed in
    ``standin_dir`` with its driver.json, as the installer stand-in installs it; SGLANG_SIM_NVIDIA_STANDIN_DIR points
    the simulator there."""

    def __init__(self, root, gpus=2, memory_mib=A6000_MIB, missing_nodes=(), name="NVIDIA RTX A6000"):
        """``gpus`` GPUs of ``memory_mib`` MiB; ``missing_nodes``: device nodes not passed in (``nvidia1``,
        ``nvidiactl``, ``nvidia-uvm``), as in a container whose GPU passthrough is incomplete."""
        if os.geteuid() != 0:
            pytest.skip("the GPU kit makes /dev/nvidia* character nodes with mknod, which needs root")
        self.root = str(root)
        self.proc_dir = os.path.join(self.root, "proc-driver-nvidia")
        self.dev_dir = os.path.join(self.root, "dev")
        self.ledger_dir = os.path.join(self.root, "gpu-memory")
        self.standin_dir = os.path.join(self.root, "nvidia-standin")
        for directory in (self.proc_dir, self.dev_dir, self.ledger_dir, self.standin_dir):
            os.makedirs(directory, exist_ok=True)
        shutil.copyfile(DRIVER_STANDIN, os.path.join(self.standin_dir, sim_cuda.MODULE_FILE))
        with open(os.path.join(self.standin_dir, sim_cuda.CONFIG_FILE), "w", encoding="utf-8") as handle:
            json.dump({"proc_dir": self.proc_dir, "dev_dir": self.dev_dir, "ledger_dir": self.ledger_dir,
                       "driver_version": DRIVER_VERSION, "cuda_version": "13.0"}, handle)
        self.module, _driver = sim_cuda.load_driver(self.env())
        self.gpus = [{"bus_id": bus_id, "uuid": uuid, "name": name, "minor": minor, "memory_total_mib": memory_mib}
                     for minor, (bus_id, uuid) in enumerate(KIT_GPUS[:gpus])]
        self.module.write_driver_state(self.proc_dir, self.ledger_dir, self.gpus, DRIVER_VERSION)
        with open(os.path.join(self.proc_dir, "version"), "w", encoding="utf-8") as handle:
            handle.write(KERNEL_VERSION_LINE)
        nodes = [("nvidiactl", self.module.NVIDIA_MAJOR, self.module.CTL_MINOR), ("nvidia-uvm", UVM_MAJOR, 0)]
        nodes += [("nvidia%d" % gpu["minor"], self.module.NVIDIA_MAJOR, gpu["minor"]) for gpu in self.gpus]
        for node, major, minor in nodes:
            if node in missing_nodes:
                continue
            try:
                os.mknod(os.path.join(self.dev_dir, node), stat.S_IFCHR | 0o666, os.makedev(major, minor))
            except PermissionError as error:
                pytest.skip("mknod is not allowed here (%s): the GPU kit needs real character nodes" % error)

    def env(self):
        return {sim_cuda.STANDIN_DIR_ENV: self.standin_dir}

    def driver(self):
        return self.module.Driver.from_config(os.path.join(self.standin_dir, sim_cuda.CONFIG_FILE))

    def gpu(self, index):
        """The kit's GPU ``index`` (the node's nvidia-smi index) as the driver describes it."""
        return self.driver().gpus()[index]

    def live(self, index):
        """The live allocations on GPU ``index``: dicts pid, process_name, used_mib, gpu_uuid, ..."""
        return self.driver().ledger.live(self.gpu(index))

    def node_rdev(self, node):
        return os.stat(os.path.join(self.dev_dir, node)).st_rdev

    def nvidia_smi(self, argv):
        """(exit status, standard output) of the stand-in's nvidia-smi for this kit."""
        out = io.StringIO()
        code = self.module.nvidia_smi(list(argv), self.driver(), out, io.StringIO())
        return code, out.getvalue()


# The kit every simulator run gets unless it names another: conftest.py sets how to build it; it is built the first
# time a run needs it (tests that start no simulator make none).
_DEFAULT_KIT = {"factory": None, "kit": None}


def use_default_kit(factory):
    """Build the default kit with ``factory()`` when a run needs it (None: no default kit)."""
    _DEFAULT_KIT.update(factory=factory, kit=None)


def default_kit() -> GpuKit:
    if _DEFAULT_KIT["kit"] is None:
        if _DEFAULT_KIT["factory"] is None:
            raise RuntimeError("no GPU kit: simulator runs need tests/unit/simulators/conftest.py's fixtures")
        _DEFAULT_KIT["kit"] = _DEFAULT_KIT["factory"]()
    return _DEFAULT_KIT["kit"]


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
    """The simulator's environment: this one without SGLANG_SIM_* and CUDA_VISIBLE_DEVICES, the default GPU kit's
    driver unless ``extra`` names one (SGLANG_SIM_NVIDIA_STANDIN_DIR), then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SIM_SOURCE + os.pathsep + env.get("PYTHONPATH", "")
    for key in ["SGLANG_LOG_MS", "CUDA_VISIBLE_DEVICES", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"]:
        env.pop(key, None)
    for key in [key for key in env if key.startswith("SGLANG_SIM_")]:
        env.pop(key)
    if sim_cuda.STANDIN_DIR_ENV not in extra:
        env.update(default_kit().env())
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


# H200s (nvidia-smi memory.total 143771 MiB), for runs with TP 1: the 27B bf16 model with MTP does not fit one 48 GB
# card, and on one 80 GB card its state pool serves no request: SGLang refuses both starts, so does the simulator.
@pytest.fixture
def start_sim_on_one_big_card(start_sim, make_gpu_kit):
    """start_sim on a kit of two H200s, large enough for TP 1 (test modules import it as their start_sim)."""
    kit = make_gpu_kit(memory_mib=H200_MIB, name="NVIDIA H200")

    def _start(args=(), **env):
        for key, value in kit.env().items():
            env.setdefault(key, value)
        return start_sim(args, **env)
    return _start
