# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.log_header_printf import FilterModule, log_header_printf
from ansible_collections.llmops.serving.plugins.module_utils import log_header
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import HEADER_KEYS

WORDS = {"unit": '"$U"', "pid": "42", "instance": "'q'", "deployment_id": '"$D"', "invocation_id": "inv", "started_at": "now"}


def test_the_statement_prints_the_keys_in_header_order_whatever_the_mapping_order():
    assert log_header_printf(WORDS) == (
        "printf '# llmops-serving instance=%s deployment_id=%s invocation_id=%s pid=%s started_at=%s unit=%s\\n' \\\n"
        "  'q' \"$D\" inv 42 now \"$U\""
    )
    assert FilterModule().filters()["log_header_printf"] is log_header_printf


def test_what_the_statement_prints_is_what_log_header_parses():
    # The values as the launcher has them: the header's parser checks each key's form.
    script = log_header_printf(dict(WORDS, invocation_id='"$I"', started_at='"$T"'))
    run = subprocess.run(["bash", "-c", script], env={"U": "sglang-q.service", "D": "d" * 64, "I": "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10",
                                                      "T": "2026-11-29T19:45:01Z"},
                         capture_output=True, text=True, timeout=30, check=True)
    assert run.stdout.endswith("\n") and run.stdout.count("\n") == 1
    assert log_header.parse_header_line(run.stdout) == {
        "instance": "q", "deployment_id": "d" * 64, "invocation_id": "6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10", "pid": 42,
        "started_at": "2026-11-29T19:45:01Z", "unit": "sglang-q.service"}


@pytest.mark.parametrize("words, why", [
    ({key: "x" for key in HEADER_KEYS if key != "pid"}, "missing: pid"),
    (dict(WORDS, format="2"), "unknown: format"),
    (["instance"], "expects a mapping"),
])
def test_a_mapping_that_is_not_the_header_fails_the_rendering(words, why):
    with pytest.raises(AnsibleFilterError, match=why):
        log_header_printf(words)
