# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_api: the connection options and their documentation, connect(), the error messages, the task wait and the
root@pam rule for dev[n]. Against a real Proxmox (the simulator): tests/unit/plugins/modules/test_pve_lxc.py."""
from __future__ import annotations

import json
from unittest import mock

import pytest
import yaml

from ansible_collections.llmops.serving.plugins.doc_fragments.pve_api import ModuleDocFragment
from ansible_collections.llmops.serving.plugins.module_utils import pve_api

proxmoxer = pytest.importorskip("proxmoxer")
requests = pytest.importorskip("requests")
urllib3 = pytest.importorskip("urllib3")
from proxmoxer.core import AuthenticationError, ResourceException  # noqa: E402  pylint: disable=wrong-import-position

# A UPID in the format of pve-common PVE::Tools::upid_encode, built by hand for this test: a vzreboot of CT 120.
UPID = "UPID:pve1:00001234:00005678:65A0B0C0:vzreboot:120:root@pam:"


def params(**extra):
    """The connection options as AnsibleModule fills them in (defaults of pve_api_argument_spec)."""
    result = dict((name, spec.get("default")) for name, spec in pve_api.pve_api_argument_spec().items())
    result.update(api_host="pve1.example.org", api_user="root@pam")
    result.update(extra)
    return result


def test_the_doc_fragment_documents_exactly_the_argument_spec():
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    spec = pve_api.pve_api_argument_spec()
    assert sorted(documented) == sorted(spec)
    for name, option in spec.items():
        assert documented[name]["type"] == option["type"], name
        assert documented[name].get("default") == option.get("default"), name
        assert documented[name].get("required", False) == option.get("required", False), name
    assert [name for name, option in spec.items() if option.get("no_log")] == ["api_password", "api_token_secret"]


def test_the_argument_spec_can_leave_host_and_user_optional():
    spec = pve_api.pve_api_argument_spec(required=False)
    assert not spec["api_host"]["required"] and not spec["api_user"]["required"]
    # A fresh dict each call: a module that adds an alias does not change another module's spec.
    spec["api_timeout"]["aliases"] = ["timeout"]
    assert "aliases" not in pve_api.pve_api_argument_spec()["api_timeout"]


@pytest.mark.parametrize("extra,auth,verify", [
    ({"api_password": "pw"}, {"password": "pw"}, True),
    ({"api_password": "pw", "ca_path": "CA"}, {"password": "pw"}, "CA"),
    # Not verified at all: the CA file is not needed (here it does not exist).
    ({"api_password": "pw", "ca_path": "/etc/pve/pve-root-ca.pem", "validate_certs": False}, {"password": "pw"}, False),
    ({"api_token_id": "ansible", "api_token_secret": "s"}, {"token_name": "ansible", "token_value": "s"}, True),
])
def test_connect_passes_the_credentials_the_ca_and_the_timeout(extra, auth, verify, tmp_path):
    ca = tmp_path / "pve-root-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    if extra.get("ca_path") == "CA":
        extra = dict(extra, ca_path=str(ca))
        verify = str(ca)
    with mock.patch.object(pve_api, "ProxmoxAPI") as factory:
        api = pve_api.connect(params(api_timeout=45, **extra))
    assert api is factory.return_value
    factory.assert_called_once_with("pve1.example.org", port=8006, verify_ssl=verify, timeout=45, user="root@pam", **auth)


def test_connect_refuses_a_ca_file_it_cannot_read_before_any_request(tmp_path, monkeypatch):
    # Without this, requests raises a bare OSError ('Could not find a suitable TLS CA certificate bundle, invalid
    # path: ...') that the module cannot turn into a message.
    missing = tmp_path / "pve-root-ca.pem"
    with mock.patch.object(pve_api, "ProxmoxAPI") as factory:
        with pytest.raises(pve_api.PveFailure) as caught:
            pve_api.connect(params(api_password="pw", ca_path=str(missing)))
        assert str(caught.value).startswith("ca_path %s does not exist on " % missing)
        assert "copy the cluster's CA there from any node (/etc/pve/pve-root-ca.pem)" in str(caught.value)
        missing.write_text("-----BEGIN CERTIFICATE-----\n")
        monkeypatch.setattr(pve_api.os, "access", lambda path, mode: False)
        with pytest.raises(pve_api.PveFailure, match="^ca_path %s cannot be read by this user on " % missing):
            pve_api.connect(params(api_password="pw", ca_path=str(missing)))
    factory.assert_not_called()


def test_connect_without_proxmoxer_names_the_library(monkeypatch):
    monkeypatch.setattr(pve_api, "ProxmoxAPI", None)
    monkeypatch.setattr(pve_api, "PROXMOXER_IMPORT_ERROR", "Traceback: No module named 'proxmoxer'")
    with pytest.raises(pve_api.PveFailure) as caught:
        pve_api.connect(params(api_password="pw"))
    assert "proxmoxer" in str(caught.value)
    assert caught.value.extra == {"exception": "Traceback: No module named 'proxmoxer'"}


@pytest.mark.parametrize("error,message", [
    (AuthenticationError("Couldn't authenticate user: root@pam to https://pve1.example.org:8006/api2/json/access/ticket"),
     "authentication to the Proxmox API at https://pve1.example.org:8006 as root@pam failed: Couldn't authenticate user: root@pam"),
    (ResourceException(500, "Internal Server Error", "Configuration file 'nodes/pve1/lxc/120.conf' does not exist"),
     "Proxmox API error for CT 120 on node pve1: 500 Internal Server Error: Configuration file 'nodes/pve1/lxc/120.conf' does not exist"),
    (requests.exceptions.ReadTimeout("HTTPSConnectionPool(host='pve1.example.org', port=8006): Read timed out. (read timeout=30)"),
     "the Proxmox API at https://pve1.example.org:8006 did not answer within api_timeout=30 s: HTTPSConnectionPool"),
    (requests.exceptions.ConnectionError("[Errno 111] Connection refused"),
     "cannot reach the Proxmox API at https://pve1.example.org:8006: [Errno 111] Connection refused"),
])
def test_api_errors_name_the_cause(error, message):
    with pytest.raises(pve_api.PveFailure) as caught:
        with pve_api.api_errors(params(api_password="pw"), "CT 120 on node pve1"):
            raise error
    assert str(caught.value).startswith(message)


def test_api_errors_let_other_failures_through():
    with pytest.raises(KeyError):
        with pve_api.api_errors(params(), "CT 120 on node pve1"):
            raise KeyError("not an API error")


class FakeTaskApi:
    """The part of proxmoxer's attribute-call API that the wait uses: nodes(node).tasks(upid).status/log."""

    def __init__(self, statuses, log_lines=()):
        self.api = mock.MagicMock(name="ProxmoxAPI()")
        task = self.api.nodes.return_value.tasks.return_value
        task.status.get.side_effect = list(statuses)
        task.log.get.return_value = [{"n": n + 1, "t": text} for n, text in enumerate(log_lines)]
        self.task = task


