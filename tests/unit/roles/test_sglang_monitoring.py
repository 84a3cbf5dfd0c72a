# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_monitoring prepares the textfile directory and verdict_textfile writes into it, through ansible-playbook on
this machine (connection local, a directory under tmp): a pending state, then the verdict, that promtool accepts; a
rerun of the role changes nothing; check mode writes nothing."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import sys

import yaml

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_verdict_metrics import PASSED
from ansible_collections.llmops.serving.tests.support.promtool import check_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def playbook(tmp_path, textfile_dir):
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([{
        "name": "Monitoring on this machine",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {
            # This virtualenv's Python runs the modules (interpreter discovery may find a Python without a working shim).
            "ansible_python_interpreter": sys.executable,
            "sglang_monitoring_textfile_dir": str(textfile_dir),
            "sglang_monitoring_textfile_owner": pwd.getpwuid(os.getuid()).pw_name,
            "sglang_monitoring_textfile_group": grp.getgrgid(os.getgid()).gr_name,
        },
        "tasks": [
            {"name": "Prepare the textfile directory", "ansible.builtin.include_role": {"name": "llmops.serving.sglang_monitoring"}},
            {"name": "Announce the verification", "llmops.serving.verdict_textfile": {
                "summary": {"instance": "qwen36", "deployment_id": PASSED["deployment_id"], "status": "pending"},
                "directory": str(textfile_dir), "pending_timeout": 1800},
             "register": "pending"},
            {"name": "Write the verdict", "llmops.serving.verdict_textfile": {"summary": PASSED, "directory": str(textfile_dir)},
             "changed_when": False},
        ],
    }]))
    return path


def run(tmp_path, *args):
    environment = {"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    return ansible_playbook(str(playbook(tmp_path, tmp_path / "textfile")), "-i", "localhost,", *args,
                            environment=environment, cwd=REPO)


def test_the_role_prepares_the_directory_and_the_verdict_lands_in_it(tmp_path):
    first = run(tmp_path)
    assert not first.failed, first.summary()
    directory = tmp_path / "textfile"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    assert os.listdir(directory) == ["llmops_sglang_verdict_qwen36.prom"]
    content = (directory / "llmops_sglang_verdict_qwen36.prom").read_text()
    assert 'status="passed"' in content and check_metrics(content) == (0, "")
    pending = first.task_results("Announce the verification")[0]
    assert "llmops_sglang_verification_deadline_timestamp_seconds" in pending["metrics"]

    again = run(tmp_path)
    assert not again.failed, again.summary()
    role_changes = [task for task in again.changed_tasks() if "sglang_monitoring" in task]
    assert role_changes == []


def test_check_mode_creates_nothing_and_predicts_the_writes(tmp_path):
    checked = run(tmp_path, "--check")
    assert not checked.failed, checked.summary()
    assert not (tmp_path / "textfile").exists()
    assert checked.task_results("Announce the verification")[0]["changed"]
