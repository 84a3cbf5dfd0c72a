# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""controller_report: write a report of this run on the controller, inside the worker, without running a module.

A copy delegated to localhost runs two modules (stat, then copy) in two new Python processes per host; a fleet's
unchanged rerun writes one verification summary per server, so the report is written here instead (documentation:
plugins/modules/controller_report.py).
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    content=dict(type="str", required=True),
    mode=dict(type="str", default="0644"),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # The file is written by the controller itself: no connection to the target is needed.
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # unused: nothing goes to the target
        _spec, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        path = os.path.abspath(args["path"])
        try:
            mode = int(args["mode"], 8)
        except ValueError:
            raise AnsibleActionFail("mode %r is not an octal number" % args["mode"]) from None
        if mode > 0o777:
            raise AnsibleActionFail("mode %s may only hold permission bits" % args["mode"])
        try:
            atomic_file.atomic_write(path, args["content"].encode("utf-8"), mode)
        except OSError as exc:
            raise AnsibleActionFail("cannot write the report %s on the controller: %s" % (path, exc.strerror or exc)) from None
        # A report of this run, not a change to any host (reruns stay changed=0); written in check mode too.
        result.update(changed=False, path=path)
        return result
