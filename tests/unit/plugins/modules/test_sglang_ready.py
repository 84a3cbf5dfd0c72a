# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_ready against a real log file, a real HTTP /health on loopback, and a scripted `systemctl show`."""

from __future__ import annotations

import http.server
import os
import threading
import time

import pytest

from ansible_collections.llmops.serving.plugins.modules import sglang_ready
from ansible_collections.llmops.serving.tests.unit.fakes import FakeSystemctl, show_text

INVOCATION = "0123456789abcdef0123456789abcdef"
READY = "The server is fired up and ready to roll!"


def header(invocation=INVOCATION):
    return (f"# llmops-serving instance=q deployment_id={'d' * 64} invocation_id={invocation} pid=4242 "
            f"started_at=2026-11-29T10:00:00Z unit=sglang-q.service\n")


def stamp():
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + ".%03d" % int((now % 1) * 1000)


class Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(self.code)
        self.end_headers()

    def log_message(self, *args):
        del args


@pytest.fixture
def health():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def unit_show(active, sub, result="success", invocation=INVOCATION):
    return show_text(Id="sglang-q.service", ActiveState=active, SubState=sub, Result=result, MainPID="4242",
                     InvocationID=invocation, ExecMainStartTimestamp="Sun 2026-11-29 10:00:00 UTC",
                     ControlGroup="/system.slice/sglang-q.service")


def run(args, states):
    """Run the module while `systemctl show` answers with the next of ``states`` (the last one repeats)."""
    systemctl = FakeSystemctl(*[unit_show(*state) for state in states])
    result, failed = systemctl.run_module(sglang_ready.main, args)
    return result, failed, systemctl.commands


def test_ready_line_written_during_the_wait_is_noticed_within_a_poll(tmp_path, health):
    log = tmp_path / "20261129T100000Z-x.log"
    log.write_text(header() + f"[{stamp()}] Load weight begin.\n")
    (tmp_path / "current.log").symlink_to(log.name)

    def write_ready():
        time.sleep(0.6)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"[{stamp()}] {READY}\n")
    writer = threading.Thread(target=write_ready)
    writer.start()
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 10,
                                  "poll_interval": 0.1}, [("active", "running")])
    writer.join()
    assert not failed, result["msg"]
    assert result["ready"] and not result["ready_before_wait"]
    assert result["log_file"] == str(log)
    assert 0 <= result["lag_after_ready_line_seconds"] < 1.0
    assert result["changed"] is False


def test_an_older_invocations_log_is_never_taken_for_the_current_one(tmp_path, health):
    log = tmp_path / "old.log"
    log.write_text(header("f" * 32) + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path / "current.log"), "url": health,
                                  "timeout": 0.5, "poll_interval": 0.1}, [("active", "running")])
    assert failed and not result["ready"]
    assert "has not switched" in result["msg"] and INVOCATION in result["msg"]


def test_startup_oom_fails_at_once_quoting_the_line(tmp_path, health):
    # The hybrid-cache OOM message as given in shared/reference/sglang.md (not a captured log line).
    oom = "Not enough GPU memory for hybrid (mamba/linear-attention) state cache ... Try: (1) reduce --max-running-requests"
    log = tmp_path / "run.log"
    log.write_text(header() + f"[{stamp()} TP0] {oom}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    started = time.monotonic()
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                 [("activating", "start")])
    assert failed and time.monotonic() - started < 5
    assert result["startup_error"]["kind"] == "oom_hybrid"
    assert oom in result["msg"]


def test_a_unit_that_exited_fails_at_once_with_its_logs_last_lines(tmp_path, health):
    log = tmp_path / "run.log"
    log.write_text(header() + f"[{stamp()}] sglang serve: error: ambiguous option: --cuda-graph-max-bs could match x, y\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                [("activating", "start"), ("activating", "auto-restart", "exit-code")])
    assert failed and len(calls) == 2
    assert "exited before it became ready" in result["msg"]
    assert "ambiguous option" in result["msg"]


def test_a_restart_that_never_happens_times_out_saying_so(tmp_path, health):
    log = tmp_path / "run.log"
    log.write_text(header() + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 0.4,
                                  "poll_interval": 0.1, "previous_invocation_id": INVOCATION}, [("active", "running")])
    assert failed
    assert "from before the restart" in result["msg"]


def test_health_must_answer_200_too(tmp_path, health):
    Health.code = 503
    try:
        log = tmp_path / "run.log"
        log.write_text(header() + f"[{stamp()}] {READY}\n")
        (tmp_path / "current.log").symlink_to(log.name)
        result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 0.4,
                                      "poll_interval": 0.1}, [("active", "running")])
    finally:
        Health.code = 200
    assert failed and "answered 503" in result["msg"]


def test_already_ready_reports_no_lag(tmp_path, health):
    log = tmp_path / "run.log"
    log.write_text(header() + f"[{stamp()}] {READY}\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, _calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 5},
                                 [("active", "running")])
    assert not failed and result["ready_before_wait"]
    assert "lag_after_ready_line_seconds" not in result


def test_a_down_unit_with_a_stray_on_its_port_names_the_stray(tmp_path, health):
    # The incident: the unit was stopped and something else (here: this test's own HTTP server) holds the port.
    log = tmp_path / "run.log"
    log.write_text(header() + f"[{stamp()}] SIGTERM received. Draining requests and shutting down...\n")
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, dummy_calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": health, "timeout": 30},
                                      [("failed", "failed", "signal")])
    assert failed
    assert "port %s is held by PID %d" % (health.rsplit(":", 1)[1], os.getpid()) in result["msg"]
    assert [holder["pid"] for holder in result["port_holders"]] == [os.getpid()]


def test_a_down_unit_with_a_free_port_names_no_holder(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(header())
    (tmp_path / "current.log").symlink_to(log.name)
    result, failed, dummy_calls = run({"name": "sglang-q", "log_path": str(tmp_path), "url": "http://127.0.0.1:1", "timeout": 30},
                                      [("inactive", "dead")])
    assert failed and result["port_holders"] == []
    assert "held by" not in result["msg"]


def test_systemd_that_cannot_be_asked_fails_with_the_facts_so_far(tmp_path):
    systemctl = FakeSystemctl((1, "", "Failed to connect to bus: No such file or directory\n"))
    result, failed = systemctl.run_module(sglang_ready.main, {"name": "sglang-q", "log_path": str(tmp_path), "timeout": 30})
    assert failed and len(systemctl.calls) == 1
    assert result["msg"].startswith("cannot ask systemd about sglang-q.service: systemctl show")
    assert (result["ready"], result["unit"], result["last_lines"], result["log_file"]) == (False, {}, [], None)
    assert 0 <= result["elapsed_seconds"] < 5
