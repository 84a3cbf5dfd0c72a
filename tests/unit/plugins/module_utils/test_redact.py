# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""redact on SGLang's real server_args lines (data/sglang_server_args/README.md says where each comes from), on command
lines and on headers: every secret masked, everything else left as it was."""

from __future__ import annotations

import ast
import html
import json
import pathlib
import re
import textwrap
import time
from urllib.parse import quote, quote_plus

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.tests.unit.fakes import across_cut, echoed_forms, key_windows_shown, random_key
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


# --------------------------------------------------------------------------- known secrets as a hostile peer echoes them

PEER_KEY = random_key(2)
# A key with what only repr, HTML and non-ASCII escapes change: a quote, an ampersand, a space, an accent, an emoji.
ODD_KEY = "sk-Qx7'Lm&Np Rw\u00e9Tv9/Yz+Kb=\U0001f511Hd"


ODD_FORMS = {
    "quote": quote(ODD_KEY, safe=""),
    "quote_plus": quote_plus(ODD_KEY),
    "quote_twice": quote(quote(ODD_KEY, safe=""), safe=""),
    "json_ensure_ascii": json.dumps(ODD_KEY)[1:-1],
    "json_ensure_ascii_solidus": json.dumps(ODD_KEY)[1:-1].replace("/", "\\/"),
    "json_in_json": json.dumps(json.dumps({"key": ODD_KEY}))[1:-1],
    "json_utf8": json.dumps(ODD_KEY, ensure_ascii=False)[1:-1],
    "ascii": ascii(ODD_KEY),
    "repr_of_repr": repr(ascii(ODD_KEY)),
    "bytes_repr": repr(ODD_KEY.encode("utf-8")),
    "html_escape": html.escape(ODD_KEY),
    "html_numeric": "".join(char if char.isalnum() and char.isascii() else "&#%d;" % ord(char) for char in ODD_KEY),
}


@pytest.mark.parametrize("name", sorted(echoed_forms(PEER_KEY)))
def test_a_known_key_is_masked_in_every_form_a_peer_echoes(name):
    form = echoed_forms(PEER_KEY)[name]
    text = '{"error": "invalid key %s for this model", "code": 401}' % form
    masked = redact.redact_text(text, secrets=(PEER_KEY,))
    assert not key_windows_shown(PEER_KEY, masked), masked
    assert masked == '{"error": "invalid key %s for this model", "code": 401}' % MASK


@pytest.mark.parametrize("name", sorted(ODD_FORMS))
def test_a_key_with_quotes_spaces_and_non_ascii_is_masked_in_its_repr_json_url_and_html_forms(name):
    form = ODD_FORMS[name]
    assert form != ODD_KEY or name == "json_utf8"
    masked = redact.redact_text("echo: <%s> end" % form, secrets=(ODD_KEY,))
    assert masked.startswith("echo: <") and masked.endswith("> end") and MASK in masked, masked
    assert "Qx7" not in masked and "Lm" not in masked and "Hd>" not in masked, masked
    assert not key_windows_shown(ODD_KEY, masked), masked


def test_hex_escapes_in_either_case_and_mixed_forms_within_one_key():
    half = len(PEER_KEY) // 2
    lower_hex = re.sub(r"%[0-9A-F]{2}", lambda escape: escape.group().lower(), quote(PEER_KEY[:half], safe=""))
    mixed = lower_hex + json.dumps(PEER_KEY[half:])[1:-1].replace("/", "\\/")
    assert lower_hex != quote(PEER_KEY[:half], safe="")
    unicode_upper = "".join(char if char.isalnum() else "\\u%04X" % ord(char) for char in PEER_KEY)
    for form in (mixed, unicode_upper):
        assert redact.redact_text("a %s b" % form, secrets=(PEER_KEY,)) == "a %s b" % MASK


def test_a_key_wrapped_at_76_columns_in_an_error_body():
    body = "upstream said: the request with credentials " + PEER_KEY + " was refused by the policy engine " * 3
    wrapped = "\n".join(textwrap.wrap(body, 76, break_long_words=True))
    assert PEER_KEY not in wrapped and PEER_KEY in wrapped.replace("\n", "")
    masked = redact.redact_text(wrapped, secrets=(PEER_KEY,))
    assert not key_windows_shown(PEER_KEY, masked), masked
    assert masked.startswith("upstream said: the request with credentials") and masked.endswith("engine")


@pytest.mark.parametrize("name", sorted(echoed_forms(PEER_KEY)))
def test_shortened_masks_first_wherever_the_cut_falls(name):
    form = echoed_forms(PEER_KEY)[name]
    for before_cut in range(len(form) + 1):
        text = across_cut(form, 120, before_cut, prefix="HTTP 500: ")
        cut = redact.shortened(text, 120, secrets=(PEER_KEY,))
        assert len(cut) <= 120 and cut.startswith("HTTP 500: xxx"), (before_cut, cut)
        # Nothing of the key but what a cut before its fourth character leaves: its first one to three characters.
        shown = [PEER_KEY[:size] for size in range(redact.MIN_TAIL_CHARS, len(PEER_KEY) + 1) if PEER_KEY[:size] in cut]
        assert not shown and not key_windows_shown(PEER_KEY, cut), (before_cut, cut)


def test_shortened_masks_a_key_that_the_peer_itself_cut():
    # A proxy that quotes the first 20 characters of the header it refused, at the end of what a module quotes.
    text = "upstream refused the key " + quote(PEER_KEY, safe="")[:20]
    assert redact.shortened(text, 1000, secrets=(PEER_KEY,)) == text  # not cut: the whole text is what the peer said
    assert redact.shortened(text + "x" * 10, len(text), secrets=(PEER_KEY,)) == "upstream refused the key " + MASK


def test_shortened_keeps_its_limit_and_its_ellipsis():
    # The text carries the key's first 12 characters (a peer's own cut), and the cut at 97 leaves 5 of them: masked,
    # they take 8, and the filler before them gives way.
    text = "x" * 92 + PEER_KEY[:12] + "y" * 20
    cut = redact.shortened(text, 100, secrets=(PEER_KEY,), ellipsis="...")
    assert cut == "x" * (97 - len(MASK)) + MASK + "..."
    # A whole key is masked before the cut, which may then fall inside the mask.
    assert redact.shortened("x" * 95 + PEER_KEY, 100, secrets=(PEER_KEY,), ellipsis="...") == "x" * 95 + "**..."
    assert redact.shortened("short", 100, secrets=(PEER_KEY,), ellipsis="...") == "short"
    assert redact.shortened(None, 10) is None


def test_shortened_masks_the_patterns_before_it_cuts():
    # Cut first, the password would lose its "@" and no longer look like one.
    password = quote(PEER_KEY, safe="")  # a URL's user information has no raw "/"
    text = "GET https://admin:%s@10.0.0.5/v1 failed" % password
    for limit in range(20, len(text)):
        assert password[:4] not in redact.shortened(text, limit), limit
    line = "server_args=ServerArgs(api_key='%s', port=30000)" % PEER_KEY
    assert redact.shortened(line, 45) == redact.redact_text(line)[:45]


def test_shortened_reads_only_the_start_of_a_huge_body():
    body = "HTTP 502 " + "x" * 491 + PEER_KEY + "z" * (16 * 1024 * 1024)
    started = time.monotonic()
    cut = redact.shortened(body, 500, secrets=(PEER_KEY,))
    assert time.monotonic() - started < 1.0
    assert cut == "HTTP 502 " + "x" * 491


def test_shortened_reads_further_when_masking_shrank_the_text():
    # Many masked keys make the masked window short: the key cut by the window's end must not slip under the limit.
    text = (PEER_KEY + " ") * 60 + PEER_KEY
    cut = redact.shortened(text, 500, secrets=(PEER_KEY,))
    assert not key_windows_shown(PEER_KEY, cut) and set(cut) <= set(MASK + " ")


def test_only_a_cut_masks_a_keys_first_characters():
    # Elsewhere a text that ends in the key's first characters is ordinary text: the instance "verify" of this key.
    assert redact.redact_text("instance verify", secrets=("verify-secret-key",)) == "instance verify"
    assert redact.mask_secrets("unit sglang-verify", ("verify-secret-key",)) == "unit sglang-verify"
    assert redact.shortened("instance verify-s and more", 17, secrets=("verify-secret-key",)) == "instance " + MASK


def test_short_secrets_are_masked_only_as_they_are():
    # Escaped or spread out, a short value would match ordinary text.
    assert redact.redact_text("a b c d e, abcde, a%62cde", secrets=("abcde",)) == "a b c d e, %s, a%%62cde" % MASK


def test_ordinary_text_and_other_keys_stay():
    other = random_key(3)
    pieces = " ".join(PEER_KEY[index:index + 3] for index in range(0, len(PEER_KEY), 6))
    text = "key %s, url %s, %s" % (other, quote(other, safe=""), pieces)
    assert redact.redact_text(text, secrets=(PEER_KEY,)) == text


def test_mask_secrets_touches_nothing_but_the_secrets():
    text = "api_key='%s' Bearer abc %s" % (PEER_KEY, quote(PEER_KEY, safe=""))
    assert redact.mask_secrets(text, (PEER_KEY, None, "")) == "api_key='%s' Bearer abc %s" % (MASK, MASK)
    assert redact.mask_secrets(None, (PEER_KEY,)) is None


@pytest.mark.parametrize("run", ["\\", "\\u00", "%25", " ", "&#"])
def test_a_hostile_run_of_escape_characters_costs_linear_time(run):
    text = PEER_KEY[:2] + run * (300000 // len(run))
    started = time.monotonic()
    assert redact.redact_text(text, secrets=(PEER_KEY,)) == text
    assert time.monotonic() - started < 5.0
