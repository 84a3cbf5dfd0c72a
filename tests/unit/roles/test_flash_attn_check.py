# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The flash_attn role's check entry point (tasks/check.yml) run by ansible-playbook on this machine (connection local)
against virtualenvs holding the torch stand-in (simulators/standins/torch_standin) at the version SGLang 0.5.23 pins
(2.14.1) and at one flash-attn 2.8.3.post2 builds with (2.9.1): the refusal names the fix and installs nothing, in
check mode too; a compatible torch passes; check mode without the environment says so. deploy.yml runs the entry
point in the staging play, before the cutover (the last test reads that order)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TORCH_STANDIN = os.path.join(REPO, "simulators", "standins", "torch_standin")
# sglang 0.5.23 pins torch==2.14.1 (PyPI metadata; ../shared/reference/sglang.md); 2.9 is what the 2.8.3.post2 wheels
# on its release page are built for.
PINNED_BY_SGLANG = "2.14.1+standin"
COMPATIBLE = "2.9.1+standin"


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """{torch version: a virtualenv holding the torch stand-in of that version}: its package copied into site-packages
    with the dist-info a wheel install writes (importlib.metadata reads the version there), without building a wheel."""
    root = tmp_path_factory.mktemp("flash-attn-venvs")
    made = {}
    for version in (PINNED_BY_SGLANG, COMPATIBLE):
        venv = root / ("venv-" + version.split("+", maxsplit=1)[0])
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = venv / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
        shutil.copytree(os.path.join(TORCH_STANDIN, "torch"), site / "torch",
                        ignore=shutil.ignore_patterns("__pycache__"))
        dist_info = site / ("torch-%s.dist-info" % version)
        dist_info.mkdir()
        (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: %s\n" % version)
        (dist_info / "INSTALLER").write_text("pip\n")
        made[version] = venv
    return made


def run_check(tmp_path, venv, *args):
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable, "flash_attn_venv": str(venv),
                 "flash_attn_build_log": str(tmp_path / "flash-attn-build.log")},
        "tasks": [{"name": "Check flash-attn",
                   "ansible.builtin.include_role": {"name": "llmops.serving.flash_attn", "tasks_from": "check"}}],
    }]))
    return ansible_playbook(str(play), "-i", "localhost,", *args, cwd=REPO,
                            environment={"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")})


def site_packages(venv):
    lib = venv / "lib"
    return sorted(name for directory in lib.iterdir() for name in os.listdir(directory / "site-packages"))


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check-mode"])
def test_the_torch_sglang_pins_refuses_flash_attn_2_8_3_post2_naming_the_fix_and_installing_nothing(
        tmp_path, venvs, check_mode):
    venv = venvs[PINNED_BY_SGLANG]
    before = site_packages(venv)
    run = run_check(tmp_path, venv, *(["--check"] if check_mode else []))
    assert run.rc != 0, run.summary()
    assert run.failures() == ["Refuse a known-incompatible flash-attn and torch pair on localhost: One or more items failed"]
    said = run.text.replace("\n", " ")
    assert "flash-attn 2.8.3.post2 cannot be built against torch 2.14.1+standin of %s" % venv in said, said
    assert "torch >= 2.13's headers need C++20" in said and "use torch < 2.13" in said, said
    assert "Or leave flash-attn off (flash_attn_enabled: false)" in said, said
    assert site_packages(venv) == before and not any(name.startswith("flash_attn") for name in before)
    assert not (tmp_path / "flash-attn-build.log").exists()
    assert run.changed_tasks() == []


def test_a_torch_flash_attn_builds_with_passes_and_changes_nothing(tmp_path, venvs):
    run = run_check(tmp_path, venvs[COMPATIBLE])
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == []
    assert run.stats["localhost"]["failures"] == 0


def test_check_mode_before_the_environment_exists_says_what_a_real_run_checks(tmp_path):
    missing = tmp_path / "envs" / "0.5.23-not-installed-yet"
    run = run_check(tmp_path, missing, "--check")
    assert run.rc == 0, run.summary()
    said = " ".join(str(item.result.get("msg")) for item in run.results)
    assert "%s does not exist yet (check mode installs nothing)" % missing in said, said
    # Outside check mode a missing environment is a failure (there is no torch to build against).
    run = run_check(tmp_path, missing)
    assert run.rc != 0 and "could not report torch" in " ".join(run.failures()), run.summary()


def test_deploy_checks_flash_attn_on_the_staged_environment_before_the_cutover():
    with open(os.path.join(REPO, "playbooks", "deploy.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    names = [play["name"] for play in plays]
    staging = plays[names.index("Stage SGLang on the containers that cut over")]
    assert names.index("Stage SGLang on the containers that cut over") < names.index(
        "Roll out the servers, one batch of containers at a time")
    roles = [(task.get("ansible.builtin.import_role") or {}) for task in staging["tasks"]]
    installed = [index for index, role in enumerate(roles) if role.get("name") == "llmops.serving.sglang" and
                 "tasks_from" not in role]
    checked = [index for index, role in enumerate(roles) if role == {"name": "llmops.serving.flash_attn",
                                                                     "tasks_from": "check"}]
    assert installed and checked and installed[0] < checked[0], roles
    assert staging["tasks"][checked[0]]["when"] == "flash_attn_enabled | default(false) | bool"
