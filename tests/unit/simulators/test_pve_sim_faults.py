# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE simulator's fault switches (pve_sim.faults, ``pve-sim fault``): each does what it says, against
requests and proxmoxer on 127.0.0.1, --no-lxc. Every wait is for a state, bounded."""
from __future__ import annotations

import json
import os
import sys

import pytest

requests = pytest.importorskip("requests")
pytest.importorskip("proxmoxer")

from ansible_collections.llmops.serving.tests.support.waiting import wait_until  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.tests.unit.simulators.test_pve_sim_api import (  # noqa: E402  pylint: disable=wrong-import-position
    SIM_SOURCE, TEMPLATE, Sim, create_ct, wait_task,
)

# The real path: imported through collections/ (a symlink), SIM_SOURCE names the same directory by another path, and
# pve_sim must be one module whichever test imports it first.
if os.path.realpath(SIM_SOURCE) not in sys.path:
    sys.path.insert(0, os.path.realpath(SIM_SOURCE))

from pve_sim import cli, faults  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    running = Sim(tmp_path_factory.mktemp("pve-sim-faults"))
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def no_rules_left(sim):
    faults.clear(sim.state_dir)
    yield
    faults.clear(sim.state_dir)


def token_headers(sim):
    return {"Authorization": "PVEAPIToken=root@pam!ansible=%s" % sim.token_secret()}


def get(sim, path):
    return requests.get(sim.base + path, headers=token_headers(sim), verify=sim.cert, timeout=10)


def post(sim, path, data):
    return requests.post(sim.base + path, data=data, headers=token_headers(sim), verify=sim.cert, timeout=10)


def create_data(vmid):
    return {"vmid": vmid, "ostemplate": "local:vztmpl/" + TEMPLATE, "hostname": "ct%d" % vmid}


def fired(sim):
    return [rule["fired"] for rule in faults.rules(sim.state_dir)]


def config_exists(sim, vmid):
    return os.path.exists(os.path.join(sim.state_dir, "etc", "pve", "lxc", "%d.conf" % vmid))


def test_a_status_rule_answers_the_next_n_matching_requests_with_pves_error_and_then_lets_them_through(sim):
    faults.add(sim.state_dir, {"method": "GET", "path": "/version", "status": 503, "count": 2})
    for _attempt in range(2):
        response = get(sim, "/version")
        assert (response.status_code, response.reason) == (503, "Service Unavailable")
        assert response.json() == {"data": None, "message": "Service Unavailable\n"}
    assert get(sim, "/version").json()["data"]["release"] == "9.1"
    assert fired(sim) == [2]
    # Another method or path is not touched by it.
    faults.add(sim.state_dir, {"method": "POST", "path": "/version", "status": 500, "message": "not for GET"})
    assert get(sim, "/version").status_code == 200 and fired(sim) == [2, 0]


def test_a_595_rule_is_pveproxys_refused_connection_to_pvedaemon_no_body_and_nothing_done(sim):
    faults.add(sim.state_dir, {"method": "POST", "path": "/nodes/pve/lxc", "status": 595})
    response = post(sim, "/nodes/pve/lxc", create_data(410))
    assert (response.status_code, response.reason, response.content) == (595, "Connection refused", b"")
    assert not config_exists(sim, 410) and fired(sim) == [1]
    # The message is the status line, as PVE's own errors (a regular expression matches the whole path).
    faults.add(sim.state_dir, {"path": r"/nodes/pve/lxc/\d+/config", "status": 502, "message": "Bad Gateway (upstream)"})
    response = get(sim, "/nodes/pve/lxc/410/config")
    assert (response.status_code, response.reason) == (502, "Bad Gateway (upstream)")
    assert response.json()["message"] == "Bad Gateway (upstream)\n"


def test_reset_before_drops_the_connection_without_an_answer_and_does_nothing(sim):
    faults.add(sim.state_dir, {"method": "POST", "path": "/nodes/pve/lxc", "reset": "before"})
    with pytest.raises(requests.exceptions.ConnectionError) as caught:
        post(sim, "/nodes/pve/lxc", create_data(411))
    assert "Connection aborted" in str(caught.value)
    assert fired(sim) == [1]
    response = get(sim, "/nodes/pve/lxc/411/config")
    assert (response.status_code, response.reason) == (500, "Configuration file 'nodes/pve/lxc/411.conf' does not exist")


def test_reset_after_does_the_request_and_drops_the_answer(sim):
    faults.add(sim.state_dir, {"method": "POST", "path": "/nodes/pve/lxc", "reset": "after"})
    with pytest.raises(requests.exceptions.ConnectionError):
        post(sim, "/nodes/pve/lxc", create_data(412))
    assert fired(sim) == [1]
    # The create ran: its task ends and the container is there, without the create lock.
    config = wait_until(lambda: (get(sim, "/nodes/pve/lxc/412/config").json() or {}).get("data"), timeout=20, what="CT 412's config")
    wait_until(lambda: "lock" not in get(sim, "/nodes/pve/lxc/412/config").json()["data"], timeout=20, what="the end of CT 412's create")
    assert config["hostname"] == "ct412"


def test_a_hang_rule_keeps_the_next_task_of_that_kind_running_without_doing_its_work(sim):
    api = sim.api()
    create_ct(api, 413)
    create_ct(api, 414)
    faults.add(sim.state_dir, {"task": "vzstart", "vmid": 413, "hang": True, "log": ["starting CT 413", "waiting for lxc-start"]})
    hung = api.nodes("pve").lxc(413).status.start.post()
    # Another container's start is not this rule's: it runs and ends while the hung one stays running.
    assert wait_task(api, api.nodes("pve").lxc(414).status.start.post())["exitstatus"] == "OK"
    status = api.nodes("pve").tasks(hung).status.get()
    assert status["status"] == "running" and "exitstatus" not in status and status["type"] == "vzstart"
    assert [line["t"] for line in api.nodes("pve").tasks(hung).log.get()] == ["starting CT 413", "waiting for lxc-start"]
    assert api.nodes("pve").lxc(413).status.current.get()["status"] == "stopped"
    assert fired(sim) == [1]
    # The rule is spent: the next start of that container runs.
    assert wait_task(api, api.nodes("pve").lxc(413).status.start.post())["exitstatus"] == "OK"
    assert api.nodes("pve").tasks(hung).status.get()["status"] == "running"


def test_the_fault_command_adds_lists_and_clears_rules_and_refuses_a_bad_one(sim, capsys):
    assert cli.main(["fault", "add", "--state-dir", sim.state_dir, "--path", "/version", "--status", "504", "--count", "2"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added == {"count": 2, "fired": 0, "id": 1, "message": "Gateway Timeout", "path": "/version", "status": 504}
    assert get(sim, "/version").status_code == 504
    assert cli.main(["fault", "list", "--state-dir", sim.state_dir]) == 0
    assert json.loads(capsys.readouterr().out) == [dict(added, fired=1)]
    assert cli.main(["fault", "clear", "--state-dir", sim.state_dir]) == 0
    assert get(sim, "/version").status_code == 200 and faults.rules(sim.state_dir) == []
    assert cli.main(["fault", "add", "--state-dir", sim.state_dir, "--path", "/version", "--status", "404"]) == 2
    assert "status must be 500-599, got 404" in capsys.readouterr().err
    assert cli.main(["fault", "add", "--state-dir", sim.state_dir, "--task", "vzstart"]) == 2
    assert "a task rule needs hang: true" in capsys.readouterr().err
    assert faults.rules(sim.state_dir) == []
