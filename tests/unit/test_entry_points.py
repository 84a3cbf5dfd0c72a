# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role entry point the collection's playbooks, roles and scenarios run has an argument spec, so ansible-doc
documents it and ansible-core checks what it is given; and no spec names an entry point that does not exist."""
from __future__ import annotations

import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
# include_role/import_role with tasks_from, as the playbooks write it: the role's name, then tasks_from.
ROLE_AND_ENTRY = re.compile(r"name:\s*llmops\.serving\.(\w+)\s*\n\s*tasks_from:\s*(\w+)")


def specs(role):
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def used_entry_points():
    used = set()
    for path in list(REPO.glob("*.yml")) + list((REPO / "playbooks").rglob("*.yml")) \
            + list((REPO / "roles").rglob("*.yml")) + list((REPO / "molecule").rglob("*.yml")):
        used.update(ROLE_AND_ENTRY.findall(path.read_text()))
    return used


def test_the_pattern_finds_the_entry_points_deploy_yml_runs():
    used = used_entry_points()
    assert {("sglang_service", "argv"), ("sglang_service", "memory_plan"), ("pve_gpu_host", "node_gpus")} <= used


def test_every_entry_point_in_use_has_an_argument_spec():
    missing = sorted("%s:%s" % pair for pair in used_entry_points() if pair[1] not in specs(pair[0]))
    assert not missing, "entry points run without an argument spec: %s" % missing


def test_every_argument_spec_names_a_task_file_and_says_what_it_does():
    for role_dir in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir()):
        for entry, spec in specs(role_dir.name).items():
            assert (role_dir / "tasks" / ("%s.yml" % entry)).is_file(), "%s:%s has no task file" % (role_dir.name, entry)
            assert spec.get("short_description") and spec.get("description"), "%s:%s" % (role_dir.name, entry)
