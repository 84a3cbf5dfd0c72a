# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Users, API tokens, tickets and CSRF tokens, as pve-access-control and pve-manager's HTTPServer use them.

users.json under the state dir holds users (password, privileges) and tokens (secret, privsep,
privileges). root@pam has every privilege; a token with privsep=1 has only its own privileges, with
privsep=0 its user's. A token is never root@pam: its identity is ``user@realm!tokenid``.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid

TICKET_LIFETIME = 7200
ALL_PRIVILEGES = (
    "VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options",
    "VM.PowerMgmt", "VM.Console", "Datastore.Audit", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Sys.Audit",
    "Sys.Modify", "Sys.Console", "SDN.Use",
)
# PVEVMAdmin plus what a deployment needs to see storage and nodes (what an operator grants an automation token).
AUTOMATION_PRIVILEGES = [
    "VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options",
    "VM.PowerMgmt", "VM.Console", "Datastore.Audit", "Datastore.AllocateSpace", "Sys.Audit", "SDN.Use",
]


class AuthError(Exception):
    """401: the status line text is the message."""


class PermissionDenied(Exception):
    """403 Permission check failed (...)."""

    def __init__(self, what=None):
        message = "Permission check failed"
        if what:
            message += " (%s)" % what
        super().__init__(message)


class Identity:
    """Who a request runs as: ``userid`` (user@realm or user@realm!token) and its privileges."""

    def __init__(self, userid, privileges, is_token=False, ticket=None):
        self.userid = userid
        self.privileges = set(privileges)
        self.is_token = is_token
        self.ticket = ticket

    @property
    def is_root(self):
        """PVE's ``$authuser eq 'root@pam'``: never true for a token."""
        return self.userid == "root@pam"

    def check(self, path, privileges, any_of=False):
        """rpcenv->check: raise 403 unless the identity holds the privileges (all of them, or any with any_of)."""
        if self.is_root:
            return
        held = [priv for priv in privileges if priv in self.privileges]
        if (any_of and held) or (not any_of and len(held) == len(privileges)):
            return
        raise PermissionDenied("%s, %s" % (path, ("|" if any_of else ", ").join(privileges)))


def default_users(root_password):
    return {
        "users": {
            "root@pam": {"password": root_password, "privileges": list(ALL_PRIVILEGES)},
            "auditor@pve": {"password": "auditor-" + secrets.token_hex(6), "privileges": ["VM.Audit", "Sys.Audit", "Datastore.Audit"]},
            "ops@pve": {"password": "ops-" + secrets.token_hex(6), "privileges": AUTOMATION_PRIVILEGES},
        },
        "tokens": {
            "root@pam!ansible": {"secret": str(uuid.uuid4()), "privsep": 1, "privileges": AUTOMATION_PRIVILEGES},
        },
    }


class AuthStore:
    """The users file and the ticket signing key of one state dir."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, "users.json")
        key_path = os.path.join(state_dir, "authkey.key")
        if not os.path.exists(key_path):
            with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
                handle.write(secrets.token_hex(32))
        with open(key_path, encoding="utf-8") as handle:
            self.key = handle.read().strip().encode()
        with open(self.path, encoding="utf-8") as handle:
            self.data = json.load(handle)

    @staticmethod
    def initialise(state_dir, root_password=None):
        """Create users.json (once) and root's password file; returns the password of root@pam."""
        path = os.path.join(state_dir, "users.json")
        password_path = os.path.join(state_dir, "root-password")
        if not os.path.exists(path):
            password = root_password or secrets.token_urlsafe(12)
            data = default_users(password)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True)
            with open(os.open(password_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
                handle.write(password + "\n")
            token_path = os.path.join(state_dir, "token-root@pam!ansible")
            with open(os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
                handle.write(data["tokens"]["root@pam!ansible"]["secret"] + "\n")
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)["users"]["root@pam"]["password"]

    # -- tickets -----------------------------------------------------------------------------------

    def _sign(self, text):
        return base64.b64encode(hmac.new(self.key, text.encode(), hashlib.sha256).digest()).decode()

    def login(self, username, password, realm=None):
        """POST /access/ticket: the answer's data, or AuthError('authentication failure')."""
        if realm and "@" not in username:
            username = "%s@%s" % (username, realm)
        user = self.data["users"].get(username)
        if password.startswith("PVE:"):
            # A valid ticket is accepted as the password (ticket renewal, as proxmoxer does it).
            identity = self.verify_ticket(password)
            if identity.userid != username:
                raise AuthError("authentication failure")
        elif user is None or not hmac.compare_digest(str(user.get("password", "")), password):
            raise AuthError("authentication failure")
        stamp = "%08X" % int(time.time())
        plain = "PVE:%s:%s" % (username, stamp)
        ticket = "%s::%s" % (plain, self._sign(plain))
        return {"username": username, "ticket": ticket, "CSRFPreventionToken": self.csrf_token(username, stamp),
                "cap": {}, "clustername": None}

    def csrf_token(self, username, stamp=None):
        stamp = stamp or "%08X" % int(time.time())
        return "%s:%s" % (stamp, self._sign("CSRF:%s:%s" % (username, stamp)).rstrip("="))

    def verify_ticket(self, ticket):
        try:
            plain, signature = ticket.rsplit("::", 1)
            prefix, username, stamp = plain.split(":", 2)
            issued = int(stamp, 16)
        except ValueError:
            raise AuthError("Authentication failed!") from None
        if prefix != "PVE" or not hmac.compare_digest(self._sign(plain), signature):
            raise AuthError("Authentication failed!")
        if time.time() - issued > TICKET_LIFETIME or username not in self.data["users"]:
            raise AuthError("Authentication failed!")
        return Identity(username, self.data["users"][username].get("privileges", []), ticket=ticket)

    def verify_csrf(self, username, token):
        if not token or ":" not in token:
            raise AuthError("Permission denied - invalid csrf token")
        stamp = token.split(":", 1)[0]
        if not hmac.compare_digest(self.csrf_token(username, stamp), token):
            raise AuthError("Permission denied - invalid csrf token")

    def verify_api_token(self, value):
        """``user@realm!tokenid=secret`` (PVE's separator is '=')."""
        try:
            tokenid, secret = value.split("=", 1)
            username = tokenid.split("!", 1)[0]
        except ValueError:
            raise AuthError("Authentication failed!") from None
        token = self.data["tokens"].get(tokenid)
        if token is None or not hmac.compare_digest(str(token["secret"]), secret) or username not in self.data["users"]:
            raise AuthError("Authentication failed!")
        if token.get("privsep", 1):
            privileges = token.get("privileges", [])
        else:
            privileges = self.data["users"][username].get("privileges", [])
        return Identity(tokenid, privileges, is_token=True)
