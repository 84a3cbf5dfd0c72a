# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_lxc when the Proxmox VE API is in trouble (issue 30): 5xx answers, connections reset, tasks that never finish
or whose status cannot be read. Against the simulator's fault switches (pve_sim.faults) on 127.0.0.1, --no-lxc.

What a retry waits (pve_api.pause) is recorded instead of slept, so the tests are fast and say exactly what was
waited. Every wait for the simulator is for a state, bounded."""
from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

pytest.importorskip("proxmoxer")

from ansible_collections.llmops.serving.plugins.module_utils import pve_api  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.plugins.modules import pve_lxc  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module  # noqa: E402  pylint: disable=wrong-import-position
# sim: a fixture, requested by the tests under this name.
from ansible_collections.llmops.serving.tests.unit.plugins.modules.test_pve_lxc import (  # noqa: E402  pylint: disable=wrong-import-position,unused-import
    CONFIG, SIM_SOURCE, TEMPLATE, args, conf, sim,
)

# The real path: imported through collections/ (a symlink), SIM_SOURCE names the same directory by another path, and
# pve_sim must be one module whichever test imports it first.
if os.path.realpath(SIM_SOURCE) not in sys.path:
    sys.path.insert(0, os.path.realpath(SIM_SOURCE))

from pve_sim import faults  # noqa: E402  pylint: disable=wrong-import-position

UPID = r"UPID:pve:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:%s:%d:root@pam:"


@pytest.fixture(autouse=True)
def pauses(sim, monkeypatch):
    """The waits between attempts, recorded instead of slept; no fault rule before or after a test."""
    waited = []
    monkeypatch.setattr(pve_api, "pause", waited.append)
    faults.clear(str(sim["state"]))
    yield waited
    faults.clear(str(sim["state"]))


def fault(sim, **rule):
    return faults.add(str(sim["state"]), rule)


def fired(sim):
    return [rule["fired"] for rule in faults.rules(str(sim["state"]))]


def create(sim, vmid, **extra):
    result, failed = run_module(pve_lxc.main, args(sim, vmid, ostemplate=TEMPLATE, config=CONFIG, **extra))
    assert not failed, result
    return result


def wait_until(condition, timeout=20.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("%s did not hold within %s s" % (what, timeout))


# -- 5xx -------------------------------------------------------------------------------------------

def test_a_get_answered_503_is_sent_again_and_the_run_succeeds(sim, pauses):
    create(sim, 321)
    fault(sim, method="GET", path="/nodes/pve/lxc/321/config", status=503, count=2)
    result, failed = run_module(pve_lxc.main, args(sim, 321, config=CONFIG))
    assert not failed and not result["changed"], result
    assert fired(sim) == [2] and pauses == [0.5, 1.0]


def test_a_get_that_keeps_failing_names_the_node_the_request_pves_text_and_the_attempts(sim, pauses):
    create(sim, 322, auth="token")
    # pveproxy's answer while its connection to pvedaemon times out (AnyEvent::HTTP's 596).
    fault(sim, method="GET", path="/nodes/pve/lxc/322/config", status=596, message="Connection timed out", count=10)
    result, failed = run_module(pve_lxc.main, args(sim, 322, auth="token", config=CONFIG))
    assert failed
    assert re.fullmatch(
        r"Proxmox API error for CT 322 on node pve: GET /nodes/pve/lxc/322/config answered 596 Errors during TLS "
        r"negotiation, request sending and header processing: Connection timed out \(tried 4 times over \d+\.\d s\)",
        result["msg"]), result["msg"]
    assert fired(sim) == [4] and pauses == [0.5, 1.0, 2.0]
    # No secret in what the module returns: not the token's secret, no ticket, no header.
    text = json.dumps(result)
    assert sim["token"]["api_token_secret"] not in text and "PVEAPIToken" not in text and "PVEAuthCookie" not in text


def test_500_is_pves_refusal_and_is_never_sent_again(sim, pauses):
    fault(sim, method="GET", path="/nodes/pve/storage/local/content", status=500, message="got timeout", count=3)
    result, failed = run_module(pve_lxc.main, args(sim, 328, ostemplate=TEMPLATE, config=CONFIG))
    assert failed and result["msg"] == ("Proxmox API error for CT 328 on node pve: GET /nodes/pve/storage/local/content "
                                        "answered 500 Internal Server Error: got timeout")
    assert fired(sim) == [1] and pauses == [] and conf(sim, 328) is None


def test_a_create_answered_503_is_not_sent_again_and_its_effect_is_unknown(sim, pauses):
    fault(sim, method="POST", path="/nodes/pve/lxc", status=503, count=5)
    result, failed = run_module(pve_lxc.main, args(sim, 323, ostemplate=TEMPLATE, config=CONFIG))
    assert failed
    assert result["msg"] == (
        "Proxmox API error for CT 323 on node pve: POST /nodes/pve/lxc (create CT 323) answered 503 Service "
        "Unavailable: Service Unavailable; it may have reached the node, so it was not sent again and its effect is "
        "unknown: CT 323 may or may not exist now: check `pct status 323` on node pve before running again")
    assert fired(sim) == [1] and pauses == []


def test_a_start_answered_595_never_reached_pvedaemon_and_is_sent_again(sim, pauses):
    create(sim, 324)
    fault(sim, method="POST", path="/nodes/pve/lxc/324/status/start", status=595, message="Connection refused")
    result, failed = run_module(pve_lxc.main, args(sim, 324, state="started"))
    assert not failed and result["power"] == "started" and result["status"] == "running", result
    assert [task["exitstatus"] for task in result["tasks"]] == ["OK"]
    assert fired(sim) == [1] and pauses == [0.5]


def test_a_login_answered_503_is_sent_again_and_one_that_keeps_failing_is_not_called_a_wrong_password(sim, pauses):
    create(sim, 325)
    fault(sim, method="POST", path="/access/ticket", status=503, count=2)
    result, failed = run_module(pve_lxc.main, args(sim, 325, config=CONFIG))
    assert not failed and fired(sim) == [2] and pauses == [0.5, 1.0], result
    faults.clear(str(sim["state"]))
    fault(sim, method="POST", path="/access/ticket", status=503, count=4)
    result, failed = run_module(pve_lxc.main, args(sim, 325, config=CONFIG))
    assert failed and re.fullmatch(
        r"Proxmox API error for CT 325 on node pve: the Proxmox API at https://127\.0\.0\.1:%d answered POST /access/ticket \(the login of root@pam\) with 503 "
        r"Service Unavailable \(tried 4 times over \d+\.\d s\): the node's API is not serving, which says nothing about "
        r"the password; check pveproxy and pvedaemon on the node \(`systemctl status pveproxy pvedaemon`\)"
        % sim["password"]["api_port"], result["msg"]), result["msg"]
    assert sim["password"]["api_password"] not in json.dumps(result)


# -- connection reset ------------------------------------------------------------------------------

def test_a_get_whose_connection_is_reset_is_sent_again(sim, pauses):
    create(sim, 331)
    fault(sim, method="GET", path="/nodes/pve/lxc/331/config", reset="before")
    fault(sim, method="GET", path="/nodes/pve/lxc/331/config", reset="after")
    result, failed = run_module(pve_lxc.main, args(sim, 331, config=dict(CONFIG, cores=3)))
    assert not failed and result["changes"] == [{"key": "cores", "action": "set", "old": "2", "new": "3"}], result
    assert fired(sim) == [1, 1] and pauses == [0.5, 1.0] and "cores: 3\n" in conf(sim, 331)


def test_a_create_whose_answer_is_lost_is_not_sent_again_and_the_message_says_what_to_check(sim, pauses):
    fault(sim, method="POST", path="/nodes/pve/lxc", reset="after")
    result, failed = run_module(pve_lxc.main, args(sim, 332, ostemplate=TEMPLATE, config=CONFIG))
    assert failed
    prefix = ("Proxmox API error for CT 332 on node pve: POST /nodes/pve/lxc (create CT 332): the connection to the "
              "Proxmox API at https://127.0.0.1:%d was dropped before an answer came (" % sim["password"]["api_port"])
    suffix = ("); it may have reached the node, so it was not sent again and its effect is unknown: CT 332 may or may "
              "not exist now: check `pct status 332` on node pve before running again")
    assert result["msg"].startswith(prefix) and result["msg"].endswith(suffix), result["msg"]
    assert "Connection aborted" in result["msg"] and fired(sim) == [1] and pauses == []
    assert not result["created"] and not result["changed"] and result["tasks"] == []
    # It did happen: the container is there once its task ends, and the next run finds it instead of creating another.
    wait_until(lambda: conf(sim, 332) and "lock:" not in conf(sim, 332), what="the end of CT 332's create")
    result, failed = run_module(pve_lxc.main, args(sim, 332, ostemplate=TEMPLATE, config=CONFIG))
    assert not failed and not result["created"] and not result["changed"], result


def test_a_config_change_whose_answer_is_lost_is_not_sent_again(sim, pauses):
    create(sim, 333)
    fault(sim, method="PUT", path="/nodes/pve/lxc/333/config", reset="after")
    result, failed = run_module(pve_lxc.main, args(sim, 333, config=dict(CONFIG, memory=2048)))
    assert failed and result["msg"].startswith(
        "Proxmox API error for CT 333 on node pve: PUT /nodes/pve/lxc/333/config (change the config of CT 333): the "
        "connection to the Proxmox API at https://127.0.0.1:%d was dropped before an answer came (" % sim["password"]["api_port"])
    assert result["msg"].endswith("the config of CT 333 may or may not have changed: check `pct config 333` on node pve "
                                  "before running again"), result["msg"]
    assert fired(sim) == [1] and pauses == [] and "memory: 2048\n" in conf(sim, 333)


# -- tasks that never finish, or whose status cannot be read --------------------------------------------

def test_a_start_task_that_never_finishes_fails_at_its_deadline_and_is_not_reported_done(sim, pauses):
    create(sim, 341)
    fault(sim, task="vzstart", vmid=341, hang=True, log=["starting CT 341", "lxc-start: waiting for the container's init"])
    started = time.monotonic()
    result, failed = run_module(pve_lxc.main, args(sim, 341, state="started", task_timeout=1))
    elapsed = time.monotonic() - started
    assert failed and 1.0 <= elapsed < 10, elapsed
    upid = UPID % ("vzstart", 341)
    assert re.fullmatch(
        r"starting CT 341 did not finish within 1 s: task vzstart on node pve \((?P<upid>%s)\) is still running; it is "
        r"not counted as done and may yet succeed or fail: `pvenode task status (?P=upid)` on node pve says how it "
        r"ended; last log lines: starting CT 341 \| lxc-start: waiting for the container's init" % upid,
        result["msg"]), result["msg"]
    assert result["task_exitstatus"] is None
    assert result["task_log_tail"] == ["starting CT 341", "lxc-start: waiting for the container's init"]
    assert result["power"] is None and result["status"] is None and not result["changed"]
    assert fired(sim) == [1] and pauses == []


def test_a_task_status_answered_503_is_read_again(sim, pauses):
    create(sim, 342)
    fault(sim, method="GET", path=r"/nodes/pve/tasks/[^/]+/status", status=503, count=2)
    result, failed = run_module(pve_lxc.main, args(sim, 342, state="started"))
    assert not failed and result["power"] == "started" and [task["exitstatus"] for task in result["tasks"]] == ["OK"]
    assert fired(sim) == [2] and pauses == [0.5, 1.0]


def test_a_task_whose_status_cannot_be_read_is_not_reported_done(sim, pauses):
    create(sim, 343)
    fault(sim, task="vzstart", vmid=343, hang=True, log=["starting CT 343"])
    fault(sim, method="GET", path=r"/nodes/pve/tasks/[^/]+/status", reset="before", count=4)
    result, failed = run_module(pve_lxc.main, args(sim, 343, state="started"))
    assert failed
    upid = UPID % ("vzstart", 343)
    assert re.fullmatch(
        r"starting CT 343: the status of task vzstart on node pve \((?P<upid>%s)\) could not be read: GET "
        r"/nodes/pve/tasks/(?P=upid)/status: the connection to the Proxmox API was dropped before an answer came "
        r"\(.*Connection aborted.*\) \(tried 4 times over \d+\.\d s\); it is not counted as done: it may still be "
        r"running, or have succeeded or failed: `pvenode task status (?P=upid)` on node pve says how it ended; last "
        r"log lines: starting CT 343" % upid, result["msg"]), result["msg"]
    assert result["task_exitstatus"] is None and result["task_log_tail"] == ["starting CT 343"]
    assert result["power"] is None and not result["changed"]
    assert fired(sim) == [1, 4] and pauses == [0.5, 1.0, 2.0]
