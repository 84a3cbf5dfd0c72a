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
