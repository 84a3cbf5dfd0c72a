# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""redact on SGLang's real server_args lines (data/sglang_server_args/README.md says where each comes from), on command
lines and on headers: every secret masked, everything else left as it was."""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils import test_sglang_log as verbatim

DATA = pathlib.Path(__file__).parent / "data" / "sglang_server_args"
REPO = pathlib.Path(__file__).parents[4]
API_KEY = "sk-llmops-test-0f3a9c2e"
ADMIN_KEY = "adm-llmops-test-7b1d"
MASK = redact.REDACTED


def server_args_0_5_23():
    """The dict form, as SGLang 0.5.23 printed it for --api-key and --admin-api-key."""
    return (DATA / "sglang-0.5.23-dict-with-keys.txt").read_text(encoding="utf-8").rstrip("\n")


def server_args_repr():
    """The older ServerArgs(...) repr, verbatim from SGLang's docs (api_key=None there)."""
    return (DATA / "sglang-docs-2025-01-23-serverargs.log").read_text(encoding="utf-8").rstrip("\n")


def parsed(line):
    """The mapping a server_args line prints (the dict literal after ``server_args=``)."""
    return ast.literal_eval(line[line.index("server_args=") + len("server_args="):])


def test_the_0_5_23_dict_form_loses_both_keys_and_nothing_else():
    line = server_args_0_5_23()
    assert API_KEY in line and ADMIN_KEY in line
    masked = redact.redact_text("[2026-11-29 19:45:02] " + line)
    assert API_KEY not in masked and ADMIN_KEY not in masked
    before, after = parsed(line), parsed(masked)
    assert (after["api_key"], after["admin_api_key"]) == (MASK, MASK)
    assert {key: value for key, value in after.items() if key not in ("api_key", "admin_api_key")} == {
        key: value for key, value in before.items() if key not in ("api_key", "admin_api_key")}
    assert after["ssl_keyfile_password"] is None, "None says that no password is set and stays visible"


def test_the_older_repr_form_without_a_key_is_left_as_it_is():
    line = server_args_repr()
    assert "api_key=None" in line
    assert redact.redact_text(line) == line


def test_the_older_repr_form_with_a_key_loses_it():
    # The verbatim line as a server started with --api-key prints it: the dataclass repr quotes the key.
    line = server_args_repr().replace("api_key=None", "api_key='%s'" % API_KEY)
    assert redact.redact_text(line) == server_args_repr().replace("api_key=None", "api_key='%s'" % MASK)


def test_a_line_cut_anywhere_shows_no_part_of_a_key():
    # Results quote lines shortened (500 characters); wherever the cut falls, no four characters of a key survive.
    line = server_args_0_5_23()
    start = line.index("'api_key'") - 2
    end = line.index(ADMIN_KEY) + len(ADMIN_KEY) + 2
    for cut in range(start, end):
        masked = redact.redact_text(line[:cut])
        for key in (API_KEY, ADMIN_KEY):
            shown = [key[:size] for size in range(4, len(key) + 1) if key[:size] in masked]
            assert not shown, (cut, masked[-60:])


def test_the_json_form_of_server_info():
    # /server_info returns the same fields as JSON, api_key in clear (reference/sglang.md).
    body = json.dumps(dict(parsed(server_args_0_5_23()), launch_command="sglang serve --api-key %s --port 30000" % API_KEY))
    masked = redact.redact_text(body)
    assert API_KEY not in masked and ADMIN_KEY not in masked
    decoded = json.loads(masked)
    assert decoded["api_key"] == MASK and decoded["launch_command"] == "sglang serve --api-key %s --port 30000" % MASK


@pytest.mark.parametrize("argv, shown", [
    (["sglang", "serve", "--api-key", API_KEY, "--port", "30000"], "sglang serve --api-key %s --port 30000" % MASK),
    (["sglang", "serve", "--api-key=" + API_KEY], "sglang serve --api-key=%s" % MASK),
    (["sglang", "serve", "--admin-api-key", ADMIN_KEY, "--enable-metrics"], "sglang serve --admin-api-key %s --enable-metrics" % MASK),
    (["sglang", "serve", "--ssl-keyfile", "/etc/k.pem", "--ssl-keyfile-password", "pw0rd"],
     "sglang serve --ssl-keyfile /etc/k.pem --ssl-keyfile-password %s" % MASK),
    (["sglang", "serve", "--ap", API_KEY], "sglang serve --ap %s" % MASK),
    (["sglang", "serve", "--api-key", "with spaces inside"], "sglang serve --api-key %s" % MASK),
    (["sglang", "serve", "--config", "/etc/llmops-serving/q/secrets.yaml"], "sglang serve --config /etc/llmops-serving/q/secrets.yaml"),
    (["curl", "-H", "Authorization: Bearer %s" % API_KEY, "http://127.0.0.1:30000/v1/models"],
     "curl -H Authorization: Bearer %s http://127.0.0.1:30000/v1/models" % MASK),
    (["env", "OPENAI_API_KEY=%s" % API_KEY, "python3", "client.py"], "env OPENAI_API_KEY=%s python3 client.py" % MASK),
])
def test_command_lines(argv, shown):
    assert redact.command_line(argv) == shown


