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
