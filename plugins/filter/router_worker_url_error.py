# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: router_worker_url_error
short_description: Why a URL cannot be a worker of the SGLang router, or null
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns null for a URL the role C(llmops.serving.sglang_router) accepts as a worker (C(http) or C(https), a DNS
    name, an IPv4 address or a bracketed IPv6 address, an explicit port, no path, query, fragment or user information),
    else a short message saying what is wrong.
  - Whitespace and control characters are refused, because the worker list is rendered into the router's systemd unit.
  - The same check the module M(llmops.serving.sglang_router_workers) applies to its O(llmops.serving.sglang_router_workers#module:workers).
options:
  _input:
    description: The URL.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Refuse a worker URL with a path
  ansible.builtin.assert:
    that: "'http://10.0.0.5:30000/v1' | llmops.serving.router_worker_url_error is none"
"""

RETURN = r"""
_value:
  description: Null when the URL is accepted, else the reason.
  type: str
"""

from ansible_collections.llmops.serving.plugins.module_utils.sglang_router import worker_url_error


class FilterModule:
    def filters(self):
        return {"router_worker_url_error": worker_url_error}
