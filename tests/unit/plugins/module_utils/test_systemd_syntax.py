# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The escaping layer for systemd units and environment files, by example: each rendering read back with the reference
readers (systemd_reference, written from systemd 252's rules), each refusal naming the variable and never the value."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import systemd_syntax as syntax
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils import systemd_reference as ref

HOSTILE = [
    "a b",
    "%h",
    "100%",
    "$HOME",
    "${HOME}",
    "$$",
    "say \"hi\"",
    "it's",
    "back\\slash",
    "trailing\\",
    ";",
    "\\;",
    "",
    "é ☃ 日本",
    "--flag=x y",
    "#not-a-comment",
]


@pytest.mark.parametrize("word", HOSTILE)
def test_each_hostile_word_reads_back_as_one_literal_argument(word):
    line = syntax.exec_command_line(["/usr/bin/env", word, "tail"], "args")
    assert ref.exec_argv(line) == ("", "/usr/bin/env", ["/usr/bin/env", word, "tail"])


def test_safe_words_stay_bare_and_specials_are_escaped():
    assert syntax.exec_command_line(["/bin/echo", "--tp-size", "2", "a b", "100%", "$HOME"], "x") == (
        '/bin/echo --tp-size 2 "a b" 100%% "$$HOME"')


@pytest.mark.parametrize("bad, why", [
    ("a\nExecStartPre=+/bin/touch /tmp/pwned", "a newline (U+000A, a control character) at character 2"),
    ("x\r", "a carriage return (U+000D, a control character) at character 2"),
    ("\0", "a NUL (U+0000, a control character) at character 1"),
    ("del\x7f", "a DEL (U+007F, a control character) at character 4"),
    ("c1\x85", "a next line (NEL) (U+0085, a control character)"),
    ("tab\there", "a tab (U+0009, a control character)"),
    ("bell\a", "a control character (U+0007)"),
    ("\ufdd0", "a Unicode noncharacter (U+FDD0)"),
    ("\U0001fffe", "a Unicode noncharacter (U+1FFFE)"),
    ("\ufeff", "a byte-order mark (U+FEFF)"),
    ("line\u2028sep", "a Unicode line or paragraph separator (U+2028)"),
    ("\ud800", "a lone surrogate (U+D800)"),
])
def test_a_value_with_a_character_systemd_cannot_carry_is_refused_by_name_without_the_value(bad, why):
    secret = "s3cr3t-" + bad
    for render in (
        lambda: syntax.exec_command_line(["/bin/x", secret], "sglang_service_extra_args"),
        lambda: syntax.environment_assignment("KEY", secret, "sglang_service_extra_args"),
        lambda: syntax.env_file_line("KEY", secret, "sglang_service_extra_args"),
        lambda: syntax.unit_text(secret, "sglang_service_extra_args"),
    ):
        with pytest.raises(syntax.SystemdSyntaxError) as caught:
            render()
        message = str(caught.value)
        assert message.startswith("sglang_service_extra_args") and why.split(" at ")[0] in message
        assert "s3cr3t" not in message


@pytest.mark.parametrize("program", ["", "+/bin/sh", "-/bin/sh", "@/bin/sh", ":/bin/sh", "!/bin/sh", "/opt/$x/run"])
def test_a_program_systemd_would_read_a_prefix_or_variable_from_is_refused(program):
    with pytest.raises(syntax.SystemdSyntaxError, match=r"cmd\[0\]: the program"):
        syntax.exec_command_line([program, "x"], "cmd")


@pytest.mark.parametrize("argv", [[], "echo hi", None, ("/bin/x", None), ["/bin/x", ["nested"]]])
def test_a_command_that_is_not_a_list_of_words_is_refused(argv):
    with pytest.raises(syntax.SystemdSyntaxError):
        syntax.exec_command_line(argv, "cmd")


@pytest.mark.parametrize("value", HOSTILE)
def test_environment_assignments_keep_dollars_and_escape_specifiers(value):
    word = syntax.environment_assignment("VAR", value, "env")
    assert ref.environment_assignments(word) == [("VAR", value)]


def test_the_old_rendering_of_environment_values_doubled_the_dollar():
    # The unit rendered Environment= with the command-line quoting, so "$HOME" reached the server as "$$HOME".
    assert syntax.environment_assignment("A", "$HOME", "env") == '"A=$HOME"'
    assert ref.environment_assignments('"A=$$HOME"') == [("A", "$$HOME")]


@pytest.mark.parametrize("key", ["", "1A", "A-B", "A B", "A\n", "Ä"])
def test_environment_names_are_checked(key):
    with pytest.raises(syntax.SystemdSyntaxError, match="is not an environment variable name"):
        syntax.environment_assignment(key, "v", "sglang_service_environment")
    with pytest.raises(syntax.SystemdSyntaxError, match="is not an environment variable name"):
        syntax.env_file_line(key, "v", "sglang_service_secret_environment")


@pytest.mark.parametrize("value", HOSTILE + ["  padded  ", "'single'", "`cmd`", "a\\$b", "=", "#"])
def test_env_file_lines_read_back_exactly(value):
    line = syntax.env_file_line("VAR", value, "env")
    assert ref.env_file_assignments(line + "\n") == [("VAR", value)]


def test_safe_env_file_values_stay_bare_so_existing_files_read_the_same():
    assert syntax.env_file_line("LLMOPS_INSTANCE", "qwen3.6-27b_a", "x") == "LLMOPS_INSTANCE=qwen3.6-27b_a"
    assert syntax.env_file_line("E", "", "x") == "E="
    assert syntax.env_file_line("K", 'a "b" $c', "x") == 'K="a \\"b\\" \\$c"'


@pytest.mark.parametrize("value", ["SGLang server q (model 100% on port 1)", "é \"quoted\" $HOME"])
def test_unit_text_doubles_percent(value):
    rendered = syntax.unit_text(value, "Description")
    assert ref.unit_settings("[Unit]\nDescription=%s\n" % rendered) == [("Unit", "Description", rendered)]
    assert ref.expand_specifiers(rendered) == value


@pytest.mark.parametrize("value", [" lead", "trail ", "ends in\\"])
def test_unit_text_refuses_what_systemd_would_strip_or_continue(value):
    with pytest.raises(syntax.SystemdSyntaxError, match="Description may not start or end with whitespace"):
        syntax.unit_text(value, "Description")


@pytest.mark.parametrize("path", ["/a b", "/a\"b", "/a'b", "/a\\b", "/a%h", "/a$b", "/a;b", "/a/../b", "relative", "/a\n"])
def test_paths_with_characters_systemd_treats_specially_are_refused(path):
    with pytest.raises(syntax.SystemdSyntaxError, match="sglang_service_config_dir"):
        syntax.unit_path(path, "sglang_service_config_dir")


def test_plain_paths_and_relative_paths_pass_unchanged():
    assert syntax.unit_path("/etc/llmops-serving/q.1/server.env", "p") == "/etc/llmops-serving/q.1/server.env"
    assert syntax.unit_value("llmops-serving/q", "p", "relative_path") == "llmops-serving/q"
    with pytest.raises(syntax.SystemdSyntaxError, match="relative path"):
        syntax.unit_value("/var/log/x", "p", "relative_path")


@pytest.mark.parametrize("kind, good, bad", [
    ("account", "sglang", "sglang\n"),
    ("account", "_svc-1", "1svc"),
    ("keyword", "on-failure", "on-failure\nExecStartPre=+/bin/true"),
    ("device_allow", "/dev/nvidiactl rw", "/dev/nvidiactl rw\n"),
    ("device_allow", "char-nvidia-caps rw", "char-nvidia caps rw"),
])
def test_names_keywords_and_device_entries_are_matched_whole(kind, good, bad):
    assert syntax.unit_value(good, "v", kind) == good
    with pytest.raises(syntax.SystemdSyntaxError, match="^v must be|^v contains"):
        syntax.unit_value(bad, "v", kind)


def test_an_unknown_kind_is_refused():
    with pytest.raises(syntax.SystemdSyntaxError, match="unknown kind"):
        syntax.unit_value("x", "v", "url")


def test_value_errors_name_every_offender_by_variable_index_and_key():
    errors = syntax.value_errors({"ok": "x", "bad key\n": "y", "nested": ["a", "b\r"], "n": None, "i": 3},
                                 "sglang_service_extra_flags")
    assert errors == [
        "a key of sglang_service_extra_flags contains a newline (U+000A, a control character) at character 8: values "
        "rendered into the systemd unit or its environment files may not contain control characters or characters "
        "systemd cannot read",
        "sglang_service_extra_flags['nested'][1] contains a carriage return (U+000D, a control character) at character "
        "2: values rendered into the systemd unit or its environment files may not contain control characters or "
        "characters systemd cannot read",
    ]
    assert syntax.value_errors(["/ok", "/a b"], "paths", "path") == [
        "paths[1] contains ' ' at character 3: paths rendered into the unit may not contain whitespace, quotes, "
        "backslashes, %, $ or ;"]


def test_value_errors_of_an_environment_check_names_and_values():
    assert syntax.value_errors({"GOOD": "1", "N": 2, "bad-name": "x", "LIST": [1], "NUL": "a\0", "NONE": None},
                               "sglang_service_environment", "environment") == [
        "sglang_service_environment: 'bad-name' is not an environment variable name (ASCII letters, digits and _, not "
        "starting with a digit)",
        "sglang_service_environment['LIST'] must be a string, number or boolean",
        "sglang_service_environment['NUL'] contains a NUL (U+0000, a control character) at character 2: values "
        "rendered into the systemd unit or its environment files may not contain control characters or characters "
        "systemd cannot read",
        "sglang_service_environment['NONE'] must be a string, number or boolean",
    ]
    assert syntax.value_errors(["A=1"], "env", "environment") == ["env must be a mapping of environment variables, not list"]


def test_assignment_pairs_take_mappings_and_dictsort_output():
    assert syntax.assignment_pairs({"A": 1, "B": True}, "e") == [("A", "1"), ("B", "True")]
    assert syntax.assignment_pairs([("A", "x")], "e") == [("A", "x")]
    for bad in ("A=1", [("A",)], {"A": None}, {"A": ["x"]}):
        with pytest.raises(syntax.SystemdSyntaxError):
            syntax.assignment_pairs(bad, "e")


def test_numbers_in_a_command_line_are_words_as_cli_flags_renders_them():
    assert syntax.exec_command_line(["/bin/x", "--port", 30000, 0.5], "cmd") == "/bin/x --port 30000 0.5"