def test_wait_for_upid_records_a_task_that_succeeded():
    fake = FakeTaskApi([{"status": "running"}, {"status": "stopped", "exitstatus": "OK"}])
    tasks = []
    status = pve_api.wait_for_upid(fake.api, "pve1", UPID, 60, "rebooting CT 120", tasks)
    assert status["exitstatus"] == "OK" and tasks == [{"upid": UPID, "exitstatus": "OK"}]
    fake.api.nodes.assert_called_with("pve1")
    fake.api.nodes.return_value.tasks.assert_called_with(UPID)


def test_wait_for_upid_fails_with_the_exit_status_and_the_log_tail():
    exitstatus = "command 'lxc-start -n 120' failed: exit code 1"
    fake = FakeTaskApi([{"status": "stopped", "exitstatus": exitstatus}],
                       ["Device /dev/nvidia-uvm does not exist", "TASK ERROR: startup for container '120' failed"])
    tasks = []
    with pytest.raises(pve_api.PveFailure) as caught:
        pve_api.wait_for_upid(fake.api, "pve1", UPID, 60, "rebooting CT 120", tasks)
    assert str(caught.value).startswith("rebooting CT 120 failed: %s (task %s); last log lines: Device /dev/nvidia-uvm" % (exitstatus, UPID))
    assert caught.value.extra == {"task_exitstatus": exitstatus,
                                  "task_log_tail": ["Device /dev/nvidia-uvm does not exist", "TASK ERROR: startup for container '120' failed"]}
    assert tasks == [{"upid": UPID, "exitstatus": exitstatus}]


