# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test-only callback: SIGKILL the whole ansible-playbook run when a named task or handler is about to start.

The fault tests need a run that dies at an exact point, as when the operator's laptop loses power: nothing of that task
runs, no handler fires, no worker finishes, every SSH connection drops. The task start callbacks run in the main
process before the task is queued to any worker, so killing the process group there is exact, not a race.

Enabled by ANSIBLE_CALLBACK_PLUGINS pointing at this directory, armed by LLMOPS_TEST_KILL_AT_TASK (the task's or
handler's name, exactly: bare, or as a role's task is shown, "<role> : <name>"), and only in the play named by
LLMOPS_TEST_KILL_IN_PLAY when that is set (a task that several plays run: a verification after a cutover, not the one of
the servers that do not change). Before the kill it writes the task's
name to LLMOPS_TEST_KILL_MARK (when set), so that the test can tell a run killed there from one that failed earlier.
It refuses to kill a process group the run does not lead (the test must start ansible-playbook in a session of its
own), so it can never kill the test runner.

With LLMOPS_TEST_RUN_ARGV (a JSON list) it runs that command instead, once, at the first matching task, and waits for
it before the task is queued (a fault done to a target at an exact point of the run: a server killed right before its
verification); the mark then holds the command's exit status and output.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: kill_at_task
type: aggregate
short_description: Test-only; kill the run when a named task starts
description:
  - SIGKILLs ansible-playbook's process group when the task or handler named by E(LLMOPS_TEST_KILL_AT_TASK) starts.
"""

import json
import os
import signal
import subprocess

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kill_at_task"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._target = os.environ.get("LLMOPS_TEST_KILL_AT_TASK", "")
        self._mark = os.environ.get("LLMOPS_TEST_KILL_MARK", "")
        self._in_play = os.environ.get("LLMOPS_TEST_KILL_IN_PLAY", "")
        self._argv = json.loads(os.environ.get("LLMOPS_TEST_RUN_ARGV") or "null")
        self._play = None

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def _maybe_kill(self, task):
        # A role's task or handler is named "<role> : <name>" by get_name(); the bare name (task.name) matches too.
        if not self._target or self._target not in (task.get_name(), task.name):
            return
        if self._in_play and self._play != self._in_play:
            return
        if self._argv:
            argv, self._argv, self._target = self._argv, None, ""
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
            if self._mark:
                with open(self._mark, "w", encoding="utf-8") as handle:
                    handle.write("%d\n%s%s" % (done.returncode, done.stdout, done.stderr))
            return
        if os.getpgrp() != os.getpid():
            raise RuntimeError("kill_at_task: ansible-playbook does not lead its process group; start it in a session "
                               "of its own (the kill would reach its parent)")
        if self._mark:
            with open(self._mark, "w", encoding="utf-8") as handle:
                handle.write(self._target + "\n")
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._maybe_kill(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._maybe_kill(task)
