# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""package_environments: lists the environments under a root with the deployments that reference them and removes the
others; never through a symlink, never when a record or manifest cannot be read; check and diff mode."""

from __future__ import annotations

import os
import stat
from unittest import mock

import pytest
from ansible.module_utils import basic

from ansible_collections.llmops.serving.plugins.modules import deployment_record, package_environments
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_package_environments import A, B, State

OLD, NEW, STAGED = "0.5.9-a41c07e2b9d3", "0.5.23-3f2a9c1b7e0d", "0.5.24-0123456789ab"
UNUSED = ("0.5.22-000000000000", "0.5.23-ffffffffffff")


class Host:
    """An environment root with one tree per environment, and a state root."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.root = tmp_path / "envs"
        self.state = State(tmp_path / "state")
        self.state.root.mkdir()

    def env(self, name):
        path = self.root / name
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").write_text("#!/bin/sh\n")
        (path / "lib" / "site-packages" / "sglang").mkdir(parents=True)
        (path / "lib" / "site-packages" / "sglang" / "__init__.py").write_text("__version__ = '0.5.23'\n")
        return str(path)

    def run(self, check_mode=False, diff=False, **extra):
        args = dict({"root": str(self.root), "state_dir": str(self.state.root)}, **extra)
        with mock.patch.object(basic.AnsibleModule, "warn") as warn:
            result, failed = run_module(package_environments.main, args, check_mode=check_mode, diff=diff)
        return result, failed, [call.args[0] for call in warn.call_args_list]

    def names(self):
        return sorted(os.listdir(self.root))


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


@pytest.fixture
def fleet(host):
    """qwen36-a runs NEW and may roll back to OLD; qwen36-b runs OLD; STAGED is being installed; two are unused."""
    old, new = host.env(OLD), host.env(NEW)
    host.env(STAGED)
    for name in UNUSED:
        host.env(name)
    host.state.record("qwen36-a", B, {"package_environment": new})
    host.state.archive("qwen36-a", A, {"package_environment": old})
    host.state.archive("qwen36-a", B, {"package_environment": new})
    host.state.record("qwen36-b", A, {"package_environment": old})
    return host


def test_removes_what_no_deployment_references_and_a_rerun_changes_nothing(fleet):
    result, failed, warnings = fleet.run(keep=[str(fleet.root / STAGED) + "/"])
    assert not failed, result["msg"]
    assert warnings == [] and result["problems"] == []
    assert result["changed"]
    assert result["removed"] == [str(fleet.root / name) for name in UNUSED]
    assert fleet.names() == sorted([OLD, NEW, STAGED])
    assert result["environments"] == [
        {"path": str(fleet.root / UNUSED[0]), "referenced_by": [], "keep": False},
        {"path": str(fleet.root / NEW), "referenced_by": ["qwen36-a archived bbbbbbbbbbbb", "qwen36-a current"], "keep": False},
        {"path": str(fleet.root / UNUSED[1]), "referenced_by": [], "keep": False},
        {"path": str(fleet.root / STAGED), "referenced_by": [], "keep": True},
        {"path": str(fleet.root / OLD), "referenced_by": ["qwen36-a archived aaaaaaaaaaaa", "qwen36-b current"], "keep": False},
    ]
    assert result["msg"] == "removed 2 of 5 environment(s) under %s" % fleet.root

    again, failed, warnings = fleet.run(keep=[str(fleet.root / STAGED)])
    assert not failed and not again["changed"] and again["removed"] == [] and warnings == []
    assert fleet.names() == sorted([OLD, NEW, STAGED])


