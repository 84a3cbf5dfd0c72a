# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service's launcher and the API key: the key reaches SGLang as a --config file from systemd's credentials
directory, never as an argument or a variable, and a credential the unit names but systemd did not provide stops the
start instead of serving without the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import CURRENT_LOG_NAME
from ansible_collections.llmops.serving.tests.unit.roles.templar import render_file

TEMPLATE = "roles/sglang_service/templates/sglang-launch.j2"
CREDENTIAL = "sglang-secrets.yaml"
KEY = "sk-launch-test-key"
# The server: prints its arguments and environment, then exits.
SERVER = [sys.executable, "-c", "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"]


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    path = tmp_path_factory.mktemp("libexec") / "sglang-launch"
    path.write_text(render_file(TEMPLATE, {"ansible_managed": "Ansible managed: test"}))
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def credentials(tmp_path):
    """A credentials directory as systemd makes it for LoadCredential=, with the secrets file in it."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / CREDENTIAL).write_text('api-key: "%s"\n' % KEY)
    return str(directory)


def start(launcher, tmp_path, **env):
    log_dir = tmp_path / "log"
    log_dir.mkdir(exist_ok=True)
    environment = {"PATH": os.environ["PATH"], "INVOCATION_ID": "c" * 32, "LLMOPS_DEPLOYMENT_ID": "3f" * 32,
                   "LLMOPS_LOG_DIR": str(log_dir)}
    environment.update({name: value for name, value in env.items() if value is not None})
    run = subprocess.run(["bash", launcher] + SERVER + ["--port", "30000"], env=environment, capture_output=True,
                         text=True, timeout=60, check=False)
    link = os.path.join(str(log_dir), CURRENT_LOG_NAME)
    summary = log_header.read_log_summary(link)
    with open(link, "rb") as handle:
        handle.seek(summary["offset"])
        rest = handle.read().decode("utf-8")
    return run, rest


def test_the_key_file_is_passed_as_config_and_the_key_is_in_no_argument_or_variable(launcher, tmp_path, credentials):
    run, rest = start(launcher, tmp_path, LLMOPS_SERVER_CONFIG_CREDENTIAL=CREDENTIAL, CREDENTIALS_DIRECTORY=credentials)
    assert run.returncode == 0, run.stderr
    output = json.loads(rest)
    assert output["argv"] == ["--port", "30000", "--config", os.path.join(credentials, CREDENTIAL)]
    assert KEY not in json.dumps(output)
    assert "LLMOPS_SERVER_CONFIG_CREDENTIAL" not in output["env"]


def test_without_a_credential_the_server_gets_its_argv_unchanged(launcher, tmp_path):
    run, rest = start(launcher, tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(rest)["argv"] == ["--port", "30000"]


@pytest.mark.parametrize("directory", [None, "missing"])
def test_a_named_credential_that_systemd_did_not_provide_stops_the_start(launcher, tmp_path, directory):
    if directory == "missing":
        directory = str(tmp_path / "empty")
        os.mkdir(directory)
    run, rest = start(launcher, tmp_path, LLMOPS_SERVER_CONFIG_CREDENTIAL=CREDENTIAL, CREDENTIALS_DIRECTORY=directory)
    assert run.returncode != 0
    assert "argv" not in rest, "the server must not start without its key"
    assert CREDENTIAL in rest, "the log says which credential is missing"
