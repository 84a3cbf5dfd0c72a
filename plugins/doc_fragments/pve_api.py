# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The Proxmox VE API connection options of module_utils.pve_api (pve_api_argument_spec)."""

    DOCUMENTATION = r"""
options:
  api_host:
    description: Host name or address of the Proxmox VE API.
    type: str
    required: true
  api_port:
    description: Port of the API.
    type: int
    default: 8006
  api_user:
    description:
      - User to authenticate as, with realm (C(root@pam)). With O(api_token_id), the user that owns the token.
      - Only C(root@pam) with O(api_password) may set C(devN) entries; Proxmox refuses them to API tokens (even
        root@pam's) and to every other user, and the module fails before any request when that is the case.
    type: str
    required: true
  api_password:
    description: Password of O(api_user); a ticket is requested with it.
    type: str
  api_token_id:
    description:
      - Name of an API token of O(api_user) (the part after C(!)); used with O(api_token_secret) instead of a password.
    type: str
  api_token_secret:
    description: Secret of the API token O(api_token_id).
    type: str
  validate_certs:
    description: Verify the TLS certificate of the API.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA (or the self-signed certificate, C(/etc/pve/local/pve-ssl.pem) of the node) to verify the
        API's certificate with, instead of the system's CAs. Ignored when O(validate_certs=false).
    type: path
  api_timeout:
    description:
      - Timeout of each HTTP request in seconds (proxmoxer's own default of 5 s is too short for a busy node).
    type: int
    default: 30
notes:
  - Requests to the Proxmox VE API that meet a transient fault are sent again, at most 4 attempts with 0.5, 1 and 2 s
    between them, only where that is safe. A GET (reading changes nothing) and the login are sent again when the
    connection drops without an answer (reset, closed, a body cut short) and on 502, 503, 504 and 595-597 (a proxy in
    front of the API, or pveproxy's own connection to pvedaemon failing); never on 500, which is PVE's answer for a
    request it refused, nor after O(api_timeout).
  - A request that changes something (C(POST) create, start, stop, shutdown, reboot; C(PUT) of a config; C(DELETE)) is
    sent again only when it provably never reached the node (the connection was refused, or pveproxy answered 595).
    Otherwise the module fails at once and says that the request's effect is unknown and what to check on the node
    before running again (for example C(pct status 120) after a create whose answer was lost).
  - Every API failure names the node, the request (method and API path; never its parameters, a ticket or a token), the
    status with PVE's own error text, and the number of attempts.
"""
