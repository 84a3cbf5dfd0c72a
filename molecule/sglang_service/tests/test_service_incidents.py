"""The incident's failure modes, each reproduced on the real systemd unit and caught by a provenance module.

Every case leaves the unit running on a fresh invocation for the next one, and no case may lose a log file.
They run in file order (pytest keeps definition order), after the happy-path checks in test_service.py.
"""

from __future__ import annotations

import re

import pytest

from sglang_checks import (
    CURRENT_LOG,
    LOG_DIR,
    PORT,
    RECORD,
    SERVED_MODEL,
    UNIT,
    deployment_id,
    rerun_role,
    start_stray,
    stop_pid,
    unit_properties,
    wait_ready,
    wait_until,
)

from ansible_collections.llmops.serving.tests.support.ansible_run import call_module, rerun_converge, short_name

SERVICE = "llmops.serving.service_provenance"
LOG = "llmops.serving.log_provenance"

# Files a case deletes on purpose, as the incident's operator did (`rm -f log`).
DELETED_ON_PURPOSE = set()


@pytest.fixture(autouse=True)
def every_log_survives(host):
    """No case may delete or truncate an earlier log file."""
    wait_ready(host)
    before = {path: int(size) for path, size in (
        line.split() for line in host.check_output(f"stat -c '%n %s' {LOG_DIR}/*.log").splitlines())}
    yield
    after = {path: int(size) for path, size in (
        line.split() for line in host.check_output(f"stat -c '%n %s' {LOG_DIR}/*.log").splitlines())}
    for path, size in before.items():
        if path in DELETED_ON_PURPOSE:
            continue
        assert path in after, f"{path} was lost"
        assert after[path] >= size, f"{path} was truncated"


def restart_unit(host):
    host.check_output(f"systemctl restart {UNIT}")
    return wait_ready(host)


def test_happy_path_both_modules_prove_the_deployment(host):
    props = wait_ready(host)
    result, failed = call_module(host, SERVICE, name=UNIT, port=PORT, deployment_id=deployment_id(host))
    assert not failed, result.get("msg")
    assert result["changed"] is False
    assert result["listener"]["pid"] == int(props["MainPID"]) or result["listener"]["in_unit"]
    assert result["deployment_id"] == deployment_id(host)
    assert result["strays"] == []
    log, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG, deployment_id=deployment_id(host))
    assert not failed, log.get("msg")
    assert log["header"]["invocation_id"] == props["InvocationID"]
    assert log["header"]["pid"] in (props["MainPID"], int(props["MainPID"]))
    first_line = host.file(log["path"]).content_string.splitlines()[0]
    assert log["offset"] == len(first_line.encode()) + 1
    assert re.match(r"\d{4}-\d\d-\d\d", log["last_timestamp"])


def test_stray_server_on_the_port_after_the_unit_was_stopped_is_named(host):
    host.check_output(f"systemctl stop {UNIT}")
    stray = start_stray(host)
    try:
        result, failed = call_module(host, SERVICE, name=UNIT, port=PORT, deployment_id=deployment_id(host))
        assert failed
        assert "not running" in result["msg"]
        assert str(stray) in result["msg"], result["msg"]
        assert "nohup" in result["msg"] or "outside" in result["msg"]
    finally:
        stop_pid(host, stray)
        host.check_output(f"systemctl start {UNIT}")


def test_failed_launch_while_an_old_server_still_answers(host):
    """The incident: the relaunch fails (a flag SGLang 0.5.23 removed), the old process keeps serving."""
    host.check_output(f"systemctl stop {UNIT}")
    old = start_stray(host)
    try:
        rerun_role({"sglang_service_extra_args": ["--cuda-graph-max-bs", "8"]})
        wait_until(lambda: "ambiguous option" in host.run(f"cat {CURRENT_LOG}").stdout, 30,
                   "the failed launch's argparse error in its own log")
        # Restart=on-failure launches it again (RestartSec=) until the start limit: asked while a new launch has
        # just begun, its log is a fresh start's. Asked once systemd gave up, the answer holds still.
        wait_until(lambda: unit_properties(host)["ActiveState"] == "failed", 180,
                   "systemd to give up the failing launch at its start limit")
        result, failed = call_module(host, SERVICE, name=UNIT, port=PORT, deployment_id=deployment_id(host))
        assert failed
        assert str(old) in result["msg"], result["msg"]
        log, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG)
        assert failed
        assert "ambiguous option" in log["msg"] or "not running" in log["msg"] or "no main process" in log["msg"], log["msg"]
    finally:
        stop_pid(host, old)
        rerun_role({})
    wait_ready(host)


