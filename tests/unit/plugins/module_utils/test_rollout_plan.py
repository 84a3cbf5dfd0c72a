# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_plan: the component digests, the record and the decision between verify-only and cutover."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import rollout_plan

DIGEST = "a" * 64
DEPLOYMENT = "d" * 64


def test_components_change_exactly_with_what_they_digest():
    base = rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_port": 30000}}, {"model_revision": "r1"})
    assert sorted(base) == ["collection", "options_sglang_service", "state_model_revision"]
    # Key order and dict identity do not matter; a value does.
    assert rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_port": 30000}},
                                   {"model_revision": "r1"}) == base
    port = rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_port": 30001}}, {"model_revision": "r1"})
    assert [name for name in base if base[name] != port[name]] == ["options_sglang_service"]
    revision = rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_port": 30000}}, {"model_revision": "r2"})
    assert [name for name in base if base[name] != revision[name]] == ["state_model_revision"]
    # A secret among the options only ever appears as part of a digest.
    secret = rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_api_key": "sk-S3cret"}})
    assert "sk-S3cret" not in repr(secret)
    for bad in (("b" * 63, {}, {}), (DIGEST, {"Bad Role": {}}, {}), (DIGEST, {}, {"": 1}), (DIGEST, {}, {"x y": 1})):
        with pytest.raises(ValueError):
            rollout_plan.components(*bad)
    # What the module reads on the container joins what the controller digested; the same state twice is refused.
    assert rollout_plan.add_state(rollout_plan.components(DIGEST, {"sglang_service": {"sglang_service_port": 30000}}),
                                  {"model_revision": "r1"}) == base
    with pytest.raises(ValueError, match="cannot name a state component"):
        rollout_plan.add_state(base, {"model_revision": "r1"})


def test_tree_digest_follows_content_and_names_not_caches(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "plugins").mkdir()
    main = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    main.write_text("- name: A\n")
    first = rollout_plan.tree_digest(str(tmp_path), ("roles", "plugins"))
    (tmp_path / "plugins" / "__pycache__").mkdir()
    (tmp_path / "plugins" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "plugins" / "y.pyc").write_bytes(b"\0")
    assert rollout_plan.tree_digest(str(tmp_path), ("roles", "plugins")) == first
    main.write_text("- name: B\n")
    assert rollout_plan.tree_digest(str(tmp_path), ("roles", "plugins")) != first
    main.write_text("- name: A\n")
    os.rename(main, main.with_name("other.yml"))
    assert rollout_plan.tree_digest(str(tmp_path), ("roles", "plugins")) != first
    # A link is its target's name, never followed.
    os.rename(main.with_name("other.yml"), main)
    (tmp_path / "plugins" / "link").symlink_to("/etc/hostname")
    linked = rollout_plan.tree_digest(str(tmp_path), ("roles", "plugins"))
    assert linked != first


def test_record_round_trip_and_damaged_records():
    now = rollout_plan.components(DIGEST, {"sglang": {"sglang_version": "0.5.23"}})
    text = rollout_plan.render_record(now, DEPLOYMENT, "2026-12-02T00:00:00Z")
    record = rollout_plan.parse_record(text)
    assert record["components"] == now and record["deployment_id"] == DEPLOYMENT
    for bad in ("{", "[]", '{"version": 2}', '{"version": 1, "deployment_id": "x", "components": {}}',
                '{"version": 1, "deployment_id": "%s", "components": {"a": "nothex"}}' % DEPLOYMENT):
        with pytest.raises(rollout_plan.PlanRecordError):
            rollout_plan.parse_record(bad)
    with pytest.raises(ValueError):
        rollout_plan.render_record(now, "short", "t")


def test_the_decision_and_its_reasons():
    now = rollout_plan.components(DIGEST, {"sglang": {"sglang_version": "0.5.23"}}, {"node_driver": "580.95.05"})
    record = rollout_plan.parse_record(rollout_plan.render_record(now, DEPLOYMENT, "t"))
    assert rollout_plan.compare(record, now, DEPLOYMENT) == {"cutover": False, "reasons": [], "changed": []}
    upgraded = rollout_plan.components(DIGEST, {"sglang": {"sglang_version": "0.5.24"}}, {"node_driver": "580.95.05"})
    verdict = rollout_plan.compare(record, upgraded, DEPLOYMENT)
    assert verdict == {"cutover": True, "reasons": ["options_sglang: changed"], "changed": ["options_sglang"]}
    more = dict(now, options_flash_attn="b" * 64)
    assert rollout_plan.compare(record, more, DEPLOYMENT)["reasons"] == ["options_flash_attn: new"]
    assert rollout_plan.compare(None, now, DEPLOYMENT)["cutover"]
    assert rollout_plan.compare(record, now, None)["cutover"]
    rolled_back = rollout_plan.compare(record, now, "e" * 64)
    assert rolled_back["cutover"] and "a rollback or a change outside deploy.yml" in rolled_back["reasons"][0]


class TestCutoverBatches:
    MODEL = {"m0": ["m0", "m1"], "m1": ["m0", "m1"]}

    def test_single_node_servers_follow_the_batch_size(self):
        assert rollout_plan.cutover_batches(["a", "b", "c"], {}, 1) == [1, 1, 1]
        assert rollout_plan.cutover_batches(["a", "b", "c"], {"a": ["a"]}, 2) == [2, 1]

    def test_a_multi_node_model_is_one_server_with_all_its_nodes(self):
        assert rollout_plan.cutover_batches(["a", "m0", "m1", "b"], self.MODEL, 1) == [1, 2, 1]
        assert rollout_plan.cutover_batches(["a", "m0", "m1", "b"], self.MODEL, 2) == [3, 1]
        # Rank order is the model's business, not the batch's: the nodes only have to be together.
        assert rollout_plan.cutover_batches(["m1", "m0"], self.MODEL, 1) == [2]

    def test_a_node_that_would_cut_over_alone_is_refused(self):
        with pytest.raises(ValueError, match="without its nodes m1"):
            rollout_plan.cutover_batches(["a", "m0", "b"], self.MODEL, 1)

    def test_nodes_apart_in_the_order_are_refused(self):
        with pytest.raises(ValueError, match="not next to each other"):
            rollout_plan.cutover_batches(["m0", "a", "m1"], self.MODEL, 5)

    def test_nothing_to_cut_over_and_bad_sizes(self):
        assert rollout_plan.cutover_batches([], self.MODEL, 3) == [3]
        for bad in (0, "0%", "-5", "half", None):
            with pytest.raises(ValueError, match="at least 1"):
                rollout_plan.cutover_batches(["a"], {}, bad)

    def test_a_percentage_counts_servers_as_serial_does(self):
        # Four servers (the model is one): 50 % is two per batch, 10 % rounds down to one.
        hosts = ["a", "m0", "m1", "b", "c"]
        assert rollout_plan.cutover_batches(hosts, self.MODEL, "50%") == [3, 2]
        assert rollout_plan.cutover_batches(hosts, self.MODEL, "10%") == [1, 2, 1, 1]
        assert rollout_plan.cutover_batches(hosts, self.MODEL, "100%") == [5]
