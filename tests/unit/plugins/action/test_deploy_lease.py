# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy.yml's first and last plays (the deploy leases) through ansible-playbook on this machine, as written there:
a second run started while the first holds the leases is refused before its first change, naming the run that holds
them; a killed run's leases are taken over by the next run of this controller; another controller's lease stops the
run (the leases it took are given back) until the operator breaks it by its ID."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import yaml

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook, program, run_env

REPO = pathlib.Path(__file__).resolve().parents[4]
KILL_SWITCH = REPO / "tests" / "support" / "callback_plugins"
HOLD = "Hold the leases"
HOSTS = {"llm-a": 201, "llm-b": 202}


def lease_playbook(tmp_path):
    """deploy.yml's lease plays around a play that only marks that it ran (where a run is held or killed)."""
    plays = yaml.safe_load((REPO / "playbooks" / "deploy.yml").read_text())
    take, give_back = plays[0], plays[-1]
    assert take["name"] == "Take the deploy lease of every container", take["name"]
    assert give_back["name"] == "Give back the deploy lease of every container", give_back["name"]
    for play in (take, give_back):
        play["vars_files"] = [str(REPO / "playbooks" / name) for name in play["vars_files"]]
    hold = {"name": HOLD, "delegate_to": "localhost",
            "ansible.builtin.copy": {"dest": str(tmp_path / "changed-{{ inventory_hostname }}"), "content": "changed\n"}}
    middle = {"name": "Change the containers", "hosts": "sglang_servers", "gather_facts": False, "tasks": [hold]}
    playbook = tmp_path / "deploy-leases.yml"
    playbook.write_text(yaml.safe_dump([take, middle, give_back], sort_keys=False))
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": dict(local, llmops_deploy_lease_dir=str(tmp_path / "node" / "run" / "lock" / "llmops-serving")),
        "children": {
            "pve_nodes": {"hosts": {"pve1": {}}},
            "sglang_servers": {"hosts": dict((host, {"llmops_pve_node": "pve1", "pve_container_vmid": vmid})
                                             for host, vmid in HOSTS.items())},
            "localhost_group": {"hosts": {"localhost": {}}}}}}))
    return playbook, inventory


def lease_file(tmp_path, host):
    return tmp_path / "node" / "run" / "lock" / "llmops-serving" / ("lxc-%d.json" % HOSTS[host])


def environment():
    return {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}


def deploy(tmp_path, *args):
    playbook, inventory = lease_playbook(tmp_path)
    return ansible_playbook(str(playbook), *args, inventory=str(inventory), environment=environment(), cwd=str(REPO))


def changed(tmp_path):
    return sorted(path.name for path in tmp_path.glob("changed-*"))


def test_a_second_run_while_the_first_holds_the_leases_is_refused_before_any_change(tmp_path):
    playbook, inventory = lease_playbook(tmp_path)
    mark = tmp_path / "second-run"
    second = ["env", "-u", "LLMOPS_TEST_RUN_ARGV", "-u", "LLMOPS_TEST_KILL_AT_TASK", "-u", "ANSIBLE_CALLBACK_PLUGINS",
              program("ansible-playbook"), "-i", str(inventory), str(playbook)]
    first = ansible_playbook(str(playbook), inventory=str(inventory), cwd=str(REPO), environment=dict(
        environment(), ANSIBLE_CALLBACK_PLUGINS=str(KILL_SWITCH), LLMOPS_TEST_KILL_AT_TASK=HOLD,
        LLMOPS_TEST_KILL_MARK=str(mark), LLMOPS_TEST_RUN_ARGV=json.dumps(second)))
    assert first.rc == 0, first.summary()
    said = mark.read_text()
    rc, output = said.split("\n", 1)
    assert rc != "0", said
    assert "Another run is deploying; nothing was changed." in output, output[-3000:]
    for host in HOSTS:
        assert "%s: run " % host in output and "is still running" in output, output[-3000:]
    # The second run changed nothing (only the first one's hold ran), took nothing and left nothing behind.
    assert changed(tmp_path) == ["changed-llm-a", "changed-llm-b"]
    assert [lease_file(tmp_path, host).exists() for host in HOSTS] == [False, False]
    taken = first.task_results("Take the container's deploy lease")
    assert [result["acquired"] for result in taken] == [True, True]
    # The leases are the run's bookkeeping: the only changes are the play's own.
    assert sorted(first.changed_tasks()) == ["%s on %s" % (HOLD, host) for host in sorted(HOSTS)]


