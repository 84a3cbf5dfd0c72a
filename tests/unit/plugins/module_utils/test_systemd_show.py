# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemd_show: `systemctl show` parsing, timestamps, cgroup membership."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show
from ansible_collections.llmops.serving.tests.unit.fakes import CONTROL_GROUP, UNIT, FakeSystemctl, show_text

# Verbatim start of `sudo systemctl show systemd-logind` posted in https://github.com/systemd/systemd/issues/16051
# (systemd 245, local zone CEST, a unit that failed: MainPID=0, Result=timeout, NRestarts=5).
LOGIND_SHOW = """Type=dbus
Restart=always
NotifyAccess=main
RestartUSec=0
TimeoutStartUSec=1s
TimeoutStopUSec=1s
TimeoutAbortUSec=1s
RuntimeMaxUSec=infinity
WatchdogUSec=3min
WatchdogTimestampMonotonic=0
RootDirectoryStartOnly=no
RemainAfterExit=no
GuessMainPID=yes
MainPID=0
ControlPID=0
BusName=org.freedesktop.login1
FileDescriptorStoreMax=512
NFileDescriptorStore=0
StatusText=Shutting down...
StatusErrno=0
Result=timeout
ReloadResult=success
CleanResult=success
UID=[not set]
GID=[not set]
NRestarts=5
OOMPolicy=stop
ExecMainStartTimestamp=Wed 2020-06-03 16:53:40 CEST
ExecMainStartTimestampMonotonic=106410037
ExecMainExitTimestamp=Wed 2020-06-03 16:53:41 CEST
ExecMainExitTimestampMonotonic=107661600
ExecMainPID=1912
ExecMainCode=1
ExecMainStatus=0
ExecStart={ path=/usr/lib/systemd/systemd-logind ; argv[]=/usr/lib/systemd/systemd-logind ; ignore_errors=no ; \
start_time=[Wed 2020-06-03 16:53:40 CEST] ; stop_time=[Wed 2020-06-03 16:53:41 CEST] ; pid=1912 ; code=exited ; status=0 }
Slice=system.slice
"""


def test_parse_show_output_keeps_equals_signs_in_values():
    parsed = systemd_show.parse_show_output(LOGIND_SHOW)
    assert parsed["MainPID"] == "0"
    assert parsed["StatusText"] == "Shutting down..."
    assert parsed["ExecStart"].startswith("{ path=/usr/lib/systemd/systemd-logind ; argv[]=")
    assert parsed["ExecStart"].endswith("code=exited ; status=0 }")
    assert parsed["UID"] == "[not set]"
    assert systemd_show.parse_show_output("garbage\n=novalue\nEmpty=\n") == {"Empty": ""}


@pytest.mark.parametrize("text, expected", [
    ("Sun 2026-11-29 19:45:01 UTC", datetime.datetime(2026, 11, 29, 19, 45, 1, tzinfo=datetime.timezone.utc)),
    ("Sun 2026-11-29 19:45:01.123456 UTC", datetime.datetime(2026, 11, 29, 19, 45, 1, 123456, tzinfo=datetime.timezone.utc)),
    ("Sun 2026-11-29 19:45:01.5 UTC", datetime.datetime(2026, 11, 29, 19, 45, 1, 500000, tzinfo=datetime.timezone.utc)),
    ("2026-11-29 19:45:01 GMT", datetime.datetime(2026, 11, 29, 19, 45, 1, tzinfo=datetime.timezone.utc)),
    ("@1795981501", datetime.datetime(2026, 11, 29, 19, 45, 1, tzinfo=datetime.timezone.utc)),
    ("", None),
    ("n/a", None),
    ("0", None),
    (None, None),
])
def test_parse_timestamp(text, expected):
    assert systemd_show.parse_timestamp(text) == expected


@pytest.mark.parametrize("text", ["Wed 2020-06-03 16:53:40 CEST", "yesterday", "Sun 2026-11-29T19:45:01Z"])
def test_parse_timestamp_refuses_zones_it_cannot_place_and_garbage(text):
    with pytest.raises(ValueError):
        systemd_show.parse_timestamp(text)


def test_iso_utc():
    moment = datetime.datetime(2026, 11, 29, 19, 45, 1, tzinfo=datetime.timezone.utc)
    assert systemd_show.iso_utc(moment) == "2026-11-29T19:45:01Z"
    assert systemd_show.iso_utc(moment.replace(microsecond=5000)) == "2026-11-29T19:45:01.005000Z"
    assert systemd_show.iso_utc(None) is None


