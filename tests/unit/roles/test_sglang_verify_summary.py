# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_verify's summary copies the failed step's message: the API key never reaches it, whether a check quoted it
literally, in SGLang's server_args line or in a command line."""

from __future__ import annotations

import json

from ansible_collections.llmops.serving.tests.unit.roles.templar import render_file

KEY = "sk-verify-S3cret"
MESSAGES = [
    "the log says: [2026-01-01 00:00:00] server_args={'api_key': '%s', 'port': 30000}" % KEY,
    "/opt/sglang/venv/bin/python -m sglang.launch_server --api-key %s --port 30000" % KEY,
    "POST /v1/chat/completions with Authorization: Bearer %s returned 500" % KEY,
    "the key %s was refused" % KEY,
]


def summary(message):
    variables = {
        "inventory_hostname": "h", "sglang_verify_instance": "q", "_sglang_verify_unit": "sglang-q.service",
        "sglang_verify_probe_mode": "thinking_general", "sglang_verify_api_key": KEY,
        "_sglang_verify_failure": {"task": "Wait for the current invocation to be ready", "msg": message},
    }
    return render_file("roles/sglang_verify/templates/summary.json.j2", variables)


def test_the_summary_never_carries_the_api_key():
    for message in MESSAGES:
        rendered = summary(message)
        text = rendered if isinstance(rendered, str) else json.dumps(rendered)
        assert KEY not in text, text
        assert "********" in text