def test_log_deleted_and_recreated_while_the_server_writes_the_old_inode(host):
    props = wait_ready(host)
    real = host.file(CURRENT_LOG).linked_to
    DELETED_ON_PURPOSE.add(real)
    host.check_output(f"rm -f {real} && touch {real}")
    try:
        result, failed = call_module(host, LOG, name=UNIT, path=real)
        assert failed
        assert "deleted" in result["msg"], result["msg"]
        assert props["MainPID"] in result["msg"]
        via_symlink, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG)
        assert failed and "deleted" in via_symlink["msg"], via_symlink["msg"]
    finally:
        # The empty file is the operator's, not the unit's; a restart gives the server a new log.
        host.check_output(f"rm -f {real}")
        restart_unit(host)


def test_an_old_log_file_is_not_mistaken_for_the_current_one(host):
    wait_ready(host)
    old = host.file(CURRENT_LOG).linked_to
    restart_unit(host)
    current = host.file(CURRENT_LOG).linked_to
    assert old != current
    result, failed = call_module(host, LOG, name=UNIT, path=old)
    assert failed
    assert current in result["msg"], result["msg"]


def test_a_restart_that_did_not_happen_is_caught(host):
    props = wait_ready(host)
    # Someone "restarted" with a command that did nothing; the invocation is still the one from before.
    result, failed = call_module(host, SERVICE, name=UNIT, port=PORT, previous_invocation_id=props["InvocationID"])
    assert failed
    assert props["InvocationID"] in result["msg"]
    assert "restart" in result["msg"].lower()
    after = restart_unit(host)
    result, failed = call_module(host, SERVICE, name=UNIT, port=PORT, previous_invocation_id=props["InvocationID"])
    assert not failed, result.get("msg")
    assert result["unit"]["invocation_id"] == after["InvocationID"]


def test_a_gpu_node_held_outside_the_unit_is_named(host):
    # A character node named like an NVIDIA GPU. It reuses the tun device number (10:200), which the
    # container's device cgroup lets a process open, so a stray can hold it the way a leftover CUDA process would.
    host.check_output("mknod -m 0666 /dev/nvidia7 c 10 200")
    host.run("nohup python3 -c 'import os, time; fd = os.open(\"/dev/nvidia7\", os.O_RDWR); time.sleep(300)' "
             ">/dev/null 2>&1 & echo $! > /run/gpu-holder.pid")
    holder = int(host.file("/run/gpu-holder.pid").content_string.strip())
    try:
        wait_until(lambda: "/dev/nvidia7" in host.run(f"ls -l /proc/{holder}/fd").stdout, 10, "the holder to open the node")
        result, failed = call_module(host, SERVICE, name=UNIT, port=PORT)
        assert failed
        assert str(holder) in result["msg"] and "/dev/nvidia7" in result["msg"], result["msg"]
        allowed, failed = call_module(host, SERVICE, name=UNIT, port=PORT, allow_strays=True)
        assert not failed, allowed.get("msg")
        assert [s["pid"] for s in allowed["strays"]] == [holder]
    finally:
        stop_pid(host, holder)
        host.check_output("rm -f /dev/nvidia7")
    result, failed = call_module(host, SERVICE, name=UNIT, port=PORT)
    assert not failed, result.get("msg")