def test_show_unit_asks_for_the_properties_in_utc():
    run = FakeSystemctl(show_text())
    unit = systemd_show.show_unit(run, UNIT)
    args, environ = run.calls[0]
    assert args[:2] == ["systemctl", "show"] and args[-2:] == ["--", UNIT]
    assert set(args[2].split("=", 1)[1].split(",")) >= {
        "ActiveState", "SubState", "MainPID", "InvocationID", "ExecMainStartTimestamp", "ControlGroup"}
    assert environ["TZ"] == "UTC"
    assert unit == {
        "name": UNIT, "load_state": "loaded", "active_state": "active", "sub_state": "running", "result": "success",
        "main_pid": 4711, "invocation_id": "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10",
        "exec_main_start_timestamp": "2026-11-29T19:45:01Z", "exec_main_start_epoch": 1795981501.0,
        "control_group": CONTROL_GROUP, "n_restarts": 0,
    }


def test_show_unit_of_a_missing_unit():
    # What systemctl prints for a name it does not know: rc 0, LoadState=not-found, empty timestamps.
    run = FakeSystemctl(show_text(Id="nope.service", LoadState="not-found", ActiveState="inactive", SubState="dead",
                                  MainPID="0", InvocationID="", ExecMainStartTimestamp="", ControlGroup=""))
    unit = systemd_show.show_unit(run, "nope.service")
    assert (unit["load_state"], unit["main_pid"], unit["exec_main_start_timestamp"]) == ("not-found", 0, None)


def test_show_unit_errors_are_explained():
    with pytest.raises(systemd_show.SystemdError, match="rc=1.*Failed to connect to bus"):
        systemd_show.show_unit(FakeSystemctl((1, "", "Failed to connect to bus: No such file or directory\n")), UNIT)
    with pytest.raises(systemd_show.SystemdError, match="no ActiveState"):
        systemd_show.show_unit(FakeSystemctl("hello\n"), UNIT)
    # The verbatim logind sample is in CEST: refused rather than silently misplaced by two hours.
    with pytest.raises(systemd_show.SystemdError, match="not in UTC"):
        systemd_show.show_unit(FakeSystemctl(LOGIND_SHOW + "ActiveState=failed\n"), "systemd-logind.service")


@pytest.mark.parametrize("cgroup_text, member", [
    ("12:pids:/system.slice/sglang-qwen36.service\n1:name=systemd:/system.slice/sglang-qwen36.service\n0::/\n", True),
    ("1:name=systemd:/system.slice/sglang-qwen36.service/worker\n", True),
    ("0::/system.slice/sglang-qwen36.service\n", True),                          # pure cgroup v2
    ("4:memory:/system.slice/sglang-qwen36.service\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/\n", False),
    ("1:name=systemd:/system.slice/sglang-qwen36.service2\n", False),            # a sibling with a longer name
    ("1:name=systemd:/system.slice\n0::/system.slice\n", False),                 # the parent slice
    ("1:name=systemd:/\n0::/\n", False),
    ("", False),
])
def test_in_unit_cgroup(cgroup_text, member):
    assert systemd_show.in_unit_cgroup(procfs.parse_cgroup(cgroup_text), CONTROL_GROUP) is member


def test_in_unit_cgroup_needs_a_control_group():
    entries = procfs.parse_cgroup("0::/system.slice/x.service\n")
    assert not systemd_show.in_unit_cgroup(entries, "")
    assert not systemd_show.in_unit_cgroup(entries, "/")
    assert not systemd_show.in_unit_cgroup(None, "/system.slice/x.service")
    assert systemd_show.in_unit_cgroup(entries, "/system.slice/x.service/")


def test_systemd_cgroup_path_prefers_name_systemd():
    assert systemd_show.systemd_cgroup_path(procfs.parse_cgroup("0::/a\n1:name=systemd:/b\n")) == "/b"
    assert systemd_show.systemd_cgroup_path(procfs.parse_cgroup("4:memory:/m\n0::/a\n")) == "/a"
    assert systemd_show.systemd_cgroup_path(None) is None


def test_unit_name():
    assert systemd_show.unit_name("sglang-qwen36") == "sglang-qwen36.service"
    assert systemd_show.unit_name("sglang-qwen36.service") == "sglang-qwen36.service"
    assert systemd_show.unit_name("session-3.scope") == "session-3.scope"