def test_the_environment_deployment_record_stores_is_kept(host, tmp_path):
    env = host.env(NEW)
    host.env(OLD)
    unit = tmp_path / "sglang-qwen36.service"
    unit.write_text("[Service]\nExecStart=%s/bin/python -m sglang.launch_server\n" % env)
    recorded, failed = run_module(deployment_record.main, {
        "instance": "qwen36", "files": [str(unit)], "env_files": [], "state_dir": str(host.state.root),
        "env_file": str(tmp_path / "deployment.env"), "inputs": {"package_environment": env, "versions": {"sglang": "0.5.23"}}})
    assert not failed, recorded["msg"]
    result, failed, warnings = host.run()
    assert not failed and warnings == []
    assert result["removed"] == [str(host.root / OLD)] and host.names() == [NEW]
    short = recorded["deployment_id"][:12]
    assert result["environments"][0]["referenced_by"] == ["qwen36 archived " + short, "qwen36 current"]


def test_check_mode_removes_nothing_and_says_what_would_go_and_diff_lists_the_names(fleet):
    before = fleet.names()
    result, failed, _warnings = fleet.run(check_mode=True, diff=True, keep=[str(fleet.root / STAGED)])
    assert not failed and result["changed"]
    assert result["removed"] == [str(fleet.root / name) for name in UNUSED]
    assert result["msg"] == "would remove 2 of 5 environment(s) under %s" % fleet.root
    assert fleet.names() == before
    assert result["diff"] == {"before_header": str(fleet.root), "after_header": str(fleet.root),
                              "before": [UNUSED[0], NEW, UNUSED[1], STAGED, OLD], "after": [NEW, STAGED, OLD]}


def test_prune_false_only_lists(fleet):
    before = fleet.names()
    result, failed, _warnings = fleet.run(prune=False)
    assert not failed and not result["changed"] and result["removed"] == []
    assert len(result["environments"]) == 5 and fleet.names() == before


def test_symlinks_in_the_root_are_never_followed_nor_removed(fleet, tmp_path):
    outside = tmp_path / "outside" / "0.5.1-aaaaaaaaaaaa"
    (outside / "precious").mkdir(parents=True)
    (fleet.root / "0.5.1-aaaaaaaaaaaa").symlink_to(outside)
    # A symlink named like an environment, pointing at one a deployment runs from.
    (fleet.root / "0.5.9-bbbbbbbbbbbb").symlink_to(fleet.root / OLD)
    os.mkfifo(fleet.root / "0.5.20-cccccccccccc")
    (fleet.root / "venv").mkdir()
    result, failed, warnings = fleet.run(keep=[str(fleet.root / STAGED)])
    assert not failed and warnings == []
    assert result["removed"] == [str(fleet.root / name) for name in UNUSED]
    assert (outside / "precious").is_dir() and (fleet.root / OLD / "bin" / "python").is_file()
    assert fleet.names() == sorted([OLD, NEW, STAGED, "0.5.1-aaaaaaaaaaaa", "0.5.9-bbbbbbbbbbbb", "0.5.20-cccccccccccc", "venv"])
    assert result["left_alone"] == [
        {"path": str(fleet.root / "0.5.1-aaaaaaaaaaaa"), "reason": "a symbolic link, not a directory"},
        {"path": str(fleet.root / "0.5.20-cccccccccccc"), "reason": "a FIFO, not a directory"},
        {"path": str(fleet.root / "0.5.9-bbbbbbbbbbbb"), "reason": "a symbolic link, not a directory"},
        {"path": str(fleet.root / "venv"), "reason": "not named <version>-<12 hex digits>"},
    ]


def test_a_name_with_a_newline_is_left_alone(fleet):
    tricky = fleet.root / (UNUSED[0] + "\n")
    tricky.mkdir()
    result, failed, _warnings = fleet.run(keep=[str(fleet.root / STAGED)])
    assert not failed and tricky.is_dir()
    assert {"path": str(tricky), "reason": "not named <version>-<12 hex digits>"} in result["left_alone"]


