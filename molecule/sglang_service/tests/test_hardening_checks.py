# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checks that run as root against a log directory the service user tampered with (issue #12, classes 2 and 4).

The service account owns /var/log/llmops-serving/<instance>/: here it repoints current.log at /etc/shadow, at a FIFO
named like a log, and replaces current.log by a FIFO. log_provenance and sglang_ready must fail at once, naming what
they found, within their timeout, and return no line of /etc/shadow; and no result may carry the API key. Every case
restores current.log as the launcher left it, so the scenario's other checks run on an untouched directory.
"""

from __future__ import annotations

import json
import time

import pytest

from sglang_checks import CURRENT_LOG, LOG_DIR, PORT, UNIT, deployment_id, wait_ready

from ansible_collections.llmops.serving.tests.support.ansible_run import call_module

SERVICE = "llmops.serving.service_provenance"
LOG = "llmops.serving.log_provenance"
READY = "llmops.serving.sglang_ready"
# The unit's User= (roles/sglang_service: sglang_service_user) and the scenario's key (molecule.yml).
SERVICE_USER = "sglang"
API_KEY = "molecule-secret-key"
# A name the launcher could have written (<YYYYmmddTHHMMSSZ>-<invocation id>.log), so only its type gives it away.
FIFO_LOG = "20991231T235959Z-%s.log" % ("0" * 32)
READY_TIMEOUT = 20


def as_service_user(host, script):
    """Run a shell script as the service account, the way a compromised server could."""
    host.check_output("runuser -u %s -- sh -c %s" % (SERVICE_USER, json.dumps(script)))


def shadow_fragments(host):
    """Each line of /etc/shadow and its name:hash part: none may appear in a result."""
    lines = [line for line in host.file("/etc/shadow").content_string.splitlines() if line.strip()]
    assert lines, "the container has an /etc/shadow"
    return set(lines) | {":".join(line.split(":")[:2]) for line in lines}


def no_shadow_in(result, fragments):
    text = json.dumps(result)
    assert not [fragment for fragment in fragments if fragment in text]


def ready_wait(host):
    """sglang_ready with a short timeout; (result, failed, seconds the call took)."""
    started = time.monotonic()
    result, failed = call_module(host, READY, name=UNIT, log_path=CURRENT_LOG, url="http://127.0.0.1:%d" % PORT,
                                 timeout=READY_TIMEOUT, poll_interval=0.2)
    return result, failed, time.monotonic() - started


@pytest.fixture
def current_log(host):
    """current.log's target before the case; afterwards current.log points there again (a symlink made by the service
    account, replaced atomically as the launcher does) and whatever the case left is gone."""
    wait_ready(host)
    target = host.check_output("readlink %s" % CURRENT_LOG)
    assert "/" not in target
    yield target
    host.check_output("rm -f %s/%s" % (LOG_DIR, FIFO_LOG))
    host.check_output("rm -f %s" % CURRENT_LOG)
    as_service_user(host, "ln -s %s %s/.current.log.restore && mv -T -f %s/.current.log.restore %s" % (
        target, LOG_DIR, LOG_DIR, CURRENT_LOG))
    assert host.check_output("readlink %s" % CURRENT_LOG) == target
    wait_ready(host)


def test_current_log_pointing_at_etc_shadow_is_refused_and_none_of_it_comes_back(host, current_log):
    fragments = shadow_fragments(host)
    as_service_user(host, "ln -sfn /etc/shadow %s" % CURRENT_LOG)
    expected = "%s points outside the log directory to /etc/shadow" % CURRENT_LOG

    log, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG, deployment_id=deployment_id(host))
    assert failed and log["msg"].startswith(expected), log["msg"]
    # The log the server really writes is still named, from its file descriptors.
    assert "%s/%s" % (LOG_DIR, current_log) in log["msg"]
    assert log["inode"] is None and log["header_error"] is None
    no_shadow_in(log, fragments)

    ready, failed, seconds = ready_wait(host)
    assert failed and expected in ready["msg"], ready["msg"]
    assert ready["elapsed_seconds"] < READY_TIMEOUT and seconds < READY_TIMEOUT + 60
    no_shadow_in(ready, fragments)


@pytest.mark.usefixtures("current_log")
def test_current_log_pointing_at_a_fifo_fails_within_the_timeout(host):
    as_service_user(host, "mkfifo %s/%s && ln -sfn %s %s" % (LOG_DIR, FIFO_LOG, FIFO_LOG, CURRENT_LOG))
    expected = "%s points at %s, which is a FIFO, not a log file" % (CURRENT_LOG, FIFO_LOG)

    ready, failed, seconds = ready_wait(host)
    assert failed and expected in ready["msg"], ready["msg"]
    assert ready["elapsed_seconds"] < READY_TIMEOUT and seconds < READY_TIMEOUT + 60

    log, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG)
    assert failed and log["msg"].startswith(expected), log["msg"]


@pytest.mark.usefixtures("current_log")
def test_current_log_replaced_by_a_fifo_fails_within_the_timeout(host):
    as_service_user(host, "rm -f %s && mkfifo %s" % (CURRENT_LOG, CURRENT_LOG))
    expected = "%s is a FIFO, not the symlink the launcher makes" % CURRENT_LOG

    ready, failed, seconds = ready_wait(host)
    assert failed and expected in ready["msg"], ready["msg"]
    assert ready["elapsed_seconds"] < READY_TIMEOUT and seconds < READY_TIMEOUT + 60

    log, failed = call_module(host, LOG, name=UNIT, path=CURRENT_LOG)
    assert failed and log["msg"].startswith(expected), log["msg"]


def test_no_check_returns_the_api_key(host):
    # While the launcher passes the key as --api-key, the server's command line carries it; the checks show it masked.
    wait_ready(host)
    results = [
        call_module(host, SERVICE, name=UNIT, port=PORT, deployment_id=deployment_id(host)),
        call_module(host, LOG, name=UNIT, path=CURRENT_LOG, deployment_id=deployment_id(host)),
        call_module(host, READY, name=UNIT, log_path=CURRENT_LOG, url="http://127.0.0.1:%d" % PORT, timeout=READY_TIMEOUT),
    ]
    for result, failed in results:
        assert not failed, result.get("msg")
        assert API_KEY not in json.dumps(result)
    service = results[0][0]
    assert service["listener"]["in_unit"] and "--api-key %s" % API_KEY not in service["listener"]["cmdline"]
