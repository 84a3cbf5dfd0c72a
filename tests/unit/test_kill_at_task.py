# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault tests' kill switch (tests/support/callback_plugins/kill_at_task.py) kills exactly where it is told."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

CALLBACKS = pathlib.Path(__file__).resolve().parents[1] / "support" / "callback_plugins"
PLAYBOOK = """---
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: First
      ansible.builtin.file: {path: "%(dir)s/first", state: touch}
      changed_when: true
      notify: Handler
    - name: Second
      ansible.builtin.file: {path: "%(dir)s/second", state: touch}
    - name: Run the role
      ansible.builtin.include_role: {name: killable}
  handlers:
    - name: Handler
      ansible.builtin.file: {path: "%(dir)s/handler", state: touch}

- name: Later play
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Second
      ansible.builtin.file: {path: "%(dir)s/later", state: touch}
"""


ROLE_TASKS = """---
- name: In the role
  ansible.builtin.file: {path: "%(dir)s/role_task", state: touch}
  changed_when: true
  notify: Role handler
"""
ROLE_HANDLERS = """---
- name: Role handler
  ansible.builtin.file: {path: "%(dir)s/role_handler", state: touch}
"""


def play(tmp_path, target, wrapper=None, in_play="", run_argv=None):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK % {"dir": tmp_path})
    role = tmp_path / "roles" / "killable"
    for part, text in (("tasks", ROLE_TASKS), ("handlers", ROLE_HANDLERS)):
        (role / part).mkdir(parents=True, exist_ok=True)
        (role / part / "main.yml").write_text(text % {"dir": tmp_path})
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), LLMOPS_TEST_KILL_AT_TASK=target,
               LLMOPS_TEST_KILL_MARK=str(tmp_path / "mark"), LLMOPS_TEST_KILL_IN_PLAY=in_play,
               LLMOPS_TEST_RUN_ARGV=json.dumps(run_argv) if run_argv else "",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", str(playbook),
            "-e", "ansible_python_interpreter=" + sys.executable]
    if wrapper:
        argv = wrapper + argv
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False, start_new_session=True)


def made(tmp_path):
    return sorted(name for name in ("first", "second", "handler", "role_task", "role_handler", "later") if (tmp_path / name).exists())


ALL = ["first", "handler", "later", "role_handler", "role_task", "second"]


@pytest.mark.parametrize("target, before", [
    ("Second", ["first"]),
    ("Handler", ["first", "role_task", "second"]),
    # A role's task and handler, by their bare names and as ansible shows them.
    ("In the role", ["first", "second"]),
    ("killable : In the role", ["first", "second"]),
    ("Role handler", ["first", "handler", "role_task", "second"]),
])
def test_the_run_dies_when_the_named_task_starts_and_nothing_of_it_runs(tmp_path, target, before):
    finished = play(tmp_path, target)
    assert finished.returncode == -9, finished.stdout + finished.stderr
    assert made(tmp_path) == before
    assert (tmp_path / "mark").read_text() == target + "\n"


def test_in_a_named_play_only_that_plays_task_is_the_one(tmp_path):
    finished = play(tmp_path, "Second", in_play="Later play")
    assert finished.returncode == -9, finished.stdout + finished.stderr
    assert made(tmp_path) == [name for name in ALL if name != "later"]


def test_with_a_command_it_runs_it_once_before_the_task_and_the_run_goes_on(tmp_path):
    # The command sees the run exactly before "Second" of the later play: everything of the first play is done.
    probe = "import os, sys; print(sorted(n for n in os.listdir(sys.argv[1]) if n != 'mark' and '.' not in n))"
    finished = play(tmp_path, "Second", in_play="Later play", run_argv=[sys.executable, "-c", probe, str(tmp_path)])
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert made(tmp_path) == ALL
    seen = (tmp_path / "mark").read_text().splitlines()
    assert seen[0] == "0" and seen[1] == repr(sorted([name for name in ALL if name != "later"] + ["roles"])), seen


def test_unarmed_it_does_nothing(tmp_path):
    finished = play(tmp_path, "")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert made(tmp_path) == ALL and not (tmp_path / "mark").exists()


def test_it_never_kills_a_process_group_the_run_does_not_lead(tmp_path):
    # ansible-playbook under a shell that leads the group: the switch refuses (ansible warns and goes on).
    finished = play(tmp_path, "Second", wrapper=["bash", "-c", '"$@"; exit $?', "bash"])
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "does not lead its process group" in finished.stdout + finished.stderr
    assert made(tmp_path) == ALL and not (tmp_path / "mark").exists()
