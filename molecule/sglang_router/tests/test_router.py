"""The real router (smg 1.13.0, the role's default) under systemd in front of two SGLang simulators: its unit, account, secrets, log per
start and deployment record; its worker list against the inventory; and what a failing worker, an extra worker and a
second router started by hand look like to the role's checks."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.llmops.serving.tests.support.ansible_run import call_module, rerun_converge
from ansible_collections.llmops.serving.tests.support.waiting import wait_until

UNIT = "sglang-router.service"
PORT = 30080
URL = f"http://127.0.0.1:{PORT}"
KEY = "molecule-router-key"
WORKERS = ["http://127.0.0.1:31000", "http://127.0.0.1:31001"]
LOG_DIR = "/var/log/llmops-serving/router"
RECORD = "/var/lib/llmops-serving/router/deployment.json"
SECRETS = "/etc/llmops-serving/router/router-secrets.json"
# The role's default release of its default package, smg.
VERSION = "1.13.0"


def props(host):
    out = host.check_output(f"systemctl show -p MainPID -p InvocationID -p ActiveState {UNIT}")
    return dict(line.split("=", 1) for line in out.splitlines())


def workers(host, key=KEY):
    out = host.check_output(f"curl -s -H 'Authorization: Bearer {key}' {URL}/workers")
    return json.loads(out)["workers"]


def check_workers(host, expected=tuple(WORKERS)):
    return call_module(host, "llmops.serving.sglang_router_workers", url=URL, api_key_file=SECRETS, workers=list(expected),
                       timeout=10)


def test_the_router_runs_as_an_unprivileged_account_under_a_hardened_unit(host):
    user = host.user("sglang-router")
    assert user.exists and user.uid < 1000 and user.shell == "/usr/sbin/nologin"
    service = host.service(UNIT)
    assert service.is_enabled and service.is_running
    unit = service.systemd_properties
    assert unit["User"] == "sglang-router"
    assert unit["KillMode"] == "control-group"
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateDevices": "yes",
                       "MemoryDenyWriteExecute": "yes", "RestrictSUIDSGID": "yes", "PrivateTmp": "yes"}.items():
        assert unit[key] == value, key
    assert host.check_output(f"systemctl show -p CapabilityBoundingSet --value {UNIT}").strip() == ""


def test_the_process_is_the_real_router_from_its_virtualenv(host):
    pid = props(host)["MainPID"]
    # The router renames itself; its executable is the virtualenv's python and the wheel's Rust extension is mapped.
    assert host.file(f"/proc/{pid}/comm").content_string.strip() == "smg::router"
    maps = host.file(f"/proc/{pid}/maps").content_string
    assert "smg/smg_rs.abi3.so" in maps
    assert f"/opt/sglang-router/envs/{VERSION}-" in maps
    version = host.check_output(
        f"/opt/sglang-router/envs/{VERSION}-*/bin/python -c \"import importlib.metadata as m; print(m.version('smg'))\"")
    assert version.strip() == VERSION
    # The predecessor is not in the same environment (each installs a bin/smg).
    assert host.run(f"/opt/sglang-router/envs/{VERSION}-*/bin/python -c 'import sglang_router'").rc != 0


def test_the_api_key_is_only_in_its_root_only_file(host):
    secrets = host.file(SECRETS)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
    assert json.loads(secrets.content_string) == {"api-key": KEY}
    pid = props(host)["MainPID"]
    assert KEY not in host.file(f"/proc/{pid}/cmdline").content_string
    assert KEY not in host.check_output(f"cat /proc/{pid}/environ | tr '\\0' '\\n'")
    assert KEY not in host.file(f"/etc/systemd/system/{UNIT}").content_string
    assert KEY not in host.check_output(f"systemctl show {UNIT}")
    # The key guards the router: no key, no worker list; /readiness stays open for probes.
    assert host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' {URL}/workers") == "401"
    assert host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' {URL}/readiness") == "200"


def test_each_start_writes_a_new_log_that_names_its_deployment(host):
    record = json.loads(host.file(RECORD).content_string)
    invocation = props(host)["InvocationID"]
    current = host.file(f"{LOG_DIR}/current.log")
    assert current.is_symlink
    header = current.content_string.splitlines()[0]
    assert f"deployment_id={record['deployment_id']}" in header and f"invocation_id={invocation}" in header
    # The router colours its lines even in a file (smg 1.13.0 and sglang-router 0.3.2 ignore NO_COLOR); the header is plain.
    assert "\x1b[" not in header
    plain = re.sub(r"\x1b\[[0-9;]*m", "", current.content_string)
    assert "Starting router on 0.0.0.0:30080" in plain


def test_the_worker_list_is_the_inventorys_and_every_worker_is_healthy(host):
    listed = workers(host)
    assert sorted(worker["url"] for worker in listed) == WORKERS
    assert all(worker["is_healthy"] for worker in listed)
    result, failed = check_workers(host)
    assert not failed, result
    assert (result["missing"], result["unexpected"], result["unhealthy"]) == ([], [], [])


def served_generate_requests(host, port):
    """POST /generate lines in a worker's journal (its own warmup request at start is one of them)."""
    return int(host.check_output(f"journalctl -u sim-worker@{port}.service --no-pager | grep -c 'POST /generate' || true"))


