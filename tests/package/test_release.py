# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make release` (scripts/release.sh) in a copy of the checkout, so the checkout's fragments stay: the fragments
become a release in changelogs/changelog.yaml and CHANGELOG.rst, the tarball is built and its contents pass the
packaging allow-list, and a second release of the same version is refused."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV = pathlib.Path(sys.executable).parent.parent


def copy_checkout(target):
    """The files git tracks or would track (untracked, not ignored), symlinks as symlinks."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, destination = REPO / name, target / name
        if not os.path.lexists(source):
            continue  # deleted in the working tree
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), destination)
        else:
            shutil.copy2(source, destination)


def release(checkout):
    env = dict(os.environ, VENV=str(VENV), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(checkout / "scripts" / "release.sh")], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def prepare_next_release(checkout):
    """What a maintainer does before `make release` when the checkout's version is out already or nothing is new: the
    next minor version in galaxy.yml, and a fragment (written only into the copy)."""
    galaxy = checkout / "galaxy.yml"
    version = yaml.safe_load(galaxy.read_text())["version"]
    releases = yaml.safe_load((checkout / "changelogs" / "changelog.yaml").read_text()).get("releases") or {}
    if version in releases:
        major, minor, _patch = (int(part) for part in version.split("."))
        text = galaxy.read_text()
        assert text.count("\nversion: %s\n" % version) == 1
        galaxy.write_text(text.replace("\nversion: %s\n" % version, "\nversion: %d.%d.0\n" % (major, minor + 1)))
    fragments = checkout / "changelogs" / "fragments"
    fragments.mkdir(exist_ok=True)  # git keeps no empty directory: none after a release
    if not list(fragments.glob("*.yml")):
        (fragments / "0-release-test.yml").write_text(
            "---\nminor_changes:\n  - release test - a fragment the release test wrote into its copy of the checkout.\n")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    checkout = tmp_path_factory.mktemp("checkout")
    copy_checkout(checkout)
    prepare_next_release(checkout)
    fragments = {path.name: yaml.safe_load(path.read_text()) for path in (checkout / "changelogs" / "fragments").glob("*.yml")}
    done = release(checkout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "checked (members are the collection only)" in done.stderr, done.stderr[-2000:]
    return checkout, fragments


def test_the_fragments_become_the_release_in_the_changelog(released):
    checkout, fragments = released
    assert fragments, "the checkout has fragments to release"
    version = yaml.safe_load((checkout / "galaxy.yml").read_text())["version"]
    changes = yaml.safe_load((checkout / "changelogs" / "changelog.yaml").read_text())["releases"][version]["changes"]
    rst = (checkout / "CHANGELOG.rst").read_text()
    assert "v%s" % version in rst
    for fragment in fragments.values():
        for section, entries in fragment.items():
            for entry in entries if isinstance(entries, list) else [entries]:
                assert entry in changes[section], entry
                # The rendered changelog has each entry (its first words; RST may wrap the rest).
                assert " ".join(entry.split()[:4]) in " ".join(rst.split()), entry[:80]
    assert list((checkout / "changelogs" / "fragments").glob("*.yml")) == []


def test_the_tarball_is_built_with_the_collection_only(released):
    checkout = released[0]
    version = yaml.safe_load((checkout / "galaxy.yml").read_text())["version"]
    with tarfile.open(checkout / ".build" / "dist" / ("llmops-serving-%s.tar.gz" % version)) as tar:
        names = tar.getnames()
    assert "changelogs/changelog.yaml" in names and "CHANGELOG.rst" not in names
    assert not any(name.startswith("changelogs/fragments/") and name.endswith(".yml") for name in names)


def test_a_released_version_is_not_released_again(released):
    checkout = released[0]
    again = release(checkout)
    assert again.returncode != 0
    assert "already released" in again.stderr


def test_the_checkout_itself_keeps_its_fragments(released):
    fragments = set(released[1]) - {"0-release-test.yml"}
    assert {path.name for path in (REPO / "changelogs" / "fragments").glob("*.yml")} >= fragments
