# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.sglang_config_yaml import FilterModule, sglang_config_yaml


@pytest.mark.parametrize("key, line", [
    ("sk-abc123", 'api-key: "sk-abc123"'),
    ("0x1F", 'api-key: "0x1F"'),
    ("yes", 'api-key: "yes"'),
    ('q"uo\\te', 'api-key: "q\\"uo\\\\te"'),
    ("é☃\U0001f600", 'api-key: "\\xE9\\u2603\\U0001F600"'),
    ("# not a comment: {x}", 'api-key: "# not a comment: {x}"'),
])
def test_every_value_is_an_ascii_double_quoted_string_that_reads_back_exactly(key, line):
    text = sglang_config_yaml({"api-key": key})
    assert text.splitlines()[1] == line and text.isascii()
    assert yaml.safe_load(text) == {"api-key": key}
    assert FilterModule().filters()["sglang_config_yaml"] is sglang_config_yaml


def test_control_characters_and_bad_flag_names_are_refused_without_the_value():
    with pytest.raises(AnsibleFilterError) as caught:
        sglang_config_yaml({"api-key": "sk-secret\nadmin-api-key: x"}, "sglang_service_api_key")
    assert "sglang_service_api_key['api-key'] contains a newline" in str(caught.value)
    assert "sk-secret" not in str(caught.value)
    with pytest.raises(AnsibleFilterError, match="a key is not a flag name"):
        sglang_config_yaml({"--api-key": "k"})