def test_wait_for_upid_never_counts_a_task_whose_status_cannot_be_read_as_done():
    fake = FakeTaskApi([{"status": "running"}], ["starting CT 120"])
    failure = requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected('Remote end closed connection'))")
    fake.task.status.get.side_effect = [{"status": "running"}, failure]
    tasks = []
    with pytest.raises(pve_api.PveFailure) as caught:
        pve_api.wait_for_upid(fake.api, "pve1", UPID, 60, "rebooting CT 120", tasks)
    assert str(caught.value) == (
        "rebooting CT 120: the status of task vzreboot on node pve1 (%s) could not be read: ('Connection aborted.', "
        "RemoteDisconnected('Remote end closed connection')); it is not counted as done: it may still be running, or "
        "have succeeded or failed: `pvenode task status %s` on node pve1 says how it ended; last log lines: starting "
        "CT 120" % (UPID, UPID))
    assert caught.value.extra == {"task_exitstatus": None, "task_log_tail": ["starting CT 120"]}
    assert tasks == [{"upid": UPID, "exitstatus": None}]


def test_a_task_log_that_cannot_be_read_does_not_hide_the_tasks_failure():
    fake = FakeTaskApi([{"status": "stopped", "exitstatus": "startup for container '120' failed"}])
    fake.task.log.get.side_effect = ResourceException(503, "Service Unavailable", "Service Unavailable")
    with pytest.raises(pve_api.PveFailure) as caught:
        pve_api.wait_for_upid(fake.api, "pve1", UPID, 60, "rebooting CT 120")
    assert str(caught.value).startswith("rebooting CT 120 failed: startup for container '120' failed (task %s); last log "
                                        "lines: (the task log could not be read: 503 Service Unavailable" % UPID)


# -- the retry policy: RetryingSession against a scripted session (what each request meets, in turn) ----------------

class Answer:
    """What requests' Session.request returns: status, reason, body."""

    def __init__(self, status, reason="OK", body=None):
        self.status_code = status
        self.reason = reason
        self.text = json.dumps(body if body is not None else {"data": None})


class ScriptedSession:
    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def request(self, method, url, data=None, params=None):
        self.calls.append((method, url))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


BASE = "https://pve1.example.org:8006/api2/json"


def refused():
    """requests' error for a connection that was never made (nothing listens)."""
    reason = urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    return requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/", reason))


def dropped():
    """requests' error for a connection dropped after the request was sent (reset, closed without an answer)."""
    return requests.exceptions.ConnectionError(urllib3.exceptions.ProtocolError(
        "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")))


def cut_short():
    return requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead(12 bytes read, 30 more expected)")


OK = Answer(200, body={"data": {"status": "running"}})


