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


def test_the_printed_summary_has_one_line_per_field_with_the_plan_and_the_server_sampling():
    summary_fields = {
        "status": "passed", "host": "h", "instance": "q", "unit": "sglang-q.service", "failed_step": None,
        "deployment_id": "d" * 64, "invocation_id": "i" * 32, "main_pid": 7, "log_file": "/var/log/x.log",
        "log_offset": 0, "ready_after_seconds": 0.03, "ready_noticed_after_line_seconds": None,
        "accept_length": {"mean": 2.9, "last": 3.2}, "acceptance_rate": {"mean": 0.63}, "gen_throughput": {"mean": 470},
        "probe_verdict": "healthy", "degenerate_samples": 0, "sampling_mode": "thinking_general",
        "sampling": {"temperature": 1.0},
        "memory_plan": {"summary": "fits (starts), but mamba: ...", "arithmetic": "0.5.23",
                        "serves_summary": "serves 3 of 16 requested running requests; the KV pool holds ...",
                        "comparison": {"max_mamba_cache_size": {"planned": 18, "actual": 18, "error": 0,
                                                                "relative_error": 0.0}}},
        "server_sampling": {"applied": ["temperature", "top_p"], "missing": ["presence_penalty"], "differs": {}},
        "serves": {"running_requests": 3, "requested_running_requests": 16, "source": "startup log"},
    }
    text = render_file("roles/sglang_verify/templates/summary.txt.j2",
                       {"sglang_verify_summary": summary_fields, "sglang_verify_num_draft_tokens": 4})
    lines = text.splitlines()
    assert "ready after:      0.03 s (it was ready before the wait)" in lines
    assert any(line.startswith("accept length:    2.9 of 4") for line in lines)
    assert "memory plan:      fits (starts), but mamba: ... (SGLang 0.5.23 arithmetic)" in lines
    assert "  max_mamba_cache_size   planned 18, actual 18, error 0 (0.0 %)" in lines
    assert ("serves:           serves 3 of 16 requested running requests; the KV pool holds ... (from the startup "
            "log)") in lines
    assert ("server applies:   temperature, top_p (chat requests that leave them out); clients must send: "
            "presence_penalty") in lines
