# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The install failure names where the installer looked (a mirror that is down, issue 30), never an index's password."""
from __future__ import annotations

from ansible_collections.llmops.serving.tests.unit.roles.templar import render

VAR_FILES = ("roles/sglang/defaults/main.yml", "roles/sglang/vars/main.yml")


def sources(**variables):
    return render("{{ _sglang_install_sources }}", variables, VAR_FILES)


def test_the_default_index_when_nothing_is_configured():
    assert sources() == ["the default index (PyPI)"]


def test_a_site_mirror_of_wheels_without_an_index():
    assert sources(sglang_find_links=["/srv/llmops-mirror/wheels"], sglang_no_index=True) == [
        "find-links /srv/llmops-mirror/wheels", "no index"]


def test_index_credentials_are_masked():
    found = sources(sglang_index_url="https://deploy:s3cr3t-token@pypi.example.internal/simple",
                    sglang_extra_index_urls=["https://download.pytorch.org/whl/cu128", "http://u@10.0.0.5:8080/simple"])
    assert found == ["index https://***@pypi.example.internal/simple", "extra index https://download.pytorch.org/whl/cu128",
                     "extra index http://***@10.0.0.5:8080/simple"]
    assert "s3cr3t" not in " ".join(found)
