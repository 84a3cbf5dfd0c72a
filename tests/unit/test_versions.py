# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Versions the collection states about itself are coherent: no plugin or option was added in a release after the
collection's own version (galaxy.yml), which has never been released (changelogs/changelog.yaml)."""
from __future__ import annotations

import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
VERSION_ADDED = re.compile(r"^\s*version_added:\s*['\"]?([0-9.]+)['\"]?\s*$", re.MULTILINE)


def version_key(text):
    return tuple(int(part) for part in text.split("."))


def test_nothing_was_added_after_the_collections_own_version():
    collection = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    found = {}
    for path in sorted((REPO / "plugins").rglob("*.py")) + sorted((REPO / "roles").rglob("argument_specs.yml")):
        for version in VERSION_ADDED.findall(path.read_text()):
            found.setdefault(version, []).append(str(path.relative_to(REPO)))
    assert found, "no version_added found: the pattern no longer matches the docs"
    later = dict((version, paths) for version, paths in found.items() if version_key(version) > version_key(collection))
    assert not later, "version_added above the collection's version %s: %s" % (collection, later)