def test_a_killed_runs_leases_are_taken_over_by_the_next_run_of_this_controller_and_given_back(tmp_path):
    playbook, inventory = lease_playbook(tmp_path)
    argv = [program("ansible-playbook"), "-i", str(inventory), str(playbook)]
    killed = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True, timeout=300, check=False,
                            start_new_session=True, env=run_env(dict(
                                environment(), ANSIBLE_CALLBACK_PLUGINS=str(KILL_SWITCH), LLMOPS_TEST_KILL_AT_TASK=HOLD)))
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    left = dict((host, json.loads(lease_file(tmp_path, host).read_text())["run"]) for host in HOSTS)
    assert left["llm-a"] == left["llm-b"] and changed(tmp_path) == []
    again = deploy(tmp_path)
    assert again.rc == 0, again.summary()
    taken = again.task_results("Take the container's deploy lease")
    assert [(result["holder_state"], result["took_over"]) for result in taken] == [("gone", left["llm-a"]["id"])] * 2
    assert all("took over the deploy lease" in " ".join(result.get("warnings", [])) for result in taken)
    assert changed(tmp_path) == ["changed-llm-a", "changed-llm-b"]
    assert [lease_file(tmp_path, host).exists() for host in HOSTS] == [False, False]


def test_another_controllers_lease_stops_the_run_until_the_operator_breaks_it(tmp_path):
    foreign = {"id": "other-laptop/777/20261205T010000Z", "controller": "other-laptop", "user": "ops", "pid": 777,
               "start_ticks": 1, "started": "2026-12-05T01:00:00Z", "machine": "f" * 32, "boot": "some-boot"}
    path = lease_file(tmp_path, "llm-b")
    path.parent.mkdir(parents=True, mode=0o700)
    path.parent.chmod(0o700)
    path.write_text(json.dumps({"format": 1, "run": foreign, "taken": "2026-12-05T01:00:01Z"}))
    path.chmod(0o600)
    refused = deploy(tmp_path)
    assert refused.rc != 0
    said = refused.text
    assert "llm-b: run other-laptop/777/20261205T010000Z (ops on other-laptop, started 2026-12-05T01:00:00Z) holds" in said
    assert "a run of another controller" in said and "-e llmops_deploy_lease_break=other-laptop/777/20261205T010000Z" in said
    # Nothing changed; llm-a's lease, taken before the refusal was known, was given back; llm-b's is as it was.
    assert changed(tmp_path) == [] and not lease_file(tmp_path, "llm-a").exists()
    assert json.loads(path.read_text())["run"] == foreign
    # Check mode is refused the same way and writes nothing.
    checked = deploy(tmp_path, "--check")
    assert checked.rc != 0 and "a run of another controller" in checked.text
    assert not lease_file(tmp_path, "llm-a").exists() and json.loads(path.read_text())["run"] == foreign
    broken = deploy(tmp_path, "-e", "llmops_deploy_lease_break=other-laptop/777/20261205T010000Z")
    assert broken.rc == 0, broken.summary()
    assert [result["took_over"] for result in broken.task_results("Take the container's deploy lease")] == [
        None, "other-laptop/777/20261205T010000Z"]
    assert changed(tmp_path) == ["changed-llm-a", "changed-llm-b"] and not path.exists()
    assert sorted(os.listdir(path.parent)) == [
        "lxc-201.json.lock", "lxc-202.json.lock"]
