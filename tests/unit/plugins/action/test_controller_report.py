# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""controller_report through ansible-playbook on this machine: the report lands on the controller for a host that
cannot even be connected to, atomically, replacing a symlink rather than writing through it, in check mode too, never
as a change; bad modes and unwritable places fail with the path named."""

from __future__ import annotations

import json
import os
import stat

import yaml

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def run(tmp_path, path, *args, content="{{ {'host': inventory_hostname} | to_nice_json }}\n", mode=None):
    report = {"path": str(path), "content": content}
    if mode is not None:
        report["mode"] = mode
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Reports on the controller",
        # A host no connection reaches: the report needs none.
        "hosts": "unreachable-host",
        "gather_facts": False,
        "vars": {"ansible_host": "192.0.2.1", "ansible_connection": "ssh"},
        "tasks": [{"name": "Write the report", "llmops.serving.controller_report": report, "register": "written"}],
    }]))
    environment = {"ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    return ansible_playbook(str(playbook), "-i", "unreachable-host,", *args, environment=environment, cwd=REPO)


def test_the_report_is_written_on_the_controller_without_a_connection(tmp_path):
    path = tmp_path / "reports" / "deep" / "unreachable-host.json"
    result = run(tmp_path, path)
    assert not result.failed, result.summary()
    assert json.loads(path.read_text()) == {"host": "unreachable-host"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert result.changed_tasks() == []
    assert [name for name in os.listdir(path.parent) if name != "unreachable-host.json"] == []


def test_check_mode_writes_the_report_too_and_a_symlink_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me\n")
    path = tmp_path / "report.json"
    path.symlink_to(target)
    result = run(tmp_path, path, "--check", mode="0600")
    assert not result.failed, result.summary()
    assert not path.is_symlink() and json.loads(path.read_text()) == {"host": "unreachable-host"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert target.read_text() == "keep me\n"


def test_a_bad_mode_or_an_unwritable_place_fails_naming_it(tmp_path):
    for mode in ("rw-r--r--", "4755"):
        result = run(tmp_path, tmp_path / "r.json", mode=mode)
        assert result.failed and mode in " ".join(result.failures()), result.summary()
        assert not (tmp_path / "r.json").exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be\n")
    result = run(tmp_path, blocker / "r.json")
    assert result.failed and "cannot write the report %s" % (blocker / "r.json") in " ".join(result.failures())
