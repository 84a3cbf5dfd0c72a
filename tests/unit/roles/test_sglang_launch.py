# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service's launcher, rendered by ansible's Templar and run with bash: the header it writes is the one
log_header parses (the code log_provenance and sglang_ready use), and its PID is the exec'd server's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import CURRENT_LOG_NAME, HEADER_KEYS, LOG_FILE_NAME_RE
from ansible_collections.llmops.serving.tests.support.private_tmpfs import private_tmpfs_prefix
from ansible_collections.llmops.serving.tests.unit.roles.templar import render_file

TEMPLATE = "roles/sglang_service/templates/sglang-launch.j2"
DEPLOYMENT = "3f" * 32
# The server: prints its own PID, its arguments and whether the API key variable reached it, then exits.
SERVER = [sys.executable, "-c", "import json, os, sys; print(json.dumps({'pid': os.getpid(), 'argv': sys.argv[1:], "
                                "'key_in_env': 'LLMOPS_SGLANG_API_KEY' in os.environ}))"]


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    """The launcher as the template module renders it."""
    text = render_file(TEMPLATE, {"ansible_managed": "Ansible managed: test"})
    path = tmp_path_factory.mktemp("libexec") / "sglang-launch"
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "log"
    path.mkdir()
    return str(path)


def start(launcher, log_dir, invocation_id, *server_args, **env):
    """Run the launcher as systemd would for one start; return the completed process."""
    environment = {
        "PATH": os.environ["PATH"],
        "INVOCATION_ID": invocation_id,
        "LLMOPS_DEPLOYMENT_ID": DEPLOYMENT,
        "LLMOPS_LOG_DIR": log_dir,
        "LLMOPS_INSTANCE": "qwen36",
        "LLMOPS_UNIT": "sglang-qwen36.service",
    }
    environment.update(env)
    environment = {name: value for name, value in environment.items() if value is not None}
    return subprocess.run(["bash", launcher] + SERVER + list(server_args), env=environment, capture_output=True, text=True,
                          timeout=60, check=False)


def current_log(log_dir):
    """(the file current.log points at, log_header's summary of it, what the server printed after the header)."""
    link = os.path.join(log_dir, CURRENT_LOG_NAME)
    target = os.readlink(link)
    summary = log_header.read_log_summary(link)
    with open(link, "rb") as handle:
        handle.seek(summary["offset"])
        output = json.loads(handle.read().decode("utf-8"))
    return target, summary, output


