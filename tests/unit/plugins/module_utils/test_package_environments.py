# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""package_environments: the environments' names, what deployments reference (read without following a symlink or
opening a FIFO), what a prune removes, and the restore's refusal of a deployment whose environment is gone.
(The module's tests run the same code through package_environments and deployment_restore.)"""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import package_environments as envs
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    build_record,
    manifest_entries,
    manifest_text,
    record_text,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64
ROOT = "/opt/sglang/envs"
ENV_OLD = ROOT + "/0.5.9-a41c07e2b9d3"
ENV_NEW = ROOT + "/0.5.23-3f2a9c1b7e0d"
DIR = stat.S_IFDIR | 0o755


@pytest.mark.parametrize("name", [
    "0.5.23-3f2a9c1b7e0d", "0.5.9-a41c07e2b9d3", "0.5.23rc1-000000000000", "1.0.0+cu128-abcdefabcdef",
    "0.5.23-post1-3f2a9c1b7e0d", "2!1.0_dev-3f2a9c1b7e0d",
])
def test_names_an_install_gives_are_environment_names(name):
    assert envs.ENV_NAME_RE.match(name)


@pytest.mark.parametrize("name", [
    "venv", "current", "0.5.23", "3f2a9c1b7e0d", "v0.5.23-3f2a9c1b7e0d", ".0.5.23-3f2a9c1b7e0d",
    "0.5.23-3F2A9C1B7E0D", "0.5.23-3f2a9c1b7e0", "0.5.23-3f2a9c1b7e0d0", "0.5.23-3f2a9c1b7e0d\n",
    "0.5.23\n-3f2a9c1b7e0d", "0.5 23-3f2a9c1b7e0d", "0.5.23-3f2a9c1b7e0d.partial", "0.5.23\t-3f2a9c1b7e0d",
    "0.5.23-3f2a9c1b7e0d/", "0.5/23-3f2a9c1b7e0d",
])
def test_other_names_are_not(name):
    assert not envs.ENV_NAME_RE.match(name)


# -- what deployments reference -------------------------------------------------------------------------------------


class State:
    """A state root with instances, their records and archived deployments, as deployment_record writes them."""

    def __init__(self, root):
        self.root = root

    def instance_dir(self, instance):
        path = self.root / instance
        path.mkdir(parents=True, exist_ok=True)
        return path

    def record(self, instance, deployment_id, inputs):
        path = self.instance_dir(instance) / "deployment.json"
        path.write_text(record_text(build_record(instance, deployment_id, "2026-11-29T19:45:01Z", None, inputs, "")))
        return path

    def archive(self, instance, deployment_id, inputs):
        directory = self.instance_dir(instance) / "deployments" / deployment_id
        directory.mkdir(parents=True)
        entries = manifest_entries(["/etc/systemd/system/sglang-%s.service" % instance], [], {
            "/etc/systemd/system/sglang-%s.service" % instance: 0o644})
        (directory / entries[0]["archived"]).write_text("[Service]\n")
        (directory / "manifest.json").write_text(manifest_text(deployment_id, inputs, entries))
        return directory / "manifest.json"


@pytest.fixture
def state(tmp_path):
    root = tmp_path / "state"
    root.mkdir()
    return State(root)


def test_current_and_archived_deployments_of_every_instance_are_referenced(state):
    state.record("qwen36-a", B, {"package_environment": ENV_NEW, "versions": {"sglang": "0.5.23"}})
    state.archive("qwen36-a", A, {"package_environment": ENV_OLD})
    state.archive("qwen36-a", B, {"package_environment": ENV_NEW})
    state.record("qwen36-b", A, {"package_environment": ENV_OLD + "/"})
    referenced, problems = envs.referenced_environments(str(state.root))
    assert problems == []
    assert referenced == {
        ENV_OLD: ["qwen36-a archived aaaaaaaaaaaa", "qwen36-b current"],
        ENV_NEW: ["qwen36-a archived bbbbbbbbbbbb", "qwen36-a current"],
    }


def test_older_records_without_an_environment_reference_none(state):
    state.record("qwen36-a", B, {"model_path": "/models/Qwen3.6-27B"})
    state.record("qwen36-b", B, {"package_environment": ""})
    state.archive("qwen36-a", A, {"package_environment": None})
    manifest = state.archive("qwen36-a", C, {})
    # A manifest from before inputs were stored at all.
    manifest.write_text(json.dumps({"files": json.loads(manifest.read_text())["files"]}))
    # An instance directory without a record yet, interrupted archive writes, set-aside records and other files.
    state.instance_dir("qwen36-c")
    (state.root / "qwen36-a" / "deployments" / (C + ".partial")).mkdir()
    (state.root / "qwen36-a" / "deployment.json.corrupt-20261129T194501Z").write_text("{")
    (state.root / "rollout-plan.json").write_text("{}")
    (state.root / ".hidden").symlink_to("/")
    assert envs.referenced_environments(str(state.root)) == ({}, [])


def test_a_missing_state_directory_is_a_problem_not_an_empty_host(tmp_path):
    referenced, problems = envs.referenced_environments(str(tmp_path / "absent"))
    assert referenced == {}
    assert problems == ["the state directory %s does not exist, so no deployment on this host can be read" % (tmp_path / "absent")]


def test_a_record_that_is_a_symlink_is_not_followed(state, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(record_text(build_record("qwen36-a", B, "", None, {"package_environment": ENV_NEW}, "")))
    state.instance_dir("qwen36-a")
    (state.root / "qwen36-a" / "deployment.json").symlink_to(elsewhere)
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {}
    assert problems == ["%s is a symbolic link, not a regular file (not followed)" % (state.root / "qwen36-a" / "deployment.json")]


def test_a_fifo_record_or_manifest_is_never_opened(state):
    state.instance_dir("qwen36-a")
    os.mkfifo(state.root / "qwen36-a" / "deployment.json")
    manifest = state.archive("qwen36-a", A, {"package_environment": ENV_OLD})
    manifest.unlink()
    os.mkfifo(manifest)
    # Opening either FIFO for reading would block this test for ever.
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {}
    assert problems == [
        "%s is a FIFO, not a regular file (not followed)" % (state.root / "qwen36-a" / "deployment.json"),
        "%s is a FIFO, not a regular file (not followed)" % manifest,
    ]


def test_symlinked_instances_archives_and_archived_deployments_are_problems(state, tmp_path):
    other = tmp_path / "other-state"
    State(other).record("qwen36-x", A, {"package_environment": ENV_OLD})
    (state.root / "qwen36-x").symlink_to(other / "qwen36-x")
    state.record("qwen36-a", B, {"package_environment": ENV_NEW})
    (state.root / "qwen36-a" / "deployments").symlink_to(other)
    state.record("qwen36-b", B, {"package_environment": ENV_NEW})
    (state.root / "qwen36-b" / "deployments").mkdir()
    (state.root / "qwen36-b" / "deployments" / A).symlink_to(other / "qwen36-x")
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {ENV_NEW: ["qwen36-a current", "qwen36-b current"]}
    assert problems == [
        "%s is a symbolic link, not a directory (not followed)" % (state.root / "qwen36-a" / "deployments"),
        "the archived deployment %s is a symbolic link, not a directory (not followed)" % (
            state.root / "qwen36-b" / "deployments" / A),
        "the instance directory %s is a symbolic link (not followed)" % (state.root / "qwen36-x"),
    ]


def test_corrupt_records_and_manifests_are_problems_and_the_rest_is_still_read(state):
    record = state.record("qwen36-a", B, {"package_environment": ENV_NEW})
    record.write_text('{"deployment_id": "%s"' % B)
    manifest = state.archive("qwen36-a", A, {"package_environment": ENV_OLD})
    manifest.write_text("{truncated")
    missing = state.archive("qwen36-a", C, {"package_environment": ENV_OLD})
    missing.unlink()
    state.record("qwen36-b", A, {"package_environment": ENV_OLD})
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {ENV_OLD: ["qwen36-b current"]}
    assert len(problems) == 3
    assert problems[0].startswith("the deployment record %s is not JSON" % record)
    assert problems[1].startswith("the manifest %s is unreadable: not JSON" % manifest)
    assert problems[2] == "the manifest %s is unreadable: it does not exist or cannot be read" % missing


def test_a_manifest_of_another_deployment_is_a_problem(state):
    manifest = state.archive("qwen36-a", A, {"package_environment": ENV_OLD})
    manifest.write_text(manifest.read_text().replace(A, B))
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {} and problems == ["the manifest %s is unreadable: it belongs to deployment %s, not %s" % (manifest, B, A)]


@pytest.mark.parametrize("value, why", [
    ("relative/0.5.23-3f2a9c1b7e0d", "is not an absolute path without control characters"),
    (ENV_NEW + "\n", "is not an absolute path without control characters"),
    (["/opt/sglang/envs"], "is list, not a path"),
    (7, "is int, not a path"),
])
def test_an_environment_that_is_not_an_absolute_path_is_a_problem(state, value, why):
    record = state.record("qwen36-a", B, {"package_environment": value})
    referenced, problems = envs.referenced_environments(str(state.root))
    assert referenced == {}
    assert len(problems) == 1 and problems[0].startswith("%s: its package_environment " % record) and why in problems[0]


# -- what a prune removes -------------------------------------------------------------------------------------------


def plan(entries, protected=(), real_root=None):
    return envs.plan_prune(ROOT, entries, set(protected), real_root)


def test_only_unreferenced_real_directories_with_environment_names_are_removed():
    result = plan([("0.5.9-a41c07e2b9d3", DIR), ("0.5.23-3f2a9c1b7e0d", DIR), ("0.5.22-000000000000", DIR)], [ENV_NEW])
    assert result["environments"] == [(ROOT + "/0.5.22-000000000000", "0.5.22-000000000000"), (ENV_NEW, "0.5.23-3f2a9c1b7e0d"),
                                      (ENV_OLD, "0.5.9-a41c07e2b9d3")]
    assert result["remove"] == [ROOT + "/0.5.22-000000000000", ENV_OLD]
    assert result["left_alone"] == []


def test_symlinks_fifos_files_and_foreign_names_are_left_alone():
    result = plan([
        ("0.5.9-a41c07e2b9d3", stat.S_IFLNK | 0o777),
        ("0.5.22-000000000000", stat.S_IFIFO | 0o644),
        ("0.5.21-111111111111", stat.S_IFREG | 0o644),
        ("venv", DIR),
        ("0.5.23-3f2a9c1b7e0d\n", DIR),
        ("0.5.23-3f2a9c1b7e0d.partial", DIR),
    ])
    assert result["environments"] == [] and result["remove"] == []
    assert result["left_alone"] == [
        (ROOT + "/0.5.21-111111111111", "a regular file, not a directory"),
        (ROOT + "/0.5.22-000000000000", "a FIFO, not a directory"),
        (ROOT + "/0.5.23-3f2a9c1b7e0d\n", "not named <version>-<12 hex digits>"),
        (ROOT + "/0.5.23-3f2a9c1b7e0d.partial", "not named <version>-<12 hex digits>"),
        (ENV_OLD, "a symbolic link, not a directory"),
        (ROOT + "/venv", "not named <version>-<12 hex digits>"),
    ]


def test_protected_paths_are_compared_normalised_and_through_the_real_root():
    entries = [("0.5.9-a41c07e2b9d3", DIR), ("0.5.23-3f2a9c1b7e0d", DIR)]
    assert plan(entries, [ENV_NEW + "/", "/opt/sglang/envs/./0.5.9-a41c07e2b9d3"])["remove"] == []
    # The root reached through a symlinked parent: a reference by the real path protects the entry too.
    assert plan(entries, ["/data/sglang/envs/0.5.23-3f2a9c1b7e0d"], real_root="/data/sglang/envs")["remove"] == [ENV_OLD]
    assert plan(entries, ["/data/sglang/envs/0.5.23-3f2a9c1b7e0d"])["remove"] == [ENV_NEW, ENV_OLD]


def test_path_aliases_resolve_symlinked_parents(tmp_path):
    (tmp_path / "data" / "envs").mkdir(parents=True)
    (tmp_path / "opt").symlink_to(tmp_path / "data")
    assert envs.path_aliases(str(tmp_path / "opt" / "envs" / "0.5.23-3f2a9c1b7e0d") + "/") == {
        str(tmp_path / "opt" / "envs" / "0.5.23-3f2a9c1b7e0d"), str(tmp_path / "data" / "envs" / "0.5.23-3f2a9c1b7e0d")}


# -- the restore's refusal ------------------------------------------------------------------------------------------

MANIFEST = "/var/lib/llmops-serving/qwen36-a/deployments/%s/manifest.json" % A


def test_a_restore_goes_ahead_when_the_environment_is_a_directory_or_none_is_named():
    for inputs in ({"package_environment": ENV_OLD}, {"package_environment": ""}, {"package_environment": None}, {}):
        assert envs.restore_environment_error(A, inputs, MANIFEST, lambda path: path == ENV_OLD) is None


def test_a_restore_is_refused_naming_the_deployment_the_path_and_the_ways_on():
    asked = []
    message = envs.restore_environment_error(A, {"package_environment": ENV_OLD, "versions": {"sglang": "0.5.9"}}, MANIFEST,
                                             lambda path: asked.append(path) or False)
    assert asked == [ENV_OLD]
    assert message.startswith("deployment %s cannot be restored: its package environment %s (package_environment of %s) "
                              "is not a directory any more" % (A, ENV_OLD, MANIFEST))
    assert "Nothing was changed" in message and "deploy SGLang 0.5.9 again" in message
    assert "restore another deployment whose environment still exists (deployment_id)" in message
    # Without the version in the inputs the message still says what to deploy.
    assert "deploy its SGLang version again" in envs.restore_environment_error(A, {"package_environment": ENV_OLD}, MANIFEST,
                                                                               lambda path: False)


def test_a_restore_is_refused_when_the_archived_environment_is_no_path():
    message = envs.restore_environment_error(A, {"package_environment": "venv\n"}, MANIFEST, lambda path: True)
    assert message == ("deployment %s cannot be restored: %s: its package_environment 'venv\\n' is not an absolute path "
                       "without control characters" % (A, MANIFEST))