def test_every_start_left_its_own_log_with_its_own_header(host):
    props = wait_ready(host)
    names = host.check_output(f"ls {LOG_DIR}").split()
    logs = [n for n in names if n.endswith(".log") and n != "current.log"]
    invocations = set()
    for name in logs:
        header = host.file(f"{LOG_DIR}/{name}").content_string.splitlines()
        if not header:
            continue  # the file the deleted-log case re-created by hand is empty and not the unit's
        fields = dict(w.split("=", 1) for w in header[0].split()[2:])
        assert name.endswith(f"-{fields['invocation_id']}.log")
        invocations.add(fields["invocation_id"])
    assert props["InvocationID"] in invocations
    assert len(invocations) >= 6, "each restart in these cases must have written its own log"
    assert unit_properties(host)["ActiveState"] == "active"


@pytest.mark.parametrize("extra_vars, named", [
    # The seed's first try, on a server of the seed's era: SGLang 0.5.9 reserves the draft's intermediate state for
    # every one of the 48 requests before it sizes the state pool, and no pool is left.
    ({"sglang_service_max_running_requests": 48, "sglang_service_mamba_full_memory_ratio": 0.9,
      "sglang_service_memory_plan_arithmetic": "0.5.9"}, "intermediate state for 48 requests"),
    # 16 requests and the model's own context on 0.5.23 start, but the state pool serves a few of the 16 and the KV pool
    # not one request of 262144 tokens: refused by default (serving less is sglang_service_memory_plan_require: start).
    ({"sglang_service_max_running_requests": 16, "sglang_service_context_length": None},
     "of max_running_requests=16"),
], ids=["seed-48-0.9-on-0.5.9", "requested-concurrency"])
def test_a_refused_memory_plan_leaves_the_running_server_untouched(host, extra_vars, named):
    before = wait_ready(host)
    watched = [f"/etc/systemd/system/{UNIT}", RECORD, f"{SERVED_MODEL}/generation_config.json",
               "/etc/llmops-serving/molecule/deployment.env"]
    sums = {path: host.file(path).sha256sum for path in watched}
    current = host.file(CURRENT_LOG).linked_to
    run = rerun_converge(extra_vars)
    assert run.rc != 0, run.summary()
    said = "\n".join(run.failures())
    assert "The memory plan refuses this configuration" in said and named in said and "mamba" in said, said
    after = unit_properties(host)
    assert (after["MainPID"], after["InvocationID"]) == (before["MainPID"], before["InvocationID"])
    assert {path: host.file(path).sha256sum for path in watched} == sums
    assert host.file(CURRENT_LOG).linked_to == current
    wait_ready(host)


def test_a_change_deployed_after_the_start_limit_is_used_up_still_restarts_the_server(host):
    # StartLimitBurst= counts deliberate starts like crash-loop ones: a few deploys and a rollback within
    # StartLimitIntervalSec= used it up, and the next deploy's restart was refused ("Start request repeated too
    # quickly", worded by systemctl as "a fatal signal was delivered to the control process"). Used up by hand here.
    refused = None
    for _start in range(int(host.check_output(f"systemctl show -p StartLimitBurst --value {UNIT}")) + 1):
        restarted = host.run(f"systemctl restart {UNIT}")
        if restarted.rc != 0:
            refused = restarted
            break
        wait_ready(host)
    assert refused is not None, "systemd never refused a start: the test did not use up the limit"
    # systemctl words it as the last stop's result (Result= stays "signal"); the journal says what it was.
    assert "Start request repeated too quickly" in host.check_output(f"journalctl -u {UNIT} -n 20 --no-pager"), refused.stderr
    before = deployment_id(host)
    run = rerun_role({"sglang_service_environment": {"SGLANG_SIM_STARTUP_SECONDS": "1", "LLMOPS_MOLECULE_CHANGE": "start-limit"}})
    assert "Restart the SGLang service" in [short_name(name.rsplit(" on ", 1)[0]) for name in run.changed_tasks()], run.changed_tasks()
    assert deployment_id(host) != before
    wait_ready(host)
    # And back to the scenario's deployment, with a restart of its own.
    rerun_role({})
    assert deployment_id(host) == before
    wait_ready(host)
