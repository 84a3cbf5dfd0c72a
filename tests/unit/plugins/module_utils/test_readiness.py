from __future__ import annotations

import datetime
import os

from ansible_collections.llmops.serving.plugins.module_utils import readiness
from ansible_collections.llmops.serving.plugins.module_utils import service_files
from ansible_collections.llmops.serving.tests.unit.fakes import within

LOG_NAME = "20261129T100000Z-%s.log" % ("ab" * 16)

HEADER = "# llmops-serving instance=q deployment_id=d invocation_id=abc pid=7 started_at=2026-11-29T10:00:00Z unit=sglang-q.service\n"


def unit(active="active", sub="running", invocation="abc", result="success"):
    return {"name": "sglang-q.service", "active_state": active, "sub_state": sub, "invocation_id": invocation, "result": result}


def test_unit_verdicts():
    assert readiness.unit_verdict(unit())[0] == readiness.WAITING
    assert readiness.unit_verdict(unit("activating", "start"))[0] == readiness.WAITING
    state, message = readiness.unit_verdict(unit("failed", "failed", result="exit-code"))
    assert state == readiness.FAILED and "exited before it became ready" in message and "exit-code" in message
    assert readiness.unit_verdict(unit("activating", "auto-restart"))[0] == readiness.FAILED
    state, message = readiness.unit_verdict(unit(invocation="old"), previous_invocation_id="old")
    assert state == readiness.WAITING and "from before the restart" in message


def watch_of(path, offset, **options):
    return readiness.LogWatch(service_files.open_log(str(path)), offset, **options)


def test_log_watch_reads_only_complete_new_lines(tmp_path):
    log = tmp_path / LOG_NAME
    log.write_text(HEADER + "[2026-11-29 10:00:01] server_args={}\n[2026-11-29 10:00:02] The server is fired")
    watch = watch_of(log, len(HEADER), invocation_id="abc")
    watch.read_new()
    assert list(watch.last_lines) == ["[2026-11-29 10:00:01] server_args={}"]
    assert watch.ready_line is None, "a half-written line is not read yet"
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(" up and ready to roll!\n")
    watch.read_new()
    assert watch.ready_line == "[2026-11-29 10:00:02] The server is fired up and ready to roll!"
    assert len(watch.last_lines) == 2


def test_log_watch_records_the_first_fatal_startup_error(tmp_path):
    # The hybrid-cache OOM message as given in shared/reference/sglang.md (not a captured log line).
    oom = ("[2026-11-29 10:00:03 TP0] Not enough GPU memory for hybrid (mamba/linear-attention) state cache ... Try: "
           "(1) reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens")
    log = tmp_path / LOG_NAME
    log.write_text(HEADER + "[2026-11-29 10:00:01] Traceback (most recent call last):\n" + oom + "\n")
    watch = watch_of(log, len(HEADER), keep_lines=1)
    watch.read_new()
    assert watch.fatal == ("oom_hybrid", oom)
    assert list(watch.last_lines) == [oom]


def test_log_watch_keeps_reading_the_file_it_opened_whatever_the_directory_shows_later(tmp_path):
    # Once open, the watch reads that inode: the service user renaming a FIFO over the name changes nothing.
    log = tmp_path / LOG_NAME
    log.write_text(HEADER)
    watch = watch_of(log, len(HEADER))
    log.rename(tmp_path / "moved-away")
    os.mkfifo(str(log))
    with open(tmp_path / "moved-away", "a", encoding="utf-8") as handle:
        handle.write("[2026-11-29 10:00:02] The server is fired up and ready to roll!\n")
    with within(5):
        watch.read_new()
    assert watch.ready_line == "[2026-11-29 10:00:02] The server is fired up and ready to roll!"
    watch.close()


def test_log_watch_masks_secrets_in_the_lines_it_keeps(tmp_path):
    line = "[2026-11-29 10:00:01] server_args={'model_path': '/models/q', 'api_key': 'sk-5e4d3c2b1a', 'port': 30000}"
    log = tmp_path / LOG_NAME
    log.write_text(HEADER + line + "\n")
    watch = watch_of(log, len(HEADER))
    watch.read_new()
    assert list(watch.last_lines) == [line.replace("sk-5e4d3c2b1a", "********")]


def test_line_epoch_reads_seconds_and_milliseconds_as_local_time():
    expected = datetime.datetime(2026, 11, 29, 10, 0, 2).timestamp()
    assert readiness.line_epoch("[2026-11-29 10:00:02] The server is fired up and ready to roll!") == expected
    assert readiness.line_epoch("[2026-11-29 10:00:02.250 TP0] x") == expected + 0.25
    assert readiness.line_epoch("no prefix") is None


def test_describe_port_holders_names_each_process_or_nothing():
    assert readiness.describe_port_holders([], 30000) == ""
    text = readiness.describe_port_holders([{"pid": 4242, "cmdline": "python3 -m sglang.launch_server --port 30000",
                                             "comm": "python3", "started_at": "2026-11-29T19:40:02Z"}], 30000)
    assert "port 30000 is held by PID 4242 (python3 -m sglang.launch_server --port 30000, started 2026-11-29T19:40:02Z)" in text
    assert "outside the unit" in text
