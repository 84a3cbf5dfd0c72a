# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.systemd_env_file import FilterModule, systemd_env_file


def test_safe_values_stay_bare_and_others_are_double_quoted():
    assert systemd_env_file([("HF_TOKEN", "hf_abc"), ("NOTE", 'say "hi" $x `y` \\'), ("EMPTY", "")]) == [
        "HF_TOKEN=hf_abc", 'NOTE="say \\"hi\\" \\$x \\`y\\` \\\\"', "EMPTY="]
    assert FilterModule().filters()["systemd_env_file"] is systemd_env_file


def test_a_newline_in_a_secret_is_refused_without_showing_the_secret():
    with pytest.raises(AnsibleFilterError) as caught:
        systemd_env_file({"HF_TOKEN": "hf_secret\nLD_PRELOAD=/tmp/evil.so"}, "sglang_service_secret_environment")
    assert "sglang_service_secret_environment['HF_TOKEN'] contains a newline" in str(caught.value)
    assert "hf_secret" not in str(caught.value) and "evil" not in str(caught.value)