def test_an_entry_swapped_for_a_symlink_before_its_removal_is_left_alone(fleet, tmp_path):
    outside = tmp_path / "outside"
    (outside / "precious").mkdir(parents=True)
    real_lstat = os.lstat
    victim = str(fleet.root / UNUSED[0])

    def swap_then_lstat(path, *args, **kwargs):
        # What another process could do between the listing and the removal.
        if path == victim and stat.S_ISDIR(real_lstat(path).st_mode):
            os.rename(path, path + ".moved")
            os.symlink(outside, path)
        return real_lstat(path, *args, **kwargs)

    with mock.patch.object(package_environments.os, "lstat", swap_then_lstat):
        result, failed, _warnings = fleet.run(keep=[str(fleet.root / STAGED)])
    assert not failed
    assert result["removed"] == [str(fleet.root / UNUSED[1])]
    assert {"path": victim, "reason": "a symbolic link by the time it was to be removed, not a directory"} in result["left_alone"]
    assert (outside / "precious").is_dir() and os.path.islink(victim)


@pytest.mark.parametrize("damage", ["corrupt manifest", "symlinked record", "fifo record", "no state directory"])
def test_when_a_record_or_manifest_cannot_be_read_nothing_is_removed_and_a_warning_names_it(fleet, tmp_path, damage):
    record = fleet.state.root / "qwen36-a" / "deployment.json"
    if damage == "corrupt manifest":
        culprit = fleet.state.root / "qwen36-a" / "deployments" / A / "manifest.json"
        culprit.write_text('{"files": [')
    elif damage == "symlinked record":
        culprit = record
        (tmp_path / "record.json").write_bytes(record.read_bytes())
        record.unlink()
        record.symlink_to(tmp_path / "record.json")
    elif damage == "fifo record":
        culprit = record
        record.unlink()
        os.mkfifo(record)
    else:
        culprit = tmp_path / "absent"
    before = fleet.names()
    state_dir = str(culprit) if damage == "no state directory" else str(fleet.state.root)
    result, failed, warnings = fleet.run(state_dir=state_dir, check_mode=False, diff=True)
    assert not failed and not result["changed"]
    assert result["removed"] == [] and fleet.names() == before
    assert len(result["problems"]) == 1 and str(culprit) in result["problems"][0]
    assert warnings == ["which environments under %s deployments use cannot be told for certain, so nothing was removed: %s"
                        % (fleet.root, result["problems"][0])]
    assert result["diff"]["before"] == result["diff"]["after"]
    checked, failed, _warnings = fleet.run(state_dir=state_dir, check_mode=True)
    assert not failed and not checked["changed"] and checked["removed"] == []


def test_a_missing_root_is_nothing_to_do(host):
    result, failed, warnings = host.run()
    assert not failed and not result["changed"] and result["environments"] == [] and warnings == []
    assert result["msg"] == "%s does not exist: no environments" % host.root


@pytest.mark.parametrize("make, found", [
    (lambda root, elsewhere: root.symlink_to(elsewhere), "a symbolic link"),
    (lambda root, elsewhere: root.write_text(""), "a regular file"),
])
def test_a_root_that_is_a_symlink_or_a_file_fails(host, tmp_path, make, found):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / UNUSED[0]).mkdir(parents=True)
    make(host.root, elsewhere)
    result, failed, _warnings = host.run()
    assert failed and result["msg"].startswith("%s is %s, not a directory of environments" % (host.root, found))
    assert (elsewhere / UNUSED[0]).is_dir()


def test_relative_paths_are_refused(host):
    result, failed, _warnings = host.run(keep=["envs/" + NEW])
    assert failed and "not absolute: 'envs/%s'" % NEW in result["msg"]
    result, failed, _warnings = host.run(root="envs")
    assert failed and "not absolute: 'envs'" in result["msg"]


def test_a_root_reached_through_a_symlinked_parent_keeps_what_records_name_by_either_path(host, tmp_path):
    host.env(NEW)
    host.env(OLD)
    (tmp_path / "opt").symlink_to(tmp_path)
    # The record names the environment by the real path; the root is given through the symlinked parent.
    host.state.record("qwen36-a", B, {"package_environment": str(host.root / NEW)})
    result, failed, _warnings = host.run(root=str(tmp_path / "opt" / "envs"))
    assert not failed
    assert result["removed"] == [str(tmp_path / "opt" / "envs" / OLD)] and host.names() == [NEW]
    assert result["environments"][0]["referenced_by"] == ["qwen36-a current"]