def test_the_abbreviations_match_sglang_0_5_23s_own_option_list():
    # SGLang's parser allows abbreviations (allow_abbrev); the shortest prefix that names one option only is taken for it.
    # The option list is the one dumped from 0.5.23's real parser for the simulator.
    spec = json.loads((REPO / "simulators" / "sglang_sim" / "sglang_sim" / "sglang_0_5_23_args.json").read_text())
    assert spec["allow_abbrev"] is True
    options = {option for action in spec["actions"] for option in action.get("option_strings", []) if option.startswith("--")}
    for flag, shortest in redact.SECRET_FLAGS.items():
        assert flag in options
        unique = [flag[:size] for size in range(3, len(flag) + 1)
                  if not [other for other in options if other != flag and other.startswith(flag[:size])]]
        assert unique[0] == shortest, flag
        assert all(redact.is_secret_flag(prefix) for prefix in unique)
    assert not redact.is_secret_flag("--ssl-keyfile") and not redact.is_secret_flag("--a") and not redact.is_secret_flag("--port")


@pytest.mark.parametrize("text, shown", [
    ("Authorization: Bearer %s" % API_KEY, "Authorization: Bearer %s" % MASK),
    ("{'Authorization': 'Bearer %s', 'Accept': 'application/json'}" % API_KEY,
     "{'Authorization': 'Bearer %s', 'Accept': 'application/json'}" % MASK),
    ('"authorization": "Basic dXNlcjpwYXNz"', '"authorization": "Basic %s"' % MASK),
    ("X-Api-Key: %s" % API_KEY, "X-Api-Key: %s" % MASK),
    ("GET http://admin:hunter2@10.0.0.5:30000/health", "GET http://admin:%s@10.0.0.5:30000/health" % MASK),
    ("sent Bearer %s to the server" % API_KEY, "sent Bearer %s to the server" % MASK),
    ("api_key=''", "api_key=''"),
    ("the client needs a bearer token", "the client needs a bearer token"),
])
def test_headers_and_urls(text, shown):
    assert redact.redact_text(text) == shown


@pytest.mark.parametrize("line", [
    verbatim.OLD_DP_TP, verbatim.CURRENT_HYBRID, verbatim.CURRENT_DENSE, verbatim.PREFILL_HYBRID, verbatim.ACCESS_LINE,
    verbatim.TORCH_OOM, verbatim.HYBRID_OOM_TEXT, verbatim.NCCL_LINE, verbatim.READY_LINE,
    "# llmops-serving instance=qwen36 deployment_id=%s invocation_id=%s pid=4711 started_at=2026-11-29T19:45:01Z "
    "unit=sglang-qwen36.service" % ("3f" * 32, "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"),
])
def test_lines_without_secrets_are_untouched(line):
    assert redact.redact_text(line) == line


def test_known_secrets_and_nested_results():
    result = {"msg": "POST failed: the server said key %s is wrong" % API_KEY, "samples": [{"preview": API_KEY, "tokens": 3}],
              "pair": ("a", API_KEY), "none": None}
    masked = redact.redact_deep(result, secrets=(API_KEY,))
    assert masked == {"msg": "POST failed: the server said key %s is wrong" % MASK, "samples": [{"preview": MASK, "tokens": 3}],
                      "pair": ["a", MASK], "none": None}
    assert redact.redact_text(None) is None


@pytest.mark.parametrize("text", [
    "PID 4242 (python3 -m sglang.launch_server --api-key=%s, started 2026-11-29T19:40:02Z)" % API_KEY,
    "ServerArgs(api_key='%s', port=1); Authorization: Bearer %s; http://u:p@h/" % (API_KEY, API_KEY),
])
def test_masking_twice_changes_nothing_more(text):
    # Lines are masked where they are read and the whole result again on the way out.
    once = redact.redact_text(text)
    assert API_KEY not in once and redact.redact_text(once) == once
    assert "%s, started" % MASK in once or "port=1" in once
