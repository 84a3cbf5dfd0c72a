"""Helpers for the sglang_service scenario's testinfra checks."""

from __future__ import annotations

import json

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge
from ansible_collections.llmops.serving.tests.support.waiting import wait_until

INSTANCE = "molecule"
UNIT = f"sglang-{INSTANCE}.service"
PORT = 30000
LOG_DIR = f"/var/log/llmops-serving/{INSTANCE}"
CURRENT_LOG = f"{LOG_DIR}/current.log"
RECORD = f"/var/lib/llmops-serving/{INSTANCE}/deployment.json"
SIM = "/opt/sglang-sim/bin/sglang-sim"
STAGED_MODEL = "/models/Qwen3.6-27B"
SERVED_MODEL = f"/var/lib/llmops-serving/{INSTANCE}/model"
READY_LINE = "The server is fired up and ready to roll!"


def unit_properties(host):
    out = host.check_output(f"systemctl show -p MainPID -p InvocationID -p ActiveState -p SubState {UNIT}")
    return dict(line.split("=", 1) for line in out.splitlines())


def wait_ready(host, timeout=30):
    """Wait for the current invocation's log to say ready and for /health to answer 200."""
    def ready():
        props = unit_properties(host)
        if props["ActiveState"] != "active":
            return None
        log = host.run(f"cat {CURRENT_LOG}").stdout
        header_ok = f"invocation_id={props['InvocationID']}" in log.splitlines()[0] if log else False
        health = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{PORT}/health").stdout
        return props if header_ok and READY_LINE in log and health == "200" else None
    return wait_until(ready, timeout, f"{UNIT} to be ready")


def deployment_id(host):
    return json.loads(host.file(RECORD).content_string)["deployment_id"]


def rerun_role(extra_vars):
    """Converge again from the controller with extra variables (a new deployment); it must succeed."""
    run = rerun_converge(extra_vars)
    assert run.rc == 0, run.summary()
    return run


def start_stray(host, port=PORT, log="/root/sglang-serve.log"):
    """Start a server by hand, outside systemd, the way the incident did (nohup over a shell)."""
    host.run(
        f"nohup {SIM} --model-path /models/Qwen3.6-27B --port {port} --tp-size 2 > {log} 2>&1 & echo $! > /run/stray.pid"
    )
    pid = int(host.file("/run/stray.pid").content_string.strip())
    wait_until(lambda: host.socket(f"tcp://127.0.0.1:{port}").is_listening, 30, f"the stray server (PID {pid}) to listen")
    return pid


def stop_pid(host, pid):
    """Stop one process by PID (never by name) and wait for it to be gone."""
    host.run(f"kill {pid}")
    wait_until(lambda: not host.file(f"/proc/{pid}").exists, 30, f"PID {pid} to exit")