def test_the_header_names_the_start_and_its_pid_is_the_execd_servers(launcher, log_dir):
    run = start(launcher, log_dir, "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == "", "everything goes to the log file"
    target, summary, output = current_log(log_dir)
    header = summary["header"]
    assert summary["header_error"] is None
    assert list(header) == list(HEADER_KEYS)
    assert header["pid"] == output["pid"], "the PID in the header is the server's: the launcher exec'd it"
    assert header["invocation_id"] == "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
    assert header["deployment_id"] == DEPLOYMENT
    assert (header["instance"], header["unit"]) == ("qwen36", "sglang-qwen36.service")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", header["started_at"])
    compact = header["started_at"].replace("-", "").replace(":", "")
    # current.log points at the new file by its name in the same directory.
    assert target == f"{compact}-6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10.log"
    assert LOG_FILE_NAME_RE.match(target), "the name the log checks accept"
    assert sorted(os.listdir(log_dir)) == sorted([CURRENT_LOG_NAME, target])
    assert output["argv"] == [] and not output["key_in_env"]


def test_a_second_start_gets_a_new_file_and_current_log_moves_to_it(launcher, log_dir):
    assert start(launcher, log_dir, "a" * 32).returncode == 0
    first_target, first, _output = current_log(log_dir)
    with open(os.path.join(log_dir, first_target), "rb") as handle:
        first_bytes = handle.read()
    run = start(launcher, log_dir, "b" * 32)
    assert run.returncode == 0, run.stderr
    second_target, second, output = current_log(log_dir)
    assert second_target != first_target and second_target.endswith("-" + "b" * 32 + ".log")
    assert second["header"]["invocation_id"] == "b" * 32 and second["header"]["pid"] == output["pid"] != first["header"]["pid"]
    assert second["inode"] != first["inode"]
    with open(os.path.join(log_dir, first_target), "rb") as handle:
        assert handle.read() == first_bytes, "the earlier start's log is left as it was"
    assert not [name for name in os.listdir(log_dir) if name.startswith(".current.log.")]


def test_an_api_key_variable_never_becomes_a_flag(launcher, log_dir):
    # The key reaches SGLang as a credential file (test_sglang_launch_credentials.py), never on the command line.
    run = start(launcher, log_dir, "c" * 32, "--port", "30000", LLMOPS_SGLANG_API_KEY="s3cret")
    assert run.returncode == 0, run.stderr
    _target, summary, output = current_log(log_dir)
    assert output["argv"] == ["--port", "30000"]
    assert "s3cret" not in summary["header_line"]


def test_without_instance_and_unit_the_header_says_unknown(launcher, log_dir):
    assert start(launcher, log_dir, "d" * 32, LLMOPS_INSTANCE=None, LLMOPS_UNIT=None).returncode == 0
    header = current_log(log_dir)[1]["header"]
    assert (header["instance"], header["unit"]) == ("unknown", "unknown")


@pytest.mark.parametrize("unset, why", [
    ("INVOCATION_ID", "INVOCATION_ID is not set: only systemd starts this server"),
    ("LLMOPS_DEPLOYMENT_ID", "LLMOPS_DEPLOYMENT_ID is not set: the deployment env file was not loaded"),
])
def test_a_start_outside_the_unit_is_refused_before_a_log_is_opened(launcher, log_dir, unset, why):
    run = start(launcher, log_dir, "e" * 32, **{unset: None})
    assert run.returncode != 0 and why in run.stderr
    assert os.listdir(log_dir) == []


def test_metrics_get_the_labels_of_this_instance_deployment_and_start(launcher, log_dir):
    run = start(launcher, log_dir, "e" * 32, "--port", "30000", "--enable-metrics")
    assert run.returncode == 0, run.stderr
    argv = current_log(log_dir)[2]["argv"]
    assert argv[:3] == ["--port", "30000", "--enable-metrics"] and argv[3] == "--extra-metric-labels"
    # Read as SGLang reads the flag (json.loads), in the order its scheduler appends them to its own labels.
    assert list(json.loads(argv[4]).items()) == [("sglang_instance", "qwen36"), ("deployment_id", DEPLOYMENT),
                                                 ("invocation_id", "e" * 32)]
    assert len(argv) == 5


@pytest.mark.parametrize("server_args", [
    ("--port", "30000"),                                                            # metrics off: no labels
    ("--enable-metrics", "--extra-metric-labels", '{"team": "a"}'),                 # the operator's own labels win
    ("--enable-metrics", '--extra-metric-labels={"team": "a"}'),
])
def test_labels_are_added_only_to_metrics_that_have_none(launcher, log_dir, server_args):
    assert start(launcher, log_dir, "f" * 32, *server_args).returncode == 0
    assert current_log(log_dir)[2]["argv"] == list(server_args)


def test_a_value_that_is_no_plain_name_is_left_out_not_quoted_into_json(launcher, log_dir):
    run = start(launcher, log_dir, "a" * 32, "--enable-metrics", LLMOPS_INSTANCE='x", "deployment_id": "forged')
    assert run.returncode == 0, run.stderr
    # The server's line is the log's last (the header, with that instance in it, is not what is checked here).
    with open(os.path.join(log_dir, CURRENT_LOG_NAME), encoding="utf-8") as handle:
        argv = json.loads(handle.read().splitlines()[-1])["argv"]
    assert argv[:2] == ["--enable-metrics", "--extra-metric-labels"], argv
    assert json.loads(argv[2]) == {"deployment_id": DEPLOYMENT, "invocation_id": "a" * 32}


# --------------------------------------------------------------------------- a log filesystem that cannot take the log
# Each case runs in a mount namespace of its own, on a small tmpfs mounted over the log directory: a real ENOSPC or
# EROFS from the kernel, no fault injection. A first start writes a log there (the server before the restart), then the
# filesystem is filled (blocks or inodes) or made read-only, and a second start runs: the restart that cannot log.

TMPFS_BYTES = 64 * 1024
TMPFS_INODES = 64
FIRST, SECOND = "a" * 32, "b" * 32
# In the namespace: mount, first start, fill, second start, then what the directory holds (the mount ends with it).
DRIVER = r"""
import json, os, subprocess, sys
job = json.loads(sys.argv[1])
log_dir = job["log_dir"]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,nr_inodes=%d,mode=0755" % (job["bytes"], job["inodes"]),
                "llmops-test", log_dir], check=True)


def start(invocation, server):
    env = dict(job["env"], INVOCATION_ID=invocation)
    return subprocess.run(["bash", job["launcher"]] + server, env=env, capture_output=True, text=True, timeout=60)


first = start(job["first"], job["first_server"])
with open(os.path.join(log_dir, "current.log"), encoding="utf-8") as handle:
    first_output = handle.read().splitlines()[-1]
names = []
if job["fill"] in ("blocks", "inodes", "inodes_but_one"):
    for number in range(100000):
        name = os.path.join(log_dir, "filler-%d" % number)
        try:
            with open(name, "wb") as handle:
                if job["fill"] == "blocks":
                    handle.write(b"\0" * 4096)
        except OSError:
            if os.path.exists(name) and job["fill"] == "blocks":
                names.append(name)
            break
        names.append(name)
    if job["fill"] == "inodes_but_one":
        os.unlink(names.pop())
elif job["fill"] == "read_only":
    subprocess.run(["mount", "-o", "remount,ro", log_dir], check=True)
second = start(job["second"], job["second_server"])
print(json.dumps({
    "first": [first.returncode, first.stdout, first.stderr], "first_output": first_output,
    "second": [second.returncode, second.stdout, second.stderr],
    "listing": sorted(name for name in os.listdir(log_dir) if not name.startswith("filler-")),
    "current": os.readlink(os.path.join(log_dir, "current.log")),
}))
"""
# The first server: which file descriptors it holds (the launcher's spare journal descriptor must not reach it).
FDS_SERVER = [sys.executable, "-c", "import json, os; print(json.dumps(sorted(int(fd) for fd in os.listdir('/proc/self/fd'))))"]


@pytest.fixture(scope="module")
def private_tmpfs(tmp_path_factory):
    """The unshare prefix, or a skip when this machine cannot mount a tmpfs in a namespace of its own."""
    return private_tmpfs_prefix(tmp_path_factory.mktemp("probe"))


def restart_on(private_tmpfs, launcher, log_dir, fill, inodes=TMPFS_INODES):
    """A first start, the log filesystem filled as ``fill`` says, a second start: what the driver saw."""
    job = {
        "log_dir": log_dir, "bytes": TMPFS_BYTES, "inodes": inodes, "fill": fill, "launcher": launcher,
        "first": FIRST, "second": SECOND, "first_server": FDS_SERVER, "second_server": SERVER,
        "env": {"PATH": os.environ["PATH"], "LLMOPS_DEPLOYMENT_ID": DEPLOYMENT, "LLMOPS_LOG_DIR": log_dir,
                "LLMOPS_INSTANCE": "qwen36", "LLMOPS_UNIT": "sglang-qwen36.service"},
    }
    run = subprocess.run(private_tmpfs + [sys.executable, "-c", DRIVER, json.dumps(job)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["first"][0] == 0, seen["first"]
    # The server of the first start holds 0, 1, 2 and the directory it lists: not the launcher's spare descriptor.
    assert len(set(json.loads(seen["first_output"])) - {0, 1, 2}) <= 1, seen["first_output"]
    return seen


def journal_line(seen):
    """The second start's status and its one stderr line (what systemd puts in the journal); no output on stdout."""
    returncode, stdout, stderr = seen["second"]
    assert stdout == ""
    assert len(stderr.splitlines()) == 1, stderr
    return returncode, stderr.strip()


def first_log(seen):
    return "%s-%s.log" % (seen["current"].split("-")[0], FIRST)


@pytest.mark.parametrize("fill, step, error, space", [
    # Blocks full: the file is created (an inode is free) and its header cannot be written.
    ("blocks", "cannot write the header of the log file", "No space left on device",
     r"has 0 of 65536 bytes and \d+ of 64 inodes free"),
    # No inode left: the file cannot be created.
    ("inodes", "cannot create the log file", "No space left on device", r"has \d+ of 65536 bytes and 0 of 64 inodes free"),
    # One inode left: the log file takes it, and current.log cannot be repointed.
    ("inodes_but_one", "cannot point current.log at the log file", "No space left on device",
     r"has \d+ of 65536 bytes and 0 of 64 inodes free"),
    ("read_only", "cannot create the log file", "Read-only file system", r"has \d+ of 65536 bytes and \d+ of 64 inodes free"),
], ids=["blocks-full", "no-inodes", "last-inode", "read-only"])
def test_a_log_filesystem_that_cannot_take_the_log_is_named_in_the_journal(private_tmpfs, launcher, log_dir, fill,
                                                                           step, error, space):
    seen = restart_on(private_tmpfs, launcher, log_dir, fill)
    returncode, line = journal_line(seen)
    assert returncode == 75, seen["second"]
    match = re.fullmatch(r"sglang-launch: (?P<step>.+?) (?P<file>\S+): (?P<error>[^;]+); the filesystem of (?P<dir>\S+) "
                         r"(?P<space>.+?)\. The server was not started \(exit status 75\): free space there or make it "
                         r"writable for the service account, then restart the unit\.", line)
    assert match, line
    assert (match["step"], match["error"], match["dir"]) == (step, error, log_dir)
    assert re.fullmatch(os.path.join(re.escape(log_dir), r"\d{8}T\d{6}Z-" + SECOND + r"\.log"), match["file"])
    assert re.fullmatch(space, match["space"]), match["space"]
    # The server never ran (it would have printed its PID to stdout or the log), the previous start's log is current.log
    # still, and nothing of the failed start is left in the directory.
    assert seen["current"] == first_log(seen)
    assert seen["listing"] == sorted([CURRENT_LOG_NAME, first_log(seen)])
