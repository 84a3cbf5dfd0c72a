# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The API key and sglang_verify (issue #12, class 4): the probe still authenticates with the key, and neither any result
of the converge (sglang_service + sglang_verify, registered or not, passed or failed) nor the JSON summary carries it -
also when the readiness wait fails on a server whose log prints the key in its server_args line."""

from __future__ import annotations

import base64
import json
import shlex

from verify_checks import converge, with_fault

# The scenario's key (molecule.yml).
API_KEY = "verify-secret-key"


def everything_said(run, summary):
    return json.dumps(run.output) + run.stdout + run.stderr + json.dumps(summary)


def command_lines_holding(host, needle):
    """The /proc/<pid>/cmdline files that contain ``needle``, searched by a command that carries it base64-encoded."""
    script = ("import base64, glob\nneedle = base64.b64decode(%r)\nfor path in glob.glob('/proc/[0-9]*/cmdline'):\n"
              "    try:\n        data = open(path, 'rb').read()\n    except OSError:\n        continue\n"
              "    if needle in data:\n        print(path)\n" % base64.b64encode(needle.encode()).decode())
    return host.check_output("python3 -c %s" % shlex.quote(script)).split()


def test_a_failed_verification_copies_no_key_into_its_results_or_summary():
    run, summary = converge(with_fault("oom"))
    assert run.rc != 0 and summary and summary["status"] == "failed", run.summary()
    assert summary["message"], "the failed step's message is in the summary"
    assert API_KEY not in everything_said(run, summary)


def test_a_passed_verification_probes_with_the_key_and_shows_it_nowhere(host):
    run, summary = converge()
    assert run.rc == 0, run.summary()
    assert summary["status"] == "passed" and summary["probe_verdict"] == "healthy", summary
    probes = run.task_results("Probe the output for degeneration and tell a sampling loop from a draft-path problem")
    assert probes and not probes[0].get("failed"), "the probe authenticated with the key"
    assert API_KEY not in everything_said(run, summary)
    # The server it verified holds the key, but not in its command line (readable by every local user).
    assert command_lines_holding(host, "--served-model-name"), "the search finds the server's command line"
    assert command_lines_holding(host, API_KEY) == []
