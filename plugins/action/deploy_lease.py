# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy_lease: the controller's half (documentation: plugins/modules/deploy_lease.py).

The module runs where the lease is (the container's node) and cannot tell whether the run holding a lease still runs:
that run is an ansible-playbook process on a controller. This plugin, in the run's worker on the controller, says
which run this is, and when another run holds the lease asks whether that run's process is gone (then takes it over,
compare-and-swap on that run's ID) or refuses with the holder named.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.serving.plugins.module_utils import deploy_lease
from ansible_collections.llmops.serving.plugins.plugin_utils import deploy_run

MODULE = "llmops.serving.deploy_lease"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _lease_module(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # the module needs no temporary files of the action's
        args = dict(self._task.args)
        if args.get("run") is None:
            args["run"] = deploy_run.this_run()
        args.setdefault("replace", [])
        if not isinstance(args["replace"], list):
            raise AnsibleActionFail("replace must be a list of run IDs, not %r" % (args["replace"],))
        outcome = self._lease_module(args, task_vars)
        holder = outcome.get("holder")
        held_by_another = (outcome.get("failed") and isinstance(holder, dict) and isinstance(holder.get("run"), dict)
                           and args.get("state", "present") == "present")
        if held_by_another:
            state = deploy_run.state_of(holder["run"])
            if state == deploy_run.GONE:
                retry = dict(args, replace=list(args["replace"]) + [holder["run"]["id"]])
                outcome = self._lease_module(retry, task_vars)
                if not outcome.get("failed"):
                    outcome.setdefault("warnings", []).append(
                        "took over the deploy lease %s of %s: that run's ansible-playbook is gone (killed, crashed or "
                        "its machine rebooted), so what it left unfinished is this run's to converge" % (
                            args.get("path"), deploy_lease.describe(holder)))
            else:
                outcome["msg"] = self._refusal(args.get("path"), holder, state)
            outcome["holder_state"] = state
        result.update(outcome)
        return result

    @staticmethod
    def _refusal(path, holder, state):
        who = deploy_lease.describe(holder)
        if state == deploy_run.ALIVE:
            return ("%s holds the deploy lease %s and is still running (its ansible-playbook is PID %s on this "
                    "controller): this run changes nothing until that one has ended; wait for it, then run again" % (
                        who, path, holder["run"].get("pid")))
        return ("%s holds the deploy lease %s; it is a run of another controller (or one whose process cannot be "
                "checked from here), so this run does not take it over. Once that run is known to be over, run again "
                "with -e llmops_deploy_lease_break=%s" % (who, path, holder["run"]["id"]))
