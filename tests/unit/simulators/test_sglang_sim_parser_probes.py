# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's parser against the outcomes SGLang 0.5.23's real parser gave for the same argv (the probe table).

The slow tier (tests/slow/test_real_sglang_parser.py) reruns the same table through the real parser.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators import sglang_parser_probes as table
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SIM_SOURCE
from sglang_sim import server_args

RUNNER = os.path.join(os.path.dirname(SIM_SOURCE), "..", "tests", "slow", "sglang_probe_runner.py")


def probe_payload(probes):
    return json.dumps([{"id": probe.id, "argv": probe.argv, "files": probe.files} for probe in probes])


@pytest.fixture(scope="module")
def sim_outcomes():
    run = subprocess.run([sys.executable, RUNNER, "sim"], input=probe_payload(table.PROBES), capture_output=True,
                         text=True, check=True, timeout=300)
    return {outcome["id"]: outcome for outcome in json.loads(run.stdout)}


def changed_values(values):
    """The ServerArgs fields that differ from the parser's defaults (what a probe records)."""
    spec = server_args.load_spec()
    defaults = {entry["dest"]: entry["default"] for entry in spec["actions"]
                if entry["dest"] not in spec["dests_not_in_server_args"]}
    return {dest: values[dest] for dest in defaults if values[dest] != defaults[dest]}


def test_the_table_covers_the_disagreements_of_the_issue():
    ids = {probe.id for probe in table.PROBES}
    assert len(table.PROBES) >= 48
    assert {"reasoning-parser-unknown", "tool-call-parser-hyphen", "enable-metric-ambiguous", "context-length-128k",
            "mamba-radix-cache-no-buffer", "enable-dp-attention-deprecated", "monokernel-backend-deprecated",
            "speculative-algorithm-unknown", "speculative-algorithm-lowercase"} <= ids
    assert len(ids) == len(table.PROBES)


@pytest.mark.parametrize("probe", table.PROBES, ids=[probe.id for probe in table.PROBES])
def test_simulator_parses_like_sglang(sim_outcomes, probe):
    outcome = sim_outcomes[probe.id]
    assert outcome["outcome"] == probe.outcome
    if probe.values is None:
        assert outcome["values"] is None
    else:
        assert changed_values(outcome["values"]) == probe.values


def test_deprecated_flags_warn_in_sglang_words(sim_outcomes):
    assert sim_outcomes["disable-cuda-graph-deprecated"]["messages"] == [
        "\x1b[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.\x1b[0m"]
    assert sim_outcomes["monokernel-backend-deprecated"]["messages"] == [
        "\x1b[1;33m'--monokernel-backend' is deprecated and will be removed in a future release. "
        "Use '--enable-amd-monokernel' instead.\x1b[0m"]
    assert sim_outcomes["service-defaults"]["messages"] == []
