# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's input check, which both of its entry points run (main.yml and facts.yml, the one deploy.yml's plan
runs on every container): a version or an environments directory an operator or an attacker typed must never name a
virtualenv outside sglang_envs_dir, because root runs the programs in it. One ansible-playbook run, one local host per
input, each host's verdict read from the json callback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: llmops.serving.sglang
        tasks_from: inputs
"""

ACCEPTED = {
    "release": {"sglang_version": "0.5.23"},
    "post-release": {"sglang_version": "0.5.23.post1"},
    "local-label": {"sglang_version": "0.5.23+cu130"},
    "other-root": {"sglang_envs_dir": "/srv/sglang envs"},
}
REFUSED = {
    "traversal": {"sglang_version": "0.5.23/../../../usr/local/bin"},
    "absolute": {"sglang_version": "/etc"},
    "newline": {"sglang_version": "0.5.23\nExecStartPre=/bin/sh"},
    "empty": {"sglang_version": ""},
    "space": {"sglang_version": "0.5.23 --target /"},
    "relative-root": {"sglang_envs_dir": "opt/sglang/envs"},
    "dotdot-root": {"sglang_envs_dir": "/opt/sglang/../../etc"},
    "control-root": {"sglang_envs_dir": "/opt/sglang\x1b[2Jenvs"},
}


def run_playbook(tmp_path, cases, playbook=PLAYBOOK):
    """The playbook on one local host per case; its json callback report."""
    inventory = {"all": {"hosts": {name: dict(variables, ansible_connection="local", ansible_python_interpreter=sys.executable)
                                   for name, variables in cases.items()}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(playbook)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    run = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                          str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, check=False, env=env, cwd=tmp_path)
    return json.loads(run.stdout)


def run_inputs(tmp_path, cases, check_name="Check the role's inputs"):
    tasks = run_playbook(tmp_path, cases)["plays"][0]["tasks"]
    check = next(task for task in tasks if task["task"]["name"].endswith(check_name))
    published = next(task for task in tasks if task["task"]["name"].endswith("Publish the virtualenv this request installs into"))
    return check["hosts"], published["hosts"]


def test_only_a_release_number_and_an_absolute_plain_root_name_the_virtualenv(tmp_path):
    checked, published = run_inputs(tmp_path, dict(ACCEPTED, **REFUSED))
    for name in ACCEPTED:
        assert not checked[name].get("failed"), (name, checked[name])
        venv = published[name]["ansible_facts"]["sglang_venv"]
        root = ACCEPTED[name].get("sglang_envs_dir", "/opt/sglang/envs")
        assert os.path.dirname(venv) == root and os.path.basename(venv).startswith(ACCEPTED[name].get("sglang_version", "0.5.23") + "-")
    for name in REFUSED:
        assert checked[name].get("failed"), (name, checked[name])
        assert "sglang_version a release number" in checked[name]["msg"], checked[name]
        # The refused host never publishes a virtualenv for the other roles to run.
        assert name not in published


MODEL_ACCEPTED = {
    "model-plain": {"sglang_model_dir": "/models/Qwen3.6-27B", "sglang_model_download_environment": {"HTTPS_PROXY": "x"}},
}
MODEL_REFUSED = {
    # An environment name reaches the root shell that runs hf unquoted (Ansible quotes only the values).
    "env-name-shell": {"sglang_model_download_environment": {"X=1;touch /tmp/pwned;Y": "1"}},
    "env-name-space": {"sglang_model_download_environment": {"A B": "1"}},
    "model-dir-dotdot": {"sglang_model_dir": "/models/../etc"},
    "model-dir-dotdot-end": {"sglang_model_dir": "/models/x/.."},
}


def test_the_model_inputs_refuse_a_shell_in_an_environment_name_and_a_model_dir_that_climbs(tmp_path):
    checked, _published = run_inputs(tmp_path, dict(MODEL_ACCEPTED, **MODEL_REFUSED), "Check the model download's inputs")
    for name in MODEL_ACCEPTED:
        assert not checked[name].get("failed"), (name, checked[name])
    for name in MODEL_REFUSED:
        assert checked[name].get("failed"), (name, checked[name])
        assert "sglang_model_dir must be an absolute path without '..'" in checked[name]["msg"], checked[name]


def test_the_virtualenv_is_named_by_the_release_of_the_interpreter_it_is_made_with(tmp_path):
    # Stand-ins for /usr/bin/python3 before and after the host's upgrade from Debian 12 to 13: each answers the role's
    # version question as that Python does.
    interpreters = {}
    for release in ("3.11", "3.13"):
        path = tmp_path / ("python-%s" % release)
        path.write_text("#!/bin/sh\necho %s\n" % release)
        path.chmod(0o755)
        interpreters[release] = str(path)
    cases = {"debian-12": {"sglang_python": interpreters["3.11"]}, "debian-12-again": {"sglang_python": interpreters["3.11"]},
             "debian-13": {"sglang_python": interpreters["3.13"]}, "missing": {"sglang_python": str(tmp_path / "no-python")}}
    checked, published = run_inputs(tmp_path, cases)
    venvs = dict((name, published[name]["ansible_facts"]["sglang_venv"]) for name in cases)
    assert not any(checked[name].get("failed") for name in cases)
    assert venvs["debian-12"] == venvs["debian-12-again"]
    assert len({venvs["debian-12"], venvs["debian-13"], venvs["missing"]}) == 3
    assert all(os.path.dirname(venv) == "/opt/sglang/envs" for venv in venvs.values())


# As install.yml runs it: facts.yml (which imports inputs.yml) again, under a condition that is false when nothing is
# installed. The skipped read must not rename the virtualenv: the rollout once validated flags with an environment
# that did not exist (rc 127) because a skipped task's register had replaced the release.
SKIPPED_REREAD_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: llmops.serving.sglang
        tasks_from: inputs
    - ansible.builtin.import_role:
        name: llmops.serving.sglang
        tasks_from: facts
      when: false
    - name: Name the virtualenv after the skipped read
      ansible.builtin.debug:
        msg: "{{ _sglang_venv }}"
"""


def test_a_skipped_read_of_the_release_keeps_the_virtualenvs_name(tmp_path):
    python = tmp_path / "python-3.13"
    python.write_text("#!/bin/sh\necho 3.13\n")
    python.chmod(0o755)
    report = run_playbook(tmp_path, {"upgraded": {"sglang_python": str(python)}}, SKIPPED_REREAD_PLAYBOOK)
    tasks = report["plays"][0]["tasks"]
    published = next(task for task in tasks if task["task"]["name"].endswith("Publish the virtualenv this request installs into"))
    skipped = [task for task in tasks if task["task"]["name"].endswith("Read the version of the Python the virtualenv is made with")]
    assert [task["hosts"]["upgraded"].get("skipped", False) for task in skipped] == [False, True]
    named = next(task for task in tasks if task["task"]["name"] == "Name the virtualenv after the skipped read")
    assert named["hosts"]["upgraded"]["msg"] == published["hosts"]["upgraded"]["ansible_facts"]["sglang_venv"]
