"""pve_task: UPIDs and the wait that fails at once when a task stops with an error."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.pve_task import (
    TaskError,
    parse_upid,
    task_succeeded,
    wait_for_task,
)

# A UPID in the format of pve-common PVE::Tools::upid_encode ("UPID:$node:%08X:%08X:%08X:$type:$id:$user:"),
# built by hand for this test (not captured from a node): a vzcreate of CT 120 by root@pam on node pve1.
UPID = "UPID:pve1:0001E240:0A1B2C3D:6761A5F0:vzcreate:120:root@pam:"


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class FakeTask:
    """Answers status polls from a script; the log is PVE's [{n, t}] list."""

    def __init__(self, statuses, log_lines):
        self.statuses = list(statuses)
        self.polls = 0
        self.log = [{"n": n + 1, "t": text} for n, text in enumerate(log_lines)]
        self.log_calls = []

    def status(self):
        self.polls += 1
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def get_log(self, start, limit):
        self.log_calls.append((start, limit))
        return self.log[start:start + limit]


def test_parse_upid_reads_the_fields():
    fields = parse_upid(UPID)
    assert fields == {"node": "pve1", "pid": 0x1E240, "pstart": 0x0A1B2C3D, "starttime": 0x6761A5F0, "type": "vzcreate", "id": "120",
                      "user": "root@pam"}
    assert parse_upid("UPID:pve:000A1B2C:123456789:6761A5F0:vzstart:101:root@pam!ansible:")["user"] == "root@pam!ansible"


@pytest.mark.parametrize("bad", ["", "UPID:pve1:1E240:0A1B2C3D:6761A5F0:vzcreate:120:root@pam:", UPID[:-1], "TASK:" + UPID[5:], None, 42])
def test_parse_upid_rejects_what_is_not_a_upid(bad):
    with pytest.raises(ValueError):
        parse_upid(bad)


@pytest.mark.parametrize("status,ok", [("OK", True), ("WARNINGS: 2", True), ("unable to create CT 120 - no such template", False),
                                       ("", False), (None, False), ("job errors", False)])
def test_task_succeeded_follows_pve(status, ok):
    assert task_succeeded(status) is ok


def test_a_failed_task_fails_at_the_first_poll_that_sees_it_stopped():
    clock = FakeClock()
    lines = ["extracting archive '/var/lib/vz/template/cache/broken.tar.zst'"] + ["line %d" % n for n in range(12)] + [
        "TASK ERROR: unable to create CT 120 - command 'tar xpf' failed: exit code 2"]
    task = FakeTask([{"status": "running"}, {"status": "running"},
                     {"status": "stopped", "exitstatus": "unable to create CT 120 - command 'tar xpf' failed: exit code 2"}], lines)
    with pytest.raises(TaskError) as caught:
        wait_for_task(task.status, task.get_log, UPID, 300, "creating CT 120", clock=clock.clock, sleep=clock.sleep)
    error = caught.value
    assert task.polls == 3
    assert clock.now - 1000.0 < 1.0  # two short polls, not the 300 s timeout
    assert error.exitstatus == "unable to create CT 120 - command 'tar xpf' failed: exit code 2"
    assert error.log_tail == lines[-10:]
    assert str(error).startswith("creating CT 120 failed: unable to create CT 120 - command 'tar xpf' failed: exit code 2 (task %s)" % UPID)
    assert str(error).endswith("| TASK ERROR: unable to create CT 120 - command 'tar xpf' failed: exit code 2")


def test_success_and_warnings_return_the_status():
    clock = FakeClock()
    task = FakeTask([{"status": "running"}, {"status": "stopped", "exitstatus": "WARNINGS: 1"}], ["TASK WARNINGS: 1"])
    assert wait_for_task(task.status, task.get_log, UPID, 60, clock=clock.clock, sleep=clock.sleep)["exitstatus"] == "WARNINGS: 1"
    assert task.log_calls == []


def test_a_running_task_times_out_with_the_bound_and_the_log_so_far():
    clock = FakeClock()
    task = FakeTask([{"status": "running"}], ["starting CT 120"])
    with pytest.raises(TaskError) as caught:
        wait_for_task(task.status, task.get_log, UPID, 5, "starting CT 120", clock=clock.clock, sleep=clock.sleep)
    assert caught.value.exitstatus is None
    assert str(caught.value) == (
        "starting CT 120 did not finish within 5 s: task vzcreate on node pve1 (%s) is still running; it is not counted "
        "as done and may yet succeed or fail: `pvenode task status %s` on node pve1 says how it ended; last log lines: "
        "starting CT 120" % (UPID, UPID))
    assert 5.0 <= clock.now - 1000.0 < 5.01
    assert max(clock.sleeps) <= 1.0 and clock.sleeps[0] == pytest.approx(0.2)


def test_wait_refuses_a_non_upid_before_polling():
    task = FakeTask([{"status": "stopped", "exitstatus": "OK"}], [])
    with pytest.raises(ValueError):
        wait_for_task(task.status, task.get_log, None, 5)
    assert task.polls == 0