@pytest.mark.parametrize("method,path,outcomes,attempts", [
    # A GET changes nothing: sent again on 502-504, 595-597 and a dropped or cut connection, up to 4 attempts.
    ("GET", "/nodes/pve1/lxc/120/config", [Answer(503, "Service Unavailable"), Answer(502, "Bad Gateway"), OK], 3),
    ("GET", "/nodes/pve1/lxc/120/config", [Answer(504, "Gateway Timeout"), Answer(596, "Connection timed out"), Answer(597, "x"), OK], 4),
    ("GET", "/nodes/pve1/tasks/%s/status" % UPID, [dropped(), cut_short(), refused(), OK], 4),
    ("GET", "/nodes/pve1/lxc/120/config", [Answer(503, "Service Unavailable")] * 4, 4),
    # Never on 500 (PVE's refusal), 4xx, a timeout or a certificate error.
    ("GET", "/nodes/pve1/lxc/120/config", [Answer(500, "Configuration file 'nodes/pve1/lxc/120.conf' does not exist")], 1),
    ("GET", "/nodes/pve1/lxc/120/config", [Answer(403, "Permission check failed")], 1),
    ("GET", "/nodes/pve1/lxc/120/config", [requests.exceptions.ReadTimeout("Read timed out. (read timeout=30)")], 1),
    ("GET", "/nodes/pve1/lxc/120/config", [requests.exceptions.SSLError("certificate verify failed")], 1),
    # A POST, PUT or DELETE only when it provably never arrived: a refused connection, or pveproxy's 595.
    ("POST", "/nodes/pve1/lxc", [refused(), OK], 2),
    ("POST", "/nodes/pve1/lxc/120/status/start", [Answer(595, "Connection refused"), OK], 2),
    ("POST", "/nodes/pve1/lxc", [dropped()], 1),
    ("POST", "/nodes/pve1/lxc/120/status/start", [Answer(503, "Service Unavailable")], 1),
    ("POST", "/nodes/pve1/lxc/120/status/shutdown", [Answer(596, "Connection timed out")], 1),
    ("PUT", "/nodes/pve1/lxc/120/config", [dropped()], 1),
    ("PUT", "/nodes/pve1/lxc/120/config", [Answer(502, "Bad Gateway")], 1),
    ("DELETE", "/nodes/pve1/lxc/120", [cut_short()], 1),
    ("DELETE", "/nodes/pve1/lxc/120", [Answer(504, "Gateway Timeout")], 1),
])
def test_only_idempotent_or_undelivered_requests_are_sent_again(method, path, outcomes, attempts):
    session = ScriptedSession(outcomes)
    waited = []
    retrying = pve_api.RetryingSession(session, sleep=waited.append)
    final = outcomes[attempts - 1]
    if final is OK:
        assert retrying.request(method, BASE + path, data={"vmid": 120}) is OK
    else:
        with pytest.raises((ResourceException, requests.exceptions.RequestException)) as caught:
            retrying.request(method, BASE + path, data={"vmid": 120})
        request = caught.value.pve_request
        assert (request.method, request.path, request.node, request.attempts) == (method, path, "pve1", attempts)
    assert len(session.calls) == attempts and session.outcomes == outcomes[attempts:]
    assert waited == list(pve_api.RETRY_DELAYS[:attempts - 1])


def test_an_error_answer_keeps_proxmoxers_exception_and_text_and_adds_the_request():
    session = ScriptedSession([Answer(400, "Parameter verification failed.",
                                      {"data": None, "errors": {"cores": "type check ('integer') failed - got 'many'"}})])
    with pytest.raises(ResourceException) as caught:
        pve_api.RetryingSession(session).request("POST", BASE + "/nodes/pve1/lxc", data={"vmid": 120, "password": "pw"})
    error = caught.value
    assert (error.status_code, error.status_message, error.content) == (400, "Bad Request", "Parameter verification failed.")
    assert str(error) == "400 Bad Request: Parameter verification failed. - {'cores': \"type check ('integer') failed - got 'many'\"}"
    assert pve_api.describe_request_failure(error) == (
        "POST /nodes/pve1/lxc (create CT 120) answered 400 Bad Request: Parameter verification failed. - cores: type "
        "check ('integer') failed - got 'many'")


