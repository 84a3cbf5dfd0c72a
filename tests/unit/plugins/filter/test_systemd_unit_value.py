# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.systemd_unit_value import FilterModule, systemd_unit_value


def test_each_kind_renders_a_plain_value_unchanged_and_text_doubles_percent():
    assert systemd_unit_value("SGLang q (m at 100% on port 1)", "Description") == "SGLang q (m at 100%% on port 1)"
    assert systemd_unit_value("/etc/llmops-serving/q/server.env", "EnvironmentFile", kind="path") == (
        "/etc/llmops-serving/q/server.env")
    assert systemd_unit_value("llmops-serving/q", "LogsDirectory", kind="relative_path") == "llmops-serving/q"
    assert systemd_unit_value("sglang", "User", kind="account") == "sglang"
    assert systemd_unit_value("on-failure", "Restart", kind="keyword") == "on-failure"
    assert systemd_unit_value("char-nvidia-uvm rw", "DeviceAllow", kind="device_allow") == "char-nvidia-uvm rw"
    assert FilterModule().filters()["systemd_unit_value"] is systemd_unit_value


def test_a_newline_in_the_description_cannot_add_a_directive():
    with pytest.raises(AnsibleFilterError, match=r"^systemd_unit_value: Description \(sglang_service_served_model_name\) "
                                                 r"contains a newline \(U\+000A"):
        systemd_unit_value("SGLang q (m\nExecStartPre=+/bin/touch /tmp/pwned on port 1)",
                           "Description (sglang_service_served_model_name)")


def test_an_unknown_kind_is_refused():
    with pytest.raises(AnsibleFilterError, match="unknown kind"):
        systemd_unit_value("x", "v", kind="url")
