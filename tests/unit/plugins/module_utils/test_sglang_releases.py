# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_releases: which SGLang release sizes memory how, and the plan following each release."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import memory_plan, model_config, sglang_releases

DATA = pathlib.Path(__file__).parent / "data"
DIMS = model_config.parse_model_config(json.loads((DATA / "models" / "qwen3.6-27b-from-model-card.json").read_text()))
WEIGHTS = model_config.weight_bytes(DIMS)
A6000 = {"memory_mib": 49140, "count": 2}
MTP_48 = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4, "max_running_requests": 48, "mamba_full_memory_ratio": 0.9}


@pytest.mark.parametrize("text, release", [
    ("0.5.23", (0, 5, 23)), ("v0.4.3", (0, 4, 3)), ("0.5.10.post1", (0, 5, 10)), (" 0.5.9 ", (0, 5, 9)),
    ("0.5.14rc2", (0, 5, 14)),
])
def test_release_numbers(text, release):
    assert sglang_releases.parse_release(text) == release


@pytest.mark.parametrize("text, message", [
    ("0.0.0.dev11582+g4df60434d", "not an SGLang release number"),
    ("0.0.0", "a source build's version, not a release"),
    ("main", "'main' is not an SGLang release number"),
    ("0.5.9\n0.5.23", "is not an SGLang release number"),
    ("9" * 500, "is not an SGLang release number"),
    (None, "'' is not an SGLang release number"),
])
def test_what_is_not_a_release_is_refused(text, message):
    with pytest.raises(sglang_releases.UnknownRelease, match=message):
        sglang_releases.parse_release(text)
    # A hostile string is quoted shortened, not whole.
    with pytest.raises(sglang_releases.UnknownRelease) as raised:
        sglang_releases.behaviours(text)
    assert len(str(raised.value)) < 300


@pytest.mark.parametrize("release, expected", [
    ("0.4.6", {"request_pool_plus_one": True, "explicit_requests": "as_given", "default_fraction": False}),
    ("0.4.7", {"request_pool_plus_one": False}),
    ("0.5.9", {"state_pool": "subtract_first", "extra_buffer_slots": "by_speculative", "auto_strategy": "no_buffer",
               "draft_before_pools": False, "speculative_reserve_mib": 2048, "prefill_graph_reserve": False}),
    ("0.5.10.post1", {"explicit_requests": "estimate", "extra_buffer_slots": "by_overlap", "speculative_reserve_mib": 4096,
                      "prefill_graph_reserve": True, "planned_as": "0.5.10"}),
    ("0.5.13", {"state_pool": "joint", "auto_strategy": "no_buffer", "draft_before_pools": False}),
    ("0.5.14", {"explicit_requests": "half_kv", "auto_strategy": "extra_buffer", "draft_before_pools": True,
                "speculative_reserve_mib": 0}),
    ("0.5.17", {"state_pool": "joint_padded", "mamba_cap_warning": True, "multimodal_reservation": False}),
    ("0.5.18", {"multimodal_reservation": True, "gpu_bands": "0.5.3"}),
    ("0.5.20", {"gpu_bands": "0.5.20", "graph_bs_capped_by_requests": False}),
    ("0.5.23", {"graph_bs_capped_by_requests": True, "notes": []}),
])
def test_each_behaviour_changes_in_its_release(release, expected):
    found = sglang_releases.behaviours(release)
    for key, value in expected.items():
        assert found[key] == value, key


def test_a_newer_release_is_planned_as_the_newest_known_and_says_so():
    found = sglang_releases.behaviours("0.6.0")
    assert found["planned_as"] == "0.5.23" and found["notes"] == [
        "SGLang 0.6.0 is newer than the newest release the plan knows (0.5.23); planned with 0.5.23's arithmetic"]
    plan = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, MTP_48, arithmetic="0.6.0")
    assert plan["warnings"][0] == found["notes"][0]
    newest = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, MTP_48)
    assert plan["pools"] == newest["pools"]


def test_older_releases_are_refused_where_they_are_not_modelled():
    with pytest.raises(sglang_releases.UnknownRelease, match="older than the oldest release the plan models"):
        sglang_releases.behaviours("0.3.6")
    with pytest.raises(sglang_releases.UnknownRelease, match="hybrid state pool in a way the plan does not model"):
        sglang_releases.behaviours("0.5.4", hybrid=True)
    assert sglang_releases.behaviours("0.5.4")["state_pool"] == "subtract_first"
    # Before 0.5.3 the default mem_fraction_static came from tables the plan does not model: the flag is required.
    dense = model_config.parse_model_config(json.loads((DATA / "models" / "qwen3-8b-aiconfigurator.json").read_text()))
    with pytest.raises(memory_plan.PlanInputError, match="give mem_fraction_static"):
        memory_plan.plan_memory(dense, model_config.weight_bytes(dense), A6000, {"tp_size": 1}, arithmetic="0.5.2")
    given = memory_plan.plan_memory(dense, model_config.weight_bytes(dense), A6000,
                                    {"tp_size": 1, "mem_fraction_static": 0.85}, arithmetic="0.5.2")
    assert given["fits"]


def test_the_seed_across_the_releases_between():
    # The seed's first try (48 requests, ratio 0.9, MTP) on every release from 0.5.9: refused while the intermediate
    # state was sized from every configured request, started (and cut to a few requests) from the joint solve on.
    verdicts = {}
    for minor in range(9, 24):
        plan = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, MTP_48, arithmetic="0.5.%d" % minor)
        verdicts[minor] = (plan["fits"], plan["pools"]["max_running_requests"], plan["breakdown"]["mamba_slots_per_request"])
    assert all(not verdicts[minor][0] for minor in range(9, 13))
    assert all(verdicts[minor][0] and 0 < verdicts[minor][1] < 48 for minor in range(13, 24))
    # auto resolves to no_buffer (3 slots a request) up to 0.5.13, to extra_buffer (5 with the overlap schedule) after.
    assert {verdicts[minor][2] for minor in range(9, 14)} == {3} and {verdicts[minor][2] for minor in range(14, 24)} == {5}


def test_the_padding_slot_costs_one_slot_and_the_draft_moves_into_the_budget():
    flags = dict(MTP_48, mem_fraction_static=0.85)
    joint = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, dict(flags, mamba_radix_cache_strategy="extra_buffer"),
                                    arithmetic="0.5.16")
    padded = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, dict(flags, mamba_radix_cache_strategy="extra_buffer"),
                                     arithmetic="0.5.17")
    assert joint["pools"]["max_mamba_cache_size"] - padded["pools"]["max_mamba_cache_size"] in (1, 2)
    before = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, flags, arithmetic="0.5.13")
    after = memory_plan.plan_memory(DIMS, WEIGHTS, A6000, flags, arithmetic="0.5.14")
    assert before["breakdown"]["available_after_load_bytes"] - after["breakdown"]["available_after_load_bytes"] == \
        after["breakdown"]["draft_weights_bytes"]
    assert before["breakdown"]["kv_draft_cell_bytes"] == 0 and after["breakdown"]["kv_draft_cell_bytes"] > 0
