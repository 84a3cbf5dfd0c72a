# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Property tests of the escaping layer: arbitrary strings (control characters, %, $, quotes, backslashes, whitespace,
any Unicode) go through the filters the sglang_service role renders with, and either the reference readers of
systemd_reference (written from systemd 252's rules) read back exactly the intended argv, environment or text from a
whole unit file, with no other directive in it, or the filter refuses the value - and it refuses exactly the values
that hold a character systemd cannot carry. The API key's YAML is read back with PyYAML and with sglang-sim's reader.

The molecule scenario sglang_service (tests/test_hardening_unit.py) checks the same with systemd's own parser.
"""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.serving.plugins.filter.sglang_config_yaml import sglang_config_yaml
from ansible_collections.llmops.serving.plugins.filter.systemd_command_line import systemd_command_line
from ansible_collections.llmops.serving.plugins.filter.systemd_env_file import systemd_env_file
from ansible_collections.llmops.serving.plugins.filter.systemd_environment import systemd_environment
from ansible_collections.llmops.serving.plugins.filter.systemd_unit_value import systemd_unit_value
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import forbidden_character
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils import systemd_reference as ref

SIM_SOURCE = os.path.join(os.path.dirname(__file__), *[os.pardir] * 4, "simulators", "sglang_sim")
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)
from sglang_sim.config_file import load_yaml_subset  # noqa: E402  pylint: disable=wrong-import-position

# Text with what systemd treats specially over-represented: every character class is still drawn (st.text() includes
# control characters, surrogates are drawn separately below).
SPECIAL = st.sampled_from(list(" \t\n\r\0\x7f\x85\"'\\$%;#{}=@+-!:`") + ["${X}", "$HOME", "%h", "\\;", "\u2028", "\ufeff",
                                                                         "\ufffe", "\U0010ffff", "é", "日"])
TEXT = st.lists(st.one_of(st.text(max_size=6), SPECIAL), max_size=8).map("".join)
SURROGATE_TEXT = st.builds(lambda a, b: a + "\ud83d" + b, TEXT, TEXT)
ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,12}\Z")
UNIT_HEAD = "[Unit]\nDescription=x\n\n[Service]\n"
PROGRAM = "/usr/local/libexec/llmops-serving/sglang-launch"


def refused(render, *args, **kwargs):
    """The rendering, or None when the filter refused it."""
    try:
        return render(*args, **kwargs)
    except AnsibleFilterError:
        return None


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.one_of(TEXT, SURROGATE_TEXT), min_size=0, max_size=6))
@example(["--served-model-name", "m\nExecStartPre=+/bin/touch /tmp/pwned"])
@example(["%h", "$HOME", "${X}", "a;b", ";", "\\;", "\"", "'", "\\", ""])
def test_a_command_line_reads_back_as_the_argv_intended_or_is_refused(args):
    argv = [PROGRAM] + args
    line = refused(systemd_command_line, argv, "sglang_service_extra_args")
    assert (line is None) == any(forbidden_character(arg) for arg in args)
    if line is None:
        return
    settings_read = ref.unit_settings(UNIT_HEAD + "ExecStart=" + line + "\nRestart=on-failure\n")
    assert [(section, key) for section, key, _value in settings_read] == [
        ("Unit", "Description"), ("Service", "ExecStart"), ("Service", "Restart")]
    assert ref.exec_argv(settings_read[1][2]) == ("", PROGRAM, argv)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(ENV_NAME, st.one_of(TEXT, SURROGATE_TEXT)), max_size=4, unique_by=lambda pair: pair[0]))
@example([("A", "$HOME %h \"q\" \\ x"), ("B", "b\nExecStartPre=+/bin/touch /tmp/pwned")])
def test_environment_settings_read_back_as_the_values_intended_or_are_refused(pairs):
    assignments = refused(systemd_environment, pairs, "sglang_service_environment")
    assert (assignments is None) == any(forbidden_character(value) for _name, value in pairs)
    if assignments is None:
        return
    unit = UNIT_HEAD + "".join("Environment=%s\n" % assignment for assignment in assignments) + "Restart=no\n"
    settings_read = ref.unit_settings(unit)
    assert [key for _section, key, _value in settings_read] == ["Description"] + ["Environment"] * len(pairs) + ["Restart"]
    read = [pair for _s, _k, value in settings_read[1:-1] for pair in ref.environment_assignments(value)]
    assert read == list(pairs)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(ENV_NAME, st.one_of(TEXT, SURROGATE_TEXT)), max_size=4, unique_by=lambda pair: pair[0]))
@example([("HF_TOKEN", "hf_x\nLD_PRELOAD=/tmp/evil.so"), ("Q", "'\"`$\\ ")])
def test_environment_file_lines_read_back_as_the_values_intended_or_are_refused(pairs):
    lines = refused(systemd_env_file, pairs, "sglang_service_secret_environment")
    assert (lines is None) == any(forbidden_character(value) for _name, value in pairs)
    if lines is None:
        return
    text = "# comment\n" + "".join(line + "\n" for line in lines)
    assert ref.env_file_assignments(text) == list(pairs)


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(TEXT, SURROGATE_TEXT))
@example("model\nExecStartPre=+/bin/touch /tmp/pwned")
@example("100% %h $HOME")
def test_a_description_reads_back_as_the_text_intended_or_is_refused(served_model_name):
    text = "SGLang server q (%s on port 30000)" % served_model_name
    rendered = refused(systemd_unit_value, text, "Description")
    assert (rendered is None) == bool(forbidden_character(text))
    if rendered is None:
        return
    settings_read = ref.unit_settings("[Unit]\nDescription=" + rendered + "\nAfter=network.target\n")
    assert [key for _section, key, _value in settings_read] == ["Description", "After"]
    assert ref.expand_specifiers(settings_read[0][2]) == text


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(TEXT, SURROGATE_TEXT, st.text()))
@example("0x1F")
@example("true")
@example("~")
@example("- [a]: {b}")
@example("\"'\\")
def test_the_api_key_file_reads_back_as_the_exact_string_or_is_refused(key):
    text = refused(sglang_config_yaml, {"api-key": key}, "sglang_service_api_key")
    assert (text is None) == bool(forbidden_character(key))
    if text is None:
        return
    assert text.isascii()
    assert yaml.safe_load(text) == {"api-key": key}
    assert load_yaml_subset(text) == {"api-key": key}


@pytest.mark.parametrize("render", [
    lambda value: systemd_command_line([PROGRAM, value], "v"),
    lambda value: systemd_environment({"A": value}, "v"),
    lambda value: systemd_env_file({"A": value}, "v"),
    lambda value: systemd_unit_value(value, "v"),
    lambda value: sglang_config_yaml({"api-key": value}, "v"),
])
def test_every_c0_character_del_and_c1_character_is_refused(render):
    for code in list(range(0x20)) + list(range(0x7F, 0xA0)):
        with pytest.raises(AnsibleFilterError, match="U\\+%04X" % code):
            render("a%sb" % chr(code))
