from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.systemd_command_line import systemd_command_line


def test_safe_words_stay_bare():
    assert systemd_command_line(["/usr/bin/python3", "-m", "sglang.launch_server", "--tp-size", "2"]) == (
        "/usr/bin/python3 -m sglang.launch_server --tp-size 2"
    )


def test_specifiers_and_variables_are_escaped():
    assert systemd_command_line(["echo", "100%", "$HOME"]) == 'echo 100%% "$$HOME"'


def test_spaces_quotes_and_backslashes_are_quoted():
    assert systemd_command_line(["echo", 'say "hi" \\ there']) == 'echo "say \\"hi\\" \\\\ there"'


@pytest.mark.parametrize("bad", ["echo hi", [], None])
def test_rejects_non_lists_and_empty_commands(bad):
    with pytest.raises(AnsibleFilterError):
        systemd_command_line(bad)


def test_control_characters_are_refused_with_the_variable_named_and_without_the_value():
    with pytest.raises(AnsibleFilterError) as caught:
        systemd_command_line(["/bin/x", "--served-model-name", "m\nExecStartPre=+/bin/touch /tmp/pwned"], "served")
    assert str(caught.value) == (
        "systemd_command_line: served[2] contains a newline (U+000A, a control character) at character 2: values "
        "rendered into the systemd unit or its environment files may not contain control characters or characters "
        "systemd cannot read")


def test_a_nul_cannot_end_the_line_and_start_a_directive():
    # systemd ends a unit file's line at NUL as at LF and CR; the old filter kept a NUL inside the quotes.
    with pytest.raises(AnsibleFilterError, match=r"a NUL \(U\+0000"):
        systemd_command_line(["/bin/x", "a\0ExecStartPre=+/bin/touch /tmp/pwned\0"])


def test_the_program_cannot_take_a_systemd_prefix():
    with pytest.raises(AnsibleFilterError, match=r"the command line\[0\]: the program"):
        systemd_command_line(["+/bin/sh", "-c", "id"])