@pytest.mark.parametrize("method,path,outcome,message", [
    ("POST", "/nodes/pve1/lxc", dropped(),
     "POST /nodes/pve1/lxc (create CT 120): the connection to the Proxmox API at https://pve1.example.org:8006 was "
     "dropped before an answer came (('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))); "
     "it may have reached the node, so it was not sent again and its effect is unknown: CT 120 may or may not exist "
     "now: check `pct status 120` on node pve1 before running again"),
    ("POST", "/nodes/pve1/lxc/120/status/reboot", Answer(596, "Connection timed out"),
     "POST /nodes/pve1/lxc/120/status/reboot (reboot CT 120) answered 596 Errors during TLS negotiation, request "
     "sending and header processing: Connection timed out; it may have reached the node, so it was not sent again and "
     "its effect is unknown: the reboot of CT 120 may or may not have begun: check `pct status 120` and its tasks "
     "(`pvenode task list --vmid 120`) on node pve1 before running again"),
    ("DELETE", "/nodes/pve1/lxc/120", requests.exceptions.ReadTimeout("Read timed out. (read timeout=30)"),
     "DELETE /nodes/pve1/lxc/120 (destroy CT 120): the Proxmox API at https://pve1.example.org:8006 did not answer "
     "within api_timeout=30 s (Read timed out. (read timeout=30)); it may have reached the node, so it was not sent "
     "again and its effect is unknown: CT 120 may or may not be being destroyed: check `pct status 120` and its tasks "
     "(`pvenode task list --vmid 120`) on node pve1 before running again"),
    ("GET", "/nodes/pve1/lxc/120/status/current", refused(),
     "GET /nodes/pve1/lxc/120/status/current: cannot reach the Proxmox API at https://pve1.example.org:8006 "),
])
def test_a_request_that_may_have_arrived_is_named_with_what_to_check(method, path, outcome, message):
    session = ScriptedSession([outcome] * 4)
    with pytest.raises((ResourceException, requests.exceptions.RequestException)) as caught:
        pve_api.RetryingSession(session, sleep=lambda seconds: None).request(method, BASE + path, data={"vmid": 120})
    described = pve_api.describe_request_failure(caught.value, params(api_password="pw"))
    assert described.startswith(message), described
    with pytest.raises(pve_api.PveFailure) as failure:
        with pve_api.api_errors(params(api_password="pw"), "CT 120 on node pve1"):
            raise caught.value
    assert str(failure.value) == "Proxmox API error for CT 120 on node pve1: " + described


def test_connect_sends_every_request_of_the_client_through_the_retrying_session(monkeypatch):
    class Client:
        def __init__(self, *args, **kwargs):
            self._store = {"session": "proxmoxer's session"}

    monkeypatch.setattr(pve_api, "ProxmoxAPI", Client)
    api = pve_api.connect(params(api_token_id="ansible", api_token_secret="s"))
    assert isinstance(api._store["session"], pve_api.RetryingSession)  # pylint: disable=protected-access
    assert api._store["session"]._session == "proxmoxer's session"  # pylint: disable=protected-access


@pytest.mark.parametrize("extra,reason", [
    ({"api_token_id": "ansible", "api_token_secret": "s"},
     "an API token is never root@pam, even one owned by root@pam (it authenticates as root@pam!ansible)"),
    ({"api_user": "ansible@pve", "api_password": "pw"}, "api_user is ansible@pve"),
    ({"api_user": None}, "api_user is not set"),
    ({}, "api_user=root@pam was given without api_password"),
])
def test_dev_entries_need_root_at_pam_with_a_password(extra, reason):
    with pytest.raises(pve_api.PveFailure) as caught:
        pve_api.require_root_for_devices(params(**extra), ["dev0", "dev1"])
    assert str(caught.value) == pve_api.ROOT_ONLY_MSG.format(reason=reason, entries="dev0, dev1")
    assert str(caught.value).startswith("dev[n] passthrough can only be set by root@pam: %s; " % reason)
    assert "so dev0, dev1 would be refused" in str(caught.value)


def test_root_at_pam_with_a_password_and_no_dev_entries_pass():
    assert pve_api.require_root_for_devices(params(api_password="pw"), ["dev0"]) is None
    assert pve_api.require_root_for_devices(params(api_token_id="ansible", api_token_secret="s"), []) is None


def test_timeouts_below_one_second_are_refused():
    pve_api.require_positive_seconds({"api_timeout": 1}, ["api_timeout"])
    with pytest.raises(pve_api.PveFailure, match="^task_timeout must be at least 1 second, got 0$"):
        pve_api.require_positive_seconds({"api_timeout": 30, "task_timeout": 0}, ["api_timeout", "task_timeout"])
