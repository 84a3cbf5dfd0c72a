# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The API key on the service side (issue #12, class 4): systemd hands it to the server as a credential and SGLang
reads it from a --config file, so it is in no process's command line, not in the server's environment, not in
systemctl show and in no result of a converge; the server still refuses requests without it. A rotated key restarts the
server under the same deployment ID; a systemd without LoadCredential= stops the role before anything changes.
"""

from __future__ import annotations

import base64
import json
import shlex

import pytest

from sglang_checks import PORT, UNIT, deployment_id, unit_properties, wait_ready

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge

# The scenario's key (molecule.yml).
API_KEY = "molecule-secret-key"
ROTATED_KEY = "molecule-rotated-key/+=%$\"'\\:#{}"
SECRETS = "/etc/llmops-serving/molecule/server-secrets.yaml"
SERVER_ENV = "/etc/llmops-serving/molecule/server.env"
UNIT_PATH = "/etc/systemd/system/%s" % UNIT
CREDENTIAL = "/run/credentials/%s/sglang-secrets.yaml" % UNIT


def files_holding(host, needle, pattern):
    """The files matching the glob ``pattern`` whose bytes contain ``needle``; the needle travels base64-encoded, so
    the command that looks for it does not carry it in its own command line."""
    script = ("import base64, glob\nneedle = base64.b64decode(%r)\nfor path in glob.glob(%r):\n    try:\n"
              "        data = open(path, 'rb').read()\n    except OSError:\n        continue\n"
              "    if needle in data:\n        print(path)\n"
              % (base64.b64encode(needle.encode()).decode(), pattern))
    return host.check_output("python3 -c %s" % shlex.quote(script)).split()


def status_with(host, key=None):
    """The HTTP status of GET /v1/models, with the key as a bearer token when given (curl reads the header from a
    file, so the key is not in curl's command line)."""
    header = "/run/llmops-test-auth-header"
    if key is None:
        host.check_output("rm -f %s" % header)
        return host.check_output("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/v1/models" % PORT)
    encoded = base64.b64encode(("Authorization: Bearer %s" % key).encode()).decode()
    host.check_output("umask 077 && echo %s | base64 -d > %s" % (encoded, header))
    try:
        return host.check_output("curl -s -o /dev/null -w '%%{http_code}' -H @%s http://127.0.0.1:%d/v1/models"
                                 % (header, PORT))
    finally:
        host.check_output("rm -f %s" % header)


def converge_text(run):
    """Everything a converge returned and printed: every task result (registered or not), stdout and stderr."""
    return json.dumps(run.output) + run.stdout + run.stderr


def test_the_key_is_in_no_command_line_and_not_in_the_servers_environment(host):
    props = wait_ready(host)
    main_pid = props["MainPID"]
    # The search finds what is there: the server's own flags and the variables systemd set for it.
    assert "/proc/%s/cmdline" % main_pid in files_holding(host, "--served-model-name", "/proc/[0-9]*/cmdline")
    assert "/proc/%s/environ" % main_pid in files_holding(host, "LLMOPS_DEPLOYMENT_ID=", "/proc/[0-9]*/environ")
    assert files_holding(host, API_KEY, "/proc/[0-9]*/cmdline") == []
    assert files_holding(host, API_KEY, "/proc/[0-9]*/environ") == []
    argv = host.file("/proc/%s/cmdline" % main_pid).content.split(b"\0")
    assert b"--config" in argv and argv[argv.index(b"--config") + 1] == CREDENTIAL.encode()


def test_systemd_hands_the_key_over_as_a_credential_only_the_service_user_reads(host):
    secrets = host.file(SECRETS)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
    assert 'api-key: "%s"' % API_KEY in secrets.content_string
    # systemctl show prints LoadCredential= as [unprintable]: the unit systemd loaded says it.
    assert "LoadCredential=sglang-secrets.yaml:%s" % SECRETS in host.check_output("systemctl cat %s" % UNIT)
    assert API_KEY not in host.check_output("systemctl show %s" % UNIT)
    assert API_KEY not in host.file(UNIT_PATH).content_string
    assert API_KEY not in host.file(SERVER_ENV).content_string
    assert host.run("runuser -u sglang -- cat %s" % CREDENTIAL).rc == 0
    assert host.run("runuser -u nobody -- cat %s" % CREDENTIAL).rc != 0


def test_the_server_still_requires_the_key(host):
    wait_ready(host)
    assert status_with(host) == "401"
    assert status_with(host, "not-" + API_KEY) == "401"
    assert status_with(host, API_KEY) == "200"


def test_no_result_of_a_converge_carries_the_key(host):
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == [], "an unchanged rerun changes nothing"
    written = run.task_results("Write the API key as SGLang's --config file for systemd's LoadCredential=")
    assert written and written[0].get("censored"), "the task that holds the key ran, with no_log"
    assert API_KEY not in converge_text(run)


@pytest.fixture
def original_key_afterwards(host):
    yield
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    wait_ready(host)
    assert status_with(host, API_KEY) == "200"


@pytest.mark.usefixtures("original_key_afterwards")
def test_a_rotated_key_restarts_the_server_under_the_same_deployment(host):
    before = wait_ready(host)
    deployment = deployment_id(host)
    run = rerun_converge({"sglang_service_api_key": ROTATED_KEY})
    assert run.rc == 0, run.summary()
    assert ROTATED_KEY not in converge_text(run) and API_KEY not in converge_text(run)
    after = wait_ready(host)
    assert after["InvocationID"] != before["InvocationID"], "the handler restarted the server"
    assert deployment_id(host) == deployment, "a key is not part of the deployment"
    assert status_with(host, ROTATED_KEY) == "200"
    assert status_with(host, API_KEY) == "401"
    assert files_holding(host, ROTATED_KEY, "/proc/[0-9]*/cmdline") == []


def test_a_systemd_without_credentials_stops_the_role_before_anything_changes(host):
    before = wait_ready(host)
    unit_sum, secrets_sum = host.file(UNIT_PATH).sha256sum, host.file(SECRETS).sha256sum
    run = rerun_converge({"_sglang_service_systemd_version": 246, "sglang_service_api_key": ROTATED_KEY})
    assert run.rc != 0
    assert run.failures() and run.failures()[0].startswith(
        "Check that systemd can hand the API key to the server as a credential"), run.summary()
    assert "systemd 246" in run.failures()[0] and "LoadCredential=" in run.failures()[0]
    assert ROTATED_KEY not in converge_text(run)
    assert (host.file(UNIT_PATH).sha256sum, host.file(SECRETS).sha256sum) == (unit_sum, secrets_sum)
    assert unit_properties(host)["InvocationID"] == before["InvocationID"]


@pytest.fixture
def private_run(host):
    """/run as a container manager that ignores systemd's container interface mounts it: private. Shared again after."""
    assert "shared" in host.check_output("findmnt -n -o PROPAGATION /run"), "the scenario's /run must be shared"
    host.check_output("mount --make-private /run")
    yield
    host.check_output("mount --make-rshared /run")


@pytest.mark.usefixtures("private_run")
def test_where_credentials_do_not_reach_the_service_the_role_stops_before_anything_changes(host):
    before = wait_ready(host)
    unit_sum, secrets_sum = host.file(UNIT_PATH).sha256sum, host.file(SECRETS).sha256sum
    run = rerun_converge({"sglang_service_api_key": ROTATED_KEY})
    assert run.rc != 0
    assert run.failures() and run.failures()[0].startswith("Stop unless systemd hands credentials to the service"), \
        run.summary()
    assert "/run is not a shared mount" in run.failures()[0]
    assert ROTATED_KEY not in converge_text(run)
    assert (host.file(UNIT_PATH).sha256sum, host.file(SECRETS).sha256sum) == (unit_sum, secrets_sum)
    assert unit_properties(host)["InvocationID"] == before["InvocationID"]
