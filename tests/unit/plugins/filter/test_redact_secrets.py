# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.redact_secrets import FilterModule, redact_secrets


def test_the_known_key_and_recognised_secrets_are_masked_in_every_string():
    summary = {"message": "POST /v1/chat/completions: k-9f2 rejected", "nested": [{"line": "server_args={'api_key': 'abc'}"}],
               "count": 3, "none": None}
    assert redact_secrets(summary, secrets=["k-9f2", ""]) == {
        "message": "POST /v1/chat/completions: ******** rejected", "nested": [{"line": "server_args={'api_key': '********'}"}],
        "count": 3, "none": None}
    assert FilterModule().filters()["redact_secrets"] is redact_secrets


def test_secrets_must_be_a_list():
    with pytest.raises(AnsibleFilterError):
        redact_secrets("x", secrets="k")
