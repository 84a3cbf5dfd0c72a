# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: authentication_errors
short_description: What is wrong with a listener's authentication decision, as messages that name the fix
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "An empty API key means a server that anyone who reaches its port can use. That must be a decision written in the
    inventory (C(<prefix>_authentication: none)), never the result of an unset environment variable, and it is only
    taken on a loopback address: a listener beyond loopback always needs a key."
  - The one policy the server (sglang_service) and the router (sglang_router) apply. The messages never contain the key.
options:
  _input:
    description: "C(authentication) (C(api_key) or C(none)), C(api_key) (the key, possibly empty) and C(host) (the
      address the listener binds)."
    type: dict
    required: true
  prefix:
    description: The variables' prefix the messages name (C(sglang_service), C(sglang_router)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check that the server's authentication is a decision
  ansible.builtin.assert:
    that: _errors | length == 0
    fail_msg: "{{ _errors | join('; ') }}"
  vars:
    _errors: >-
      {{ {'authentication': sglang_service_authentication, 'api_key': sglang_service_api_key,
          'host': sglang_service_host} | llmops.serving.authentication_errors('sglang_service') }}
"""

RETURN = r"""
_value:
  description: One message per problem; empty when the decision is consistent.
  type: list
  elements: str
"""

import ipaddress

from ansible.errors import AnsibleFilterError

CHOICES = ("api_key", "none")


def is_loopback(host):
    """Only an address that cannot be reached from another machine: 127.0.0.0/8, ::1 or the name localhost. Any other
    name could resolve to anything, and 0.0.0.0 / :: listen everywhere."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return False
    # ::ffff:127.0.0.1 binds 127.0.0.1 only; Python before 3.13 does not call it loopback.
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def authentication_errors(settings, prefix):
    if not isinstance(settings, dict) or not isinstance(prefix, str):
        raise AnsibleFilterError("authentication_errors expects a mapping and the variables' prefix")
    mode, key, host = settings.get("authentication"), settings.get("api_key"), settings.get("host")
    if mode not in CHOICES:
        return ["%s_authentication must be one of %s, not %r" % (prefix, ", ".join(CHOICES), mode)]
    if not isinstance(key, str) or not isinstance(host, str):
        return ["%s_api_key and %s_host must be strings" % (prefix, prefix)]
    if mode == "api_key" and not key:
        return ["%s_api_key is empty, so the listener on %s would accept anyone who reaches it: set the key (an "
                "environment variable that a lookup reads is empty when it is unset), or set %s_authentication: none "
                "to run without authentication on a loopback address" % (prefix, host, prefix)]
    if mode == "none" and key:
        return ["%s_authentication is none but %s_api_key is set: remove the key or set %s_authentication: api_key"
                % (prefix, prefix, prefix)]
    if mode == "none" and not is_loopback(host):
        return ["%s_authentication: none is refused on %s, which is not a loopback address: a listener other machines "
                "can reach always needs %s_api_key" % (prefix, host, prefix)]
    return []


class FilterModule:
    def filters(self):
        return {"authentication_errors": authentication_errors}
