# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTPS API server: routing, authentication and PVE's reply format.

Replies are ``{"data": ...}``; errors carry PVE's status line (``HTTP/1.1 400 Parameter verification
failed.``), ``{"data": null, "message": "...\\n", "errors": {...}}`` as pve-http-server formats them.
Authentication failures are ``401 No ticket`` / ``401 Authentication failed!`` with an empty body,
as pve-manager's auth_handler answers them; a failed login is ``401 authentication failure``.
The fault rules of pve_sim.faults (5xx answers, reset connections) act on a request before anything else.
"""
from __future__ import annotations

import io
import json
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

from pve_sim import faults, schema
from pve_sim.auth import AuthError, PermissionDenied
from pve_sim.node import ApiError

API_PREFIX = "/api2/json"
_VMID = r"(?P<vmid>[^/]+)"
_NODE = r"(?P<node>[^/]+)"
# (method, path regex, Node method name, whether an API token may call it)
ROUTES = [
    ("GET", r"/version", "version", True),
    ("GET", r"/cluster/nextid", "nextid", True),
    ("GET", r"/cluster/resources", "cluster_resources", True),
    ("GET", r"/nodes", "nodes", True),
    ("GET", r"/nodes/%s/status" % _NODE, "node_status", True),
    ("GET", r"/nodes/%s/lxc" % _NODE, "lxc_list", True),
    ("POST", r"/nodes/%s/lxc" % _NODE, "create", True),
    ("GET", r"/nodes/%s/lxc/%s" % (_NODE, _VMID), "ct_index", True),
    ("DELETE", r"/nodes/%s/lxc/%s" % (_NODE, _VMID), "destroy", True),
    ("GET", r"/nodes/%s/lxc/%s/config" % (_NODE, _VMID), "get_config", True),
    ("PUT", r"/nodes/%s/lxc/%s/config" % (_NODE, _VMID), "update_config", True),
    ("GET", r"/nodes/%s/lxc/%s/status/current" % (_NODE, _VMID), "status_current", True),
    ("POST", r"/nodes/%s/lxc/%s/status/(?P<action>start|stop|shutdown|reboot)" % (_NODE, _VMID), "power", True),
    ("GET", r"/nodes/%s/tasks/(?P<upid>[^/]+)/status" % _NODE, "task_status", True),
    ("GET", r"/nodes/%s/tasks/(?P<upid>[^/]+)/log" % _NODE, "task_log", True),
    ("GET", r"/nodes/%s/storage/(?P<storage>[^/]+)/content" % _NODE, "storage_content", True),
]
_COMPILED = [(method, re.compile("^%s$" % pattern), name, token_ok) for method, pattern, name, token_ok in ROUTES]


def ensure_certificate(state_dir, hostname="pve"):
    """A self-signed certificate under STATE/etc/pve/local (made once with openssl); returns (cert, key, sha256 fingerprint)."""
    directory = os.path.join(state_dir, "etc", "pve", "local")
    os.makedirs(directory, exist_ok=True)
    cert = os.path.join(directory, "pve-ssl.pem")
    key = os.path.join(directory, "pve-ssl.key")
    if not (os.path.exists(cert) and os.path.exists(key)):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "3650",
                        "-subj", "/OU=PVE Cluster Node/O=Proxmox Virtual Environment/CN=%s" % hostname,
                        "-addext", "subjectAltName=DNS:localhost,DNS:%s,IP:127.0.0.1,IP:::1" % hostname],
                       check=True, capture_output=True, timeout=60)
        os.chmod(key, 0o600)
    output = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-fingerprint", "-sha256"], check=True, capture_output=True,
                            text=True, timeout=30).stdout
    return cert, key, output.strip().split("=", 1)[1]


class ApiHandler(BaseHTTPRequestHandler):
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if self.server.access_log:
            sys.stderr.write("%s - - [%s] %s\n" % (self.address_string(), self.log_date_time_string(), format % args))

    # -- plumbing ----------------------------------------------------------------------------------

    def _reply(self, status, reason, body):
        if getattr(self, "_reset_instead_of_reply", False):
            self._reset()
            return
        payload = b"" if body is None else json.dumps(body).encode("utf-8")
        self.send_response(status, reason)
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.send_header("Expires", self.date_time_string())
        if body is not None:
            self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status, message, errors=None):
        body = {"data": None, "message": message.rstrip("\n") + "\n"}
        if errors:
            body["errors"] = errors
        self._reply(status, message.split("\n", 1)[0], body)

    def _params(self):
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            raw = self.rfile.read(length).decode("utf-8")
            if (self.headers.get("Content-Type") or "").startswith("application/json"):
                try:
                    body = json.loads(raw or "{}")
                except ValueError:
                    body = {}
                params.update((key, _scalar(value)) for key, value in body.items())
            else:
                params.update(parse_qsl(raw, keep_blank_values=True))
        return params

    def _cookie(self, name):
        for part in (self.headers.get("Cookie") or "").split(";"):
            key, _sep, value = part.strip().partition("=")
            if key == name:
                return unquote(value)
        return None

    def _authenticate(self, method):
        store = self.server.auth
        auth_header = self.headers.get("Authorization") or ""
        ticket = self._cookie("PVEAuthCookie")
        if not ticket and auth_header.startswith("PVEAuthCookie="):
            ticket = unquote(auth_header.split("=", 1)[1])
        if not ticket and auth_header.startswith("PVEAPIToken="):
            return store.verify_api_token(auth_header[len("PVEAPIToken="):].strip())
        if not ticket:
            raise AuthError("No ticket")
        identity = store.verify_ticket(ticket)
        if method != "GET":
            store.verify_csrf(identity.userid, self.headers.get("CSRFPreventionToken"))
        return identity

    def _reset(self):
        """Reset the connection (TCP RST: SO_LINGER 0, then close), with no answer; the handler ends with it."""
        self.close_connection = True
        self._reset_instead_of_reply = False
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # The socket closes for real (RST, not the FIN of a shutdown) only when its file objects are closed too;
            # what the handler writes after this goes nowhere.
            self.rfile.close()
            self.wfile.close()
            self.wfile = io.BytesIO()
            self.connection.close()
        except OSError:
            pass

    def _fault(self, method, rel):
        """Apply the fault rule (pve_sim.faults) for this request, if one is live; True when the request ends here."""
        rule = faults.take_request(self.server.node.state_dir, method, rel)
        if rule is None:
            return False
        if rule.get("reset") == "after":
            self._reset_instead_of_reply = True
            return False
        if rule.get("reset") == "before":
            self._reset()
        elif rule["status"] >= faults.NO_BODY_FROM:
            self._reply(rule["status"], rule["message"], None)
        else:
            self._error(rule["status"], rule["message"])
        return True

    def _handle(self, method):
        self._reset_instead_of_reply = False
        try:
            self._dispatch(method)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _dispatch(self, method):
        path = unquote(urlsplit(self.path).path)
        if not path.startswith(API_PREFIX + "/") and path != API_PREFIX:
            self._reply(501, "no such uri", None)
            return
        rel = path[len(API_PREFIX):].rstrip("/") or "/"
        params = self._params()
        node = self.server.node
        if self._fault(method, rel):
            return
        if rel == "/access/ticket":
            if method == "GET":
                self._reply(200, "OK", {"data": None})
                return
            if method == "POST":
                self._login(params)
                return
        try:
            identity = self._authenticate(method)
        except AuthError as error:
            if self.server.auth_failure_delay:
                time.sleep(self.server.auth_failure_delay)
            self._reply(401, str(error), None)
            return
        for route_method, pattern, name, token_ok in _COMPILED:
            match = pattern.match(rel)
            if not match or route_method != method:
                continue
            try:
                if identity.is_token and not token_ok:
                    raise PermissionDenied("URI '%s' not available with API token, need proper ticket." % rel)
                data = self._call(node, name, identity, params, match.groupdict())
            except PermissionDenied as error:
                self._error(403, str(error))
            except schema.ParamError as error:
                self._error(400, "Parameter verification failed.", error.errors)
            except ApiError as error:
                self._error(error.status, error.message, error.errors)
            except Exception as error:  # pylint: disable=broad-except
                # As PVE: any other failure of a method is a 500 with its message.
                self._error(500, "%s" % error)
            else:
                self._reply(200, "OK", {"data": data})
            return
        self._error(501, "Method '%s %s' not implemented" % (method, rel))

    @staticmethod
    def _call(node, name, identity, params, groups):
        arguments = {}
        if "node" in groups:
            arguments["node"] = groups["node"]
            if params.get("node") not in (None, groups["node"]):
                raise schema.ParamError({"node": "duplicate parameter (already defined in URI) with conflicting values!"})
            params.pop("node", None)
        if "vmid" in groups:
            vmid = groups["vmid"]
            if params.get("vmid") not in (None, vmid):
                raise schema.ParamError({"vmid": "duplicate parameter (already defined in URI) with conflicting values!"})
            params.pop("vmid", None)
            schema.verify({"vmid": vmid}, {"vmid": schema.VMID})
            arguments["vmid"] = int(vmid)
        for key in ("upid", "storage", "action"):
            if key in groups:
                arguments[key] = groups[key]
        if name == "ct_index":
            node.check_node(arguments["node"])
            node.load_config(arguments["vmid"])
            subdirs = ("config", "status", "vncproxy", "termproxy", "vncwebsocket", "spiceproxy", "migrate", "clone", "rrd", "rrddata",
                       "firewall", "snapshot", "resize", "interfaces", "pending")
            return [{"subdir": item} for item in subdirs]
        return getattr(node, name)(identity, params, **arguments)

    def _login(self, params):
        try:
            schema.verify(params, {"username": schema._str(max_length=64), "password": schema._str(),  # pylint: disable=protected-access
                                   "realm": schema._str(max_length=32), "otp": schema._str(),  # pylint: disable=protected-access
                                   "new-format": schema._bool(), "path": schema._str(), "privs": schema._str(),  # pylint: disable=protected-access
                                   "tfa-challenge": schema._str()}, ("username", "password"))  # pylint: disable=protected-access
        except schema.ParamError as error:
            self._error(400, "Parameter verification failed.", error.errors)
            return
        try:
            data = self.server.auth.login(params["username"], params["password"], params.get("realm"))
        except AuthError as error:
            if self.server.auth_failure_delay:
                time.sleep(self.server.auth_failure_delay)
            self._error(401, str(error))
            return
        self._reply(200, "OK", {"data": data})

    def do_GET(self):  # pylint: disable=invalid-name
        self._handle("GET")

    def do_POST(self):  # pylint: disable=invalid-name
        self._handle("POST")

    def do_PUT(self):  # pylint: disable=invalid-name
        self._handle("PUT")

    def do_DELETE(self):  # pylint: disable=invalid-name
        self._handle("DELETE")


def _scalar(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, node, auth, cert, key, auth_failure_delay=0.0, access_log=False):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, ApiHandler)
        self.node = node
        self.auth = auth
        self.auth_failure_delay = auth_failure_delay
        self.access_log = access_log
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        # The TLS handshake happens in the request thread, so a stalled client cannot block accept().
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)


def serve_in_thread(server):
    thread = threading.Thread(target=server.serve_forever, name="pve-sim-api", daemon=True)
    thread.start()
    return thread
