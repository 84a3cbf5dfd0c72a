# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.model_nodes import FilterModule, model_nodes

GROUPS = {"all": ["llm-a", "llm-b", "llm-c"], "qwen_mn": ["llm-b", "llm-c"], "empty": []}


def test_a_model_on_one_host_is_the_host_alone():
    assert model_nodes("llm-a", "", GROUPS) == ["llm-a"]
    assert model_nodes("llm-a", None, GROUPS) == ["llm-a"]
    assert FilterModule().filters()["model_nodes"] is model_nodes


def test_a_model_across_hosts_is_its_group_in_rank_order():
    assert model_nodes("llm-c", "qwen_mn", GROUPS) == ["llm-b", "llm-c"]
    assert model_nodes("llm-b", "qwen_mn", GROUPS) == ["llm-b", "llm-c"]
    # A host outside its model group gets the group (the callers find it missing and say so).
    assert model_nodes("llm-a", "qwen_mn", GROUPS) == ["llm-b", "llm-c"]


def test_a_group_that_is_not_in_the_inventory_is_empty_for_the_caller_to_name():
    assert model_nodes("llm-a", "qwen_typo", GROUPS) == []
    assert model_nodes("llm-a", "empty", GROUPS) == []


@pytest.mark.parametrize("host,groups", [("", GROUPS), (None, GROUPS), ("llm-a", ["not", "a", "dict"])])
def test_what_is_not_a_host_or_the_groups_is_refused(host, groups):
    with pytest.raises(AnsibleFilterError):
        model_nodes(host, "qwen_mn", groups)
