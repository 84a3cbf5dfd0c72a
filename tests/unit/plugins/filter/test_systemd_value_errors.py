# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.systemd_value_errors import FilterModule, systemd_value_errors


def test_every_offending_variable_is_named_and_good_ones_give_nothing():
    assert systemd_value_errors({"a": "fine", "b": ["ok", 1, None], "c": {"k": "v"}}) == []
    errors = systemd_value_errors({"sglang_service_served_model_name": "m\nExecStartPre=+/bin/touch /tmp/pwned",
                                   "sglang_service_extra_args": ["ok", "x\ry"], "sglang_service_api_key": "k3y\0"})
    assert [error.split(" contains ")[0] for error in errors] == [
        "sglang_service_served_model_name", "sglang_service_extra_args[1]", "sglang_service_api_key"]
    assert not [error for error in errors if "pwned" in error or "k3y" in error]
    assert FilterModule().filters()["systemd_value_errors"] is systemd_value_errors


@pytest.mark.parametrize("instance", ["qwen36\n", "a b", "../x", ".hidden", "", "-x", "q\rx"])
def test_instance_names_are_matched_whole(instance):
    errors = systemd_value_errors({"sglang_service_instance": instance}, "instance")
    assert len(errors) == 1 and errors[0].startswith("sglang_service_instance: instance ")
    assert "is not a valid instance name" in errors[0]


def test_paths_environment_and_unknown_kinds():
    assert systemd_value_errors({"p": ["/ok", "/a b"]}, "path") == [
        "p[1] contains ' ' at character 3: paths rendered into the unit may not contain whitespace, quotes, backslashes, "
        "%, $ or ;"]
    assert systemd_value_errors({"e": {"OK": "1", "BAD": "a\nb"}}, "environment")[0].startswith("e['BAD'] contains a newline")
    with pytest.raises(AnsibleFilterError, match="unknown kind"):
        systemd_value_errors({"x": "y"}, "url")
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        systemd_value_errors(["x"])
