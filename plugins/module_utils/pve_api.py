# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox VE API client of the collection's modules, in the spirit of community.proxmox's module_utils/proxmox.py.

One owner for: the connection options (argument spec, their rules, doc fragment ``llmops.serving.pve_api``),
``connect()`` with proxmoxer, the translation of proxmoxer/requests errors into messages that name the cause, the wait
on a task by its UPID (pve_task.wait_for_task on the API's status and log) and the rule that only root@pam with a
password may set dev[n] entries.

Differences from community.proxmox 1.4.0 (why it is not used): each HTTP request has a timeout (``api_timeout``,
30 s; proxmoxer's default of 5 s is too short for a busy node), a CA file can verify the node's certificate
(``ca_path``), and a task that fails fails the module at once with its exit status and last log lines.
"""

from __future__ import annotations

import contextlib
import os
import socket
import traceback

from ansible.module_utils.basic import missing_required_lib
from ansible_collections.llmops.serving.plugins.module_utils.pve_task import TaskError, wait_for_task

PROXMOXER_IMPORT_ERROR = None
try:
    from proxmoxer import ProxmoxAPI
    from proxmoxer.core import AuthenticationError, ResourceException
    from requests.exceptions import RequestException, Timeout
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


class PveFailure(Exception):
    """A failure to report with fail_json: the message and extra result keys (``task_exitstatus``, ``exception``, ...)."""

    def __init__(self, message, **extra):
        super().__init__(message)
        self.extra = extra


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


def connect(params):
    """A proxmoxer client for the connection options in ``params``; a ticket is requested at once with a password."""
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
    return ProxmoxAPI(params["api_host"], port=params["api_port"], verify_ssl=verify, timeout=params["api_timeout"], **auth)


@contextlib.contextmanager
def api_errors(params, subject):
    """Turn proxmoxer's and requests' exceptions inside the block into a PveFailure that names the cause.

    ``subject`` names what the requests were about in an API error, for example ``CT 120 on node pve1``.
    """
    try:
        yield
    except AuthenticationError as exc:
        raise PveFailure("authentication to the Proxmox API at %s as %s failed: %s" % (api_url(params), params["api_user"], exc)) from None
    except ResourceException as exc:
        raise PveFailure("Proxmox API error for %s: %s" % (subject, exc)) from None
    except Timeout as exc:
        raise PveFailure("the Proxmox API at %s did not answer within api_timeout=%d s: %s" % (api_url(params), params["api_timeout"], exc)) from None
    except RequestException as exc:
        raise PveFailure("cannot reach the Proxmox API at %s: %s" % (api_url(params), exc)) from None


def wait_for_upid(api, node, upid, timeout, description, tasks=None):
    """Wait on the task ``upid`` of ``node`` until it stops (pve_task.wait_for_task); append it to ``tasks``.

    A task that fails (or still runs after ``timeout`` seconds) raises PveFailure with ``task_exitstatus`` and
    ``task_log_tail``.
    """
    task = api.nodes(node).tasks(upid)

    def get_log(start, limit):
        return task.log.get(start=start, limit=limit)

    try:
        status = wait_for_task(task.status.get, get_log, upid, timeout, description)
    except TaskError as exc:
        if tasks is not None:
            tasks.append({"upid": upid, "exitstatus": exc.exitstatus})
        raise PveFailure(str(exc), task_exitstatus=exc.exitstatus, task_log_tail=exc.log_tail) from None
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
