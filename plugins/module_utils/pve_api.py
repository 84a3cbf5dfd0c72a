# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE API client of the collection's modules, in the spirit of community.proxmox's module_utils/proxmox.py.

One owner for: the connection options (argument spec, their rules, doc fragment ``llmops.serving.pve_api``),
``connect()`` with proxmoxer, the retry of a request that met a transient fault (only where repeating it is safe),
the translation of proxmoxer/requests errors into messages that name the cause, the wait on a task by its UPID
(pve_task.wait_for_task on the API's status and log) and the rule that only root@pam with a password may set dev[n]
entries.

Faults of the API itself (issue 30), and what a request does about them (``RetryingSession``):

* which requests are repeated: a GET always (it changes nothing). POST (create, start, stop, shutdown, reboot), PUT
  (a config change: with its digest a repeat after an applied first attempt is refused as a concurrent change, and
  the module would report no change for a change it made) and DELETE (destroy) are repeated only when the request
  provably never reached the API's handler: the connection to the node could not be made (refused, unreachable) or
  pveproxy answered 595 (it could not connect to pvedaemon or to the node that owns the path). Otherwise their
  effect is unknown, and the message says so, names the request and what to check on the node;
* on what: the connection dropped without an answer (reset, closed, the body cut short) and the statuses that a
  repeat may not meet: 502, 503, 504 (a proxy in front of the API) and 595-597 (pveproxy's own connection failed;
  AnyEvent::HTTP's codes). Never 500: it is PVE's answer for a request its handler refused ("CT 120 already
  running", a digest mismatch, ...). Never a timeout: api_timeout bounds each attempt, and a node that does not
  answer in that time is not waited on four times over;
* how often: RETRY_DELAYS, 0.5, 1 and 2 s before the 2nd, 3rd and 4th attempt (at most 4 attempts, 3.5 s of waiting).

Every failure message names the node and the request (method and API path, never its parameters, a ticket or a
token), PVE's status and its own error text (its status line and ``errors``), and how many attempts were made.

Differences from community.proxmox 1.4.0 (why it is not used): each HTTP request has a timeout (``api_timeout``,
30 s; proxmoxer's default of 5 s is too short for a busy node), a CA file can verify the node's certificate
(``ca_path``), and a task that fails fails the module at once with its exit status and last log lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
import traceback
from http import client as http_client

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.llmops.serving.plugins.module_utils.pve_task import TaskError, log_tail, status_unknown, wait_for_task

PROXMOXER_IMPORT_ERROR = None
try:
    from proxmoxer import ProxmoxAPI
    from proxmoxer.core import AuthenticationError, ResourceException
    from requests.exceptions import ChunkedEncodingError, ConnectionError as RequestsConnectionError, ConnectTimeout, RequestException, SSLError, Timeout
    from urllib3.exceptions import MaxRetryError, NewConnectionError
except ImportError:
    PROXMOXER_IMPORT_ERROR = traceback.format_exc()
    ProxmoxAPI = None

    class ResourceException(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""

    class AuthenticationError(Exception):
        """Stands in so that except clauses stay valid without proxmoxer."""

    class RequestException(Exception):
        """Stands in so that except clauses stay valid without requests."""

    class Timeout(RequestException):
        """Stands in so that except clauses stay valid without requests."""

    class RequestsConnectionError(RequestException):
        """Stands in so that except clauses stay valid without requests."""

    class ConnectTimeout(RequestsConnectionError, Timeout):
        """Stands in so that except clauses stay valid without requests."""

    class SSLError(RequestsConnectionError):
        """Stands in so that except clauses stay valid without requests."""

    class ChunkedEncodingError(RequestException):
        """Stands in so that except clauses stay valid without requests."""

    class MaxRetryError(Exception):
        """Stands in so that isinstance checks stay valid without urllib3."""

    class NewConnectionError(Exception):
        """Stands in so that isinstance checks stay valid without urllib3."""


# Rules of the connection options, for AnsibleModule(mutually_exclusive=..., required_together=...).
PVE_API_MUTUALLY_EXCLUSIVE = [("api_password", "api_token_id")]
PVE_API_REQUIRED_TOGETHER = [("api_token_id", "api_token_secret")]
# For modules that always talk to the API.
PVE_API_REQUIRED_ONE_OF = [("api_password", "api_token_id")]

ROOT_ONLY_MSG = (
    "dev[n] passthrough can only be set by root@pam: {reason}; Proxmox answers 'configuring device passthrough is only "
    "allowed for root@pam' to API tokens and every other user, so {entries} would be refused "
    "(llmops.serving.lxc_gpu_passthrough passes GPU nodes without the API too). "
    "Use api_user=root@pam with api_password (a ticket), or backend=cli/file over SSH on the node."
)


# The requests that change nothing: repeated on a transient fault.
IDEMPOTENT_METHODS = ("GET",)
# Statuses that a repeat may not meet: a proxy in front of the API (502-504), pveproxy's connection to pvedaemon or to
# another node (595-597, AnyEvent::HTTP's codes, with the connection's error as the status line). Not 500: PVE's
# answer for a request its handler refused.
RETRY_STATUSES = (502, 503, 504, 595, 596, 597)
# pveproxy could not connect at all: the request was never delivered, so even a POST may be sent again.
NOT_DELIVERED_STATUSES = (595,)
# Seconds before the 2nd, 3rd and 4th attempt.
RETRY_DELAYS = (0.5, 1.0, 2.0)
# proxmoxer's status texts for the AnyEvent::HTTP codes.
ANYEVENT_HTTP_STATUS_TEXTS = {
    595: "Errors during connection establishment, proxy handshake",
    596: "Errors during TLS negotiation, request sending and header processing",
    597: "Errors during body receiving or processing",
    598: "User aborted request via on_header or on_body",
    599: "Other, usually nonretryable, errors (garbled URL etc.)",
}
_API_PATH_RE = re.compile(r"^/api2/[a-z]+(?P<path>/.*)?$")


def pause(seconds):
    """The wait between two attempts of a request (tests replace it)."""
    time.sleep(seconds)


class PveFailure(Exception):
    """A failure to report with fail_json: the message and extra result keys (``task_exitstatus``, ``exception``, ...)."""

    def __init__(self, message, **extra):
        super().__init__(message)
        self.extra = extra


class ApiUnavailable(Exception):
    """The API answered the login with a server error: not an authentication failure (api_errors names the subject)."""


class ApiRequest:
    """One API request as messages name it: method, path below /api2/json, the node it is about, its attempts.

    Never its parameters (a create carries the root password) nor its headers (ticket, CSRF token, API token).
    ``sent`` is False when the request provably never reached the API's handler, True when it may have.
    """

    def __init__(self, method, path, data=None, idempotent=None, what=None):
        self.method = method.upper()
        self.path = path
        self._idempotent = idempotent
        self._what = what
        match = re.match(r"^/nodes/([^/]+)(?:/|$)", path)
        self.node = match.group(1) if match else None
        vmid = (data or {}).get("vmid") if isinstance(data, dict) else None
        self.vmid = str(vmid) if vmid is not None else None
        self.attempts = 0
        self.started = time.monotonic()
        self.elapsed = 0.0
        self.sent = True

    @classmethod
    def from_url(cls, method, url, data=None):
        path = re.sub(r"^[a-z]+://[^/]*", "", url or "", flags=re.IGNORECASE).split("?", 1)[0]
        match = _API_PATH_RE.match(path)
        return cls(method, (match.group("path") or "/") if match else path, data)

    @property
    def idempotent(self):
        if self._idempotent is not None:
            return self._idempotent
        return self.method in IDEMPOTENT_METHODS

    def __str__(self):
        return "%s %s" % (self.method, self.path)

    def tries(self):
        """``(tried 4 times over 3.5 s)``, or nothing for a single attempt."""
        if self.attempts <= 1:
            return ""
        return " (tried %d times over %.1f s)" % (self.attempts, self.elapsed)

    def effect(self):
        """(what the request does, what to check on the node) for a request whose effect is unknown."""
        on_node = "on node %s" % self.node if self.node else "on the node"
        match = re.match(r"^/nodes/[^/]+/lxc(?:/(?P<vmid>\d+)(?P<rest>/.*)?)?$", self.path)
        if not match:
            return (None, "check the state of %s" % ("node %s" % self.node if self.node else "the node"))
        vmid = match.group("vmid") or self.vmid
        rest = match.group("rest")
        tasks = "`pvenode task list --vmid %s`" % vmid
        if self.method == "POST" and vmid and not match.group("vmid"):
            return ("create CT %s" % vmid, "CT %s may or may not exist now: check `pct status %s` %s" % (vmid, vmid, on_node))
        if self.method == "POST" and rest and rest.startswith("/status/"):
            action = rest[len("/status/"):]
            return ("%s CT %s" % (action, vmid),
                    "the %s of CT %s may or may not have begun: check `pct status %s` and its tasks (%s) %s" % (
                        action, vmid, vmid, tasks, on_node))
        if self.method == "PUT" and rest == "/config":
            return ("change the config of CT %s" % vmid,
                    "the config of CT %s may or may not have changed: check `pct config %s` %s" % (vmid, vmid, on_node))
        if self.method == "DELETE" and vmid and not rest:
            return ("destroy CT %s" % vmid,
                    "CT %s may or may not be being destroyed: check `pct status %s` and its tasks (%s) %s" % (
                        vmid, vmid, tasks, on_node))
        return (None, "check CT %s %s" % (vmid, on_node) if vmid else "check the containers %s" % on_node)

    def named(self):
        what = self._what or (self.effect()[0] if not self.idempotent else None)
        return "%s (%s)" % (self, what) if what else str(self)

    def unknown_effect(self):
        """The sentence for a request that may have reached the handler and was not repeated."""
        return ("; it may have reached the node, so it was not sent again and its effect is unknown: %s before "
                "running again" % self.effect()[1])


def request_of(exc):
    """The ApiRequest a failed request carries (RetryingSession sets it), or None."""
    return getattr(exc, "pve_request", None)


class PveApiError(ResourceException):
    """An error answer of the API, as proxmoxer's ResourceException (same fields and text) plus the request.

    ``pve_message``: PVE's own error text (its message's first line, the status line, and ``errors``)."""

    def __init__(self, request, response):
        body = {}
        try:
            body = json.loads(response.text or "null") or {}
        except ValueError:
            pass
        errors = body.get("errors") if isinstance(body, dict) else None
        status = response.status_code
        super().__init__(status, http_client.responses.get(status, ANYEVENT_HTTP_STATUS_TEXTS.get(status)),
                         response.reason or "", errors=errors)
        self.pve_request = request
        text = (response.reason or "").strip()
        if isinstance(errors, dict) and errors:
            text += " - %s" % ", ".join("%s: %s" % (key, str(value).strip()) for key, value in sorted(errors.items()))
        self.pve_message = text


def connection_never_made(exc):
    """True when a requests error says the connection was never made, so the request was not sent."""
    if isinstance(exc, ConnectTimeout):
        return True
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError)


class RetryingSession:
    """Wraps proxmoxer's requests session: every request of the client goes through ``request()``.

    Repeats a request on a transient fault where that is safe (see the module's docstring), and raises, for an error
    answer, a PveApiError instead of proxmoxer's bare ResourceException; every exception it lets through carries the
    ApiRequest as ``pve_request``.
    """

    def __init__(self, session, delays=None, sleep=None):
        self._session = session
        self._delays = RETRY_DELAYS if delays is None else tuple(delays)
        self._sleep = sleep or pause

    def __getattr__(self, name):
        return getattr(self._session, name)

    def _again(self, request, may_repeat):
        request.elapsed = time.monotonic() - request.started
        if not may_repeat or request.attempts > len(self._delays):
            return False
        self._sleep(self._delays[request.attempts - 1])
        return True

    def request(self, method, url, *args, **kwargs):
        request = ApiRequest.from_url(method, url, kwargs.get("data"))
        while True:
            request.attempts += 1
            try:
                response = self._session.request(method, url, *args, **kwargs)
            except (SSLError, Timeout) as exc:
                # A certificate that does not verify stays so; a node that did not answer within api_timeout is not
                # waited on again. A connect timeout sent nothing.
                request.sent = not connection_never_made(exc)
                request.elapsed = time.monotonic() - request.started
                exc.pve_request = request
                raise
            except (RequestsConnectionError, ChunkedEncodingError) as exc:
                request.sent = not connection_never_made(exc)
                if self._again(request, request.idempotent or not request.sent):
                    continue
                exc.pve_request = request
                raise
            status = response.status_code
            if status in RETRY_STATUSES:
                if self._again(request, request.idempotent or status in NOT_DELIVERED_STATUSES):
                    continue
                request.sent = status not in NOT_DELIVERED_STATUSES
            request.elapsed = time.monotonic() - request.started
            if status >= 400:
                raise PveApiError(request, response)
            return response


def pve_api_argument_spec(required=True):
    """The connection options, as documented by the doc fragment llmops.serving.pve_api.

    ``required=False`` for a module that talks to the API only in some modes; it then checks api_host itself.
    """
    return dict(
        api_host=dict(type="str", required=required),
        api_port=dict(type="int", default=8006),
        api_user=dict(type="str", required=required),
        api_password=dict(type="str", no_log=True),
        api_token_id=dict(type="str", no_log=False),
        api_token_secret=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        api_timeout=dict(type="int", default=30),
    )


def api_url(params):
    return "https://%s:%d" % (params["api_host"], params["api_port"])


def require_positive_seconds(params, names):
    for name in names:
        if params[name] < 1:
            raise PveFailure("%s must be at least 1 second, got %d" % (name, params[name]))


def require_ca_path(params):
    """Fail when ``ca_path`` is given but cannot be read here.

    requests raises a bare OSError for it ('Could not find a suitable TLS CA certificate bundle, invalid path: ...'),
    which no RequestException clause catches: the module would end in a traceback instead of a message.
    """
    path = params["ca_path"]
    if not (params["validate_certs"] and path):
        return
    if not os.path.exists(path):
        reason = "does not exist"
    elif not os.access(path, os.R_OK):
        reason = "cannot be read by this user"
    else:
        return
    raise PveFailure(
        "ca_path %s %s on %s, where this module runs and verifies the API's certificate: copy the cluster's CA "
        "there from any node (/etc/pve/pve-root-ca.pem), or leave ca_path empty to verify with the system's CAs" % (
            path, reason, socket.gethostname()))


def _login_status(exc):
    """The HTTP status of a failed login: proxmoxer's AuthenticationError says ``... code: 503``."""
    match = re.search(r"code: (\d+)", str(exc))
    return int(match.group(1)) if match else None


def connect(params, delays=None, sleep=None):
    """A proxmoxer client for the connection options in ``params``; a ticket is requested at once with a password.

    Every request of the client goes through RetryingSession. The login (POST /access/ticket, which changes nothing
    on the node) is repeated like a GET: on a status of RETRY_STATUSES and on a dropped connection.
    """
    if ProxmoxAPI is None:
        raise PveFailure(missing_required_lib("proxmoxer"), exception=PROXMOXER_IMPORT_ERROR)
    require_ca_path(params)
    verify = params["validate_certs"]
    if verify and params["ca_path"]:
        verify = params["ca_path"]
    auth = {"user": params["api_user"]}
    if params["api_token_id"]:
        auth.update(token_name=params["api_token_id"], token_value=params["api_token_secret"])
    else:
        auth["password"] = params["api_password"]
    delays = RETRY_DELAYS if delays is None else tuple(delays)
    sleep = sleep or pause
    # A ticket is signed, not stored: asking again changes nothing on the node.
    login = ApiRequest("POST", "/access/ticket", idempotent=True, what="the login of %s" % params["api_user"])
    while True:
        login.attempts += 1
        try:
            api = ProxmoxAPI(params["api_host"], port=params["api_port"], verify_ssl=verify, timeout=params["api_timeout"], **auth)
            break
        except AuthenticationError as exc:
            status = _login_status(exc)
            login.elapsed = time.monotonic() - login.started
            if status in RETRY_STATUSES and login.attempts <= len(delays):
                sleep(delays[login.attempts - 1])
                continue
            if status is not None and status >= 500:
                reason = http_client.responses.get(status, ANYEVENT_HTTP_STATUS_TEXTS.get(status, ""))
                raise ApiUnavailable(
                    "the Proxmox API at %s answered %s with %d %s%s: the node's API is not serving, which says nothing "
                    "about the password; check pveproxy and pvedaemon on the node (`systemctl status pveproxy "
                    "pvedaemon`)" % (api_url(params), login.named(), status, reason, login.tries())) from None
            raise
        except (SSLError, Timeout):
            raise
        except (RequestsConnectionError, ChunkedEncodingError) as exc:
            login.elapsed = time.monotonic() - login.started
            login.sent = not connection_never_made(exc)
            if login.attempts <= len(delays):
                sleep(delays[login.attempts - 1])
                continue
            exc.pve_request = login
            raise
    store = getattr(api, "_store", None)
    if isinstance(store, dict) and "session" in store:
        # proxmoxer's resources copy the root's store: wrapped here, before any resource is made.
        store["session"] = RetryingSession(store["session"], delays, sleep)
    return api


def describe_request_failure(exc, params=None):
    """What a failed request met, naming the request (for api_errors and the task wait); None when the exception does
    not come from a request of a client made by connect()."""
    request = request_of(exc)
    if request is None:
        return None
    where = "the Proxmox API at %s" % api_url(params) if params else "the Proxmox API"
    if isinstance(exc, ResourceException):
        text = getattr(exc, "pve_message", None) or exc.content
        message = "%s answered %s %s: %s%s" % (request.named(), exc.status_code, exc.status_message, text, request.tries())
        if not request.idempotent and request.sent and exc.status_code in RETRY_STATUSES:
            message += request.unknown_effect()
        return message
    if isinstance(exc, Timeout) and not isinstance(exc, ConnectTimeout):
        timeout = " within api_timeout=%d s" % params["api_timeout"] if params else ""
        message = "%s: %s did not answer%s (%s)" % (request.named(), where, timeout, exc)
    elif isinstance(exc, SSLError):
        return "%s: the TLS connection to %s failed (%s)" % (request.named(), where, exc)
    elif not request.sent:
        return "%s: cannot reach %s (%s)%s" % (request.named(), where, exc, request.tries())
    else:
        message = "%s: the connection to %s was dropped before an answer came (%s)%s" % (
            request.named(), where, exc, request.tries())
    if not request.idempotent and request.sent:
        message += request.unknown_effect()
    return message


@contextlib.contextmanager
def api_errors(params, subject):
    """Turn proxmoxer's and requests' exceptions inside the block into a PveFailure that names the cause.

    ``subject`` names what the requests were about in an API error, for example ``CT 120 on node pve1``; the message
    names the request (method and API path) when the client came from connect().
    """
    try:
        yield
    except AuthenticationError as exc:
        raise PveFailure("authentication to the Proxmox API at %s as %s failed: %s" % (api_url(params), params["api_user"], exc)) from None
    except ApiUnavailable as exc:
        raise PveFailure("Proxmox API error for %s: %s" % (subject, exc)) from None
    except (ResourceException, RequestException) as exc:
        described = describe_request_failure(exc, params)
        if described:
            raise PveFailure("Proxmox API error for %s: %s" % (subject, described)) from None
        if isinstance(exc, ResourceException):
            raise PveFailure("Proxmox API error for %s: %s" % (subject, exc)) from None
        if isinstance(exc, Timeout):
            raise PveFailure("the Proxmox API at %s did not answer within api_timeout=%d s: %s" % (api_url(params), params["api_timeout"], exc)) from None
        raise PveFailure("cannot reach the Proxmox API at %s: %s" % (api_url(params), exc)) from None


def wait_for_upid(api, node, upid, timeout, description, tasks=None):
    """Wait on the task ``upid`` of ``node`` until it stops (pve_task.wait_for_task); append it to ``tasks``.

    A task that fails (or still runs after ``timeout`` seconds) raises PveFailure with ``task_exitstatus`` and
    ``task_log_tail``. So does a status poll that fails (after RetryingSession's attempts): the task is then neither
    done nor failed as far as this run knows, and the message says how to find out.
    """
    task = api.nodes(node).tasks(upid)

    def get_log(start, limit):
        try:
            return task.log.get(start=start, limit=limit)
        except (ResourceException, RequestException) as exc:
            # The log only explains; a log that cannot be read must not hide what the status said.
            return [{"t": "(the task log could not be read: %s)" % (describe_request_failure(exc) or exc)}]

    try:
        status = wait_for_task(task.status.get, get_log, upid, timeout, description)
    except TaskError as exc:
        if tasks is not None:
            tasks.append({"upid": upid, "exitstatus": exc.exitstatus})
        raise PveFailure(str(exc), task_exitstatus=exc.exitstatus, task_log_tail=exc.log_tail) from None
    except (ResourceException, RequestException) as exc:
        if tasks is not None:
            tasks.append({"upid": upid, "exitstatus": None})
        tail = log_tail(get_log)
        raise PveFailure(status_unknown(upid, description, describe_request_failure(exc) or str(exc), tail),
                         task_exitstatus=None, task_log_tail=tail) from None
    if tasks is not None:
        tasks.append({"upid": upid, "exitstatus": "OK"})
    return status


def require_root_for_devices(params, entries):
    """Fail before any request when Proxmox would refuse dev[n] ``entries`` to these credentials.

    Only root@pam authenticated with a password (a ticket) may set them; an API token never may, whoever owns it.
    """
    if not entries:
        return
    if params["api_token_id"] or params["api_token_secret"]:
        reason = "an API token is never root@pam, even one owned by root@pam (it authenticates as %s!%s)" % (
            params["api_user"] or "root@pam", params["api_token_id"] or "<tokenid>")
    elif params["api_user"] != "root@pam":
        reason = "api_user is %s" % (params["api_user"] or "not set")
    elif not params["api_password"]:
        reason = "api_user=root@pam was given without api_password"
    else:
        return
    raise PveFailure(ROOT_ONLY_MSG.format(reason=reason, entries=", ".join(entries)))