def test_the_router_spreads_requests_over_both_workers(host):
    before = [served_generate_requests(host, port) for port in (31000, 31001)]
    for _request in range(6):
        out = host.check_output(
            f"curl -s -H 'Authorization: Bearer {KEY}' -H 'Content-Type: application/json' {URL}/generate "
            "-d '{\"text\": \"hello\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
        assert "meta_info" in out, out

    def served():
        return [served_generate_requests(host, port) - count for port, count in zip((31000, 31001), before)]
    # journald may write a worker's last line a moment after the answer: wait until all six are there.
    wait_until(lambda: sum(served()) == 6, 30, "the workers' journals to show the six requests")
    # Round robin (the scenario's policy): three each.
    assert served() == [3, 3]


def test_a_stopped_worker_is_named_unhealthy_and_the_router_keeps_serving(host):
    host.run("systemctl stop sim-worker@31001.service")
    try:
        wait_until(lambda: any(w["url"].endswith(":31001") and not w["is_healthy"] for w in workers(host)), 30,
                   "the router to mark the stopped worker unhealthy")
        result, failed = check_workers(host)
        assert failed and result["unhealthy"] == ["http://127.0.0.1:31001"], result
        assert "http://127.0.0.1:31001" in result["msg"]
        out = host.check_output(
            f"curl -s -H 'Authorization: Bearer {KEY}' -H 'Content-Type: application/json' {URL}/generate "
            "-d '{\"text\": \"hello\", \"sampling_params\": {\"max_new_tokens\": 4}}'")
        assert "meta_info" in out, out
    finally:
        host.run("systemctl start sim-worker@31001.service")
    wait_until(lambda: all(w["is_healthy"] for w in workers(host)), 60, "the restarted worker to be healthy again")


def test_a_worker_added_by_hand_is_named_unexpected(host):
    host.run("systemctl start sim-worker@31002.service")
    try:
        wait_until(lambda: host.run("curl -sf http://127.0.0.1:31002/health").rc == 0, 60, "the third worker")
        added, failed = call_module(host, "llmops.serving.sglang_router_workers", url=URL, api_key_file=SECRETS,
                                    workers=["http://127.0.0.1:31002"], state="present", timeout=30)
        assert not failed and added["changed"] and added["added"] == ["http://127.0.0.1:31002"], added
        result, failed = check_workers(host)
        assert failed and result["unexpected"] == ["http://127.0.0.1:31002"], result
        removed, failed = call_module(host, "llmops.serving.sglang_router_workers", url=URL, api_key_file=SECRETS,
                                      workers=["http://127.0.0.1:31002"], state="absent", timeout=30)
        assert not failed and removed["changed"], removed
        assert sorted(w["url"] for w in workers(host)) == WORKERS
    finally:
        host.run("systemctl stop sim-worker@31002.service")


def test_a_second_router_started_by_hand_fails_and_provenance_names_the_units_process(host):
    before = props(host)
    venv = host.check_output(f"ls -d /opt/sglang-router/envs/{VERSION}-*").strip()
    # The incident's move: start another by hand over SSH. It cannot bind the ports and exits; the unit's router serves.
    run = host.run(f"timeout 60 {venv}/bin/python -m smg.launch_router --host 0.0.0.0 --port {PORT} "
                   f"--worker-urls {WORKERS[0]} --prometheus-port 29000")
    assert run.rc != 0
    assert "Address already in use" in run.stdout + run.stderr
    result, failed = call_module(host, "llmops.serving.service_provenance", name=UNIT, port=PORT, gpu_devices=[],
                                 deployment_id=json.loads(host.file(RECORD).content_string)["deployment_id"])
    assert not failed, result
    assert props(host) == before


def test_a_rerun_changes_nothing_and_a_policy_change_restarts_into_a_new_log(host):
    before = props(host)
    record = json.loads(host.file(RECORD).content_string)
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == []
    assert props(host) == before
    run = rerun_converge({"sglang_router_policy": "random"})
    assert run.rc == 0, run.summary()
    after = props(host)
    assert after["InvocationID"] != before["InvocationID"]
    new_record = json.loads(host.file(RECORD).content_string)
    assert new_record["deployment_id"] != record["deployment_id"]
    assert new_record["previous_deployment_id"] == record["deployment_id"]
    header = host.file(f"{LOG_DIR}/current.log").content_string.splitlines()[0]
    assert f"invocation_id={after['InvocationID']}" in header
    assert "--policy random" in host.file(f"/etc/systemd/system/{UNIT}").content_string
    # Back to the inventory's policy for the scenario's idempotence.
    run = rerun_converge()
    assert run.rc == 0, run.summary()


@pytest.mark.parametrize("workers_value, culprit", [
    (["http://127.0.0.1:31000\nExecStartPre=/bin/sh -c id"], "sglang_router_workers[0]"),
    (["http://127.0.0.1:31000/v1"], "sglang_router_workers[0]"),
    (["http://127.0.0.1:31000", "http://127.0.0.1:31000"], "no worker twice"),
])
def test_a_hostile_worker_list_is_refused_before_anything_changes(host, workers_value, culprit):
    unit_before = host.file(f"/etc/systemd/system/{UNIT}").content_string
    before = props(host)
    run = rerun_converge({"sglang_router_workers": workers_value})
    assert run.rc != 0
    assert culprit in "\n".join(run.failures()), run.summary()
    assert host.file(f"/etc/systemd/system/{UNIT}").content_string == unit_before
    assert props(host) == before
