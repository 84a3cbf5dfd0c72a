# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy_run (the controller's half of the deploy lease): every worker of a run names the same run, and a lease's run
counts as gone only when this machine can tell: its process exited, its PID belongs to a later process, a zombie, or
another boot; a run of another machine is never declared gone."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

from ansible_collections.llmops.serving.plugins.module_utils import deploy_lease, procfs
from ansible_collections.llmops.serving.plugins.plugin_utils import deploy_run
from ansible_collections.llmops.serving.tests.support.waiting import wait_until


def _from_worker(queue):
    queue.put(deploy_run.this_run())


def test_a_worker_names_the_process_that_started_it_and_the_identity_is_a_valid_run():
    here = deploy_run.this_run()
    # Not a worker: this process is the run.
    assert here["pid"] == os.getpid()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_from_worker, args=(queue,)) for _index in range(2)]
    for worker in workers:
        worker.start()
    found = [queue.get(timeout=60) for _worker in workers]
    for worker in workers:
        worker.join(timeout=60)
    # Both workers (forks: their command line is their parent's) name the parent, not themselves.
    assert found[0] == found[1] == deploy_run.this_run()
    assert found[0]["id"].startswith("%s/%d/" % (found[0]["controller"], found[0]["pid"]))
    assert deploy_lease.check_run(found[0]) == found[0]
    assert deploy_run.state_of(found[0]) == deploy_run.ALIVE


def test_the_playbooks_of_a_command_line_leave_out_inventories_and_variable_files():
    argv = ["/usr/bin/python3", "/venv/bin/ansible-playbook", "-i", "inventories/example/hosts.yml", "-e",
            "@vars.yml", "--extra-vars", "x.yml", "/repo/deploy.yml", "--limit", "a", "more.yaml"]
    assert deploy_run.playbooks_of(argv) == "deploy.yml, more.yaml"
    assert deploy_run.playbooks_of(["python3", "pytest", "deploy.yml"]) == ""


def test_a_run_whose_process_exited_or_was_replaced_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        run = deploy_run.this_run(pid=child.pid)
        assert deploy_run.state_of(run) == deploy_run.ALIVE
        # The same PID, started at another moment: a later process that got the number, not the run.
        assert deploy_run.state_of(dict(run, start_ticks=run["start_ticks"] + 1)) == deploy_run.GONE
        assert deploy_run.state_of(dict(run, boot="another-boot")) == deploy_run.GONE
        # Another machine's run (or one that recorded no machine or start) cannot be checked from here.
        assert deploy_run.state_of(dict(run, machine="0" * 32)) == deploy_run.UNKNOWN
        assert deploy_run.state_of({key: value for key, value in run.items() if key != "machine"}) == deploy_run.UNKNOWN
        assert deploy_run.state_of({key: value for key, value in run.items() if key != "start_ticks"}) == deploy_run.UNKNOWN
    finally:
        child.kill()
    # Killed and not yet reaped: a zombie is no run.
    wait_until(lambda: procfs.read_stat(child.pid)["state"] == "Z", timeout=60, what="the killed child to be a zombie")
    assert deploy_run.state_of(run) == deploy_run.GONE
    child.wait(timeout=60)
    assert deploy_run.state_of(run) == deploy_run.GONE
