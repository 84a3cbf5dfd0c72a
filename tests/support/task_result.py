# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ansible-core's own judgement of a module result (is it skipped, failed, changed?), for tests that must not guess it.

ansible-core 2.19 builds its TaskResult from the result dict; 2.21 builds it (as CallbackTaskResult) from an internal
UnifiedTaskResult made from the module's result dict. Both are asked the same questions.
"""

from __future__ import annotations

import inspect

from ansible.executor.task_result import TaskResult
from ansible.inventory.host import Host
from ansible.playbook.task import Task


def ansible_task_result(host_name, result):
    """ansible-core's TaskResult for a module's ``result`` dict on ``host_name``."""
    if len(inspect.signature(TaskResult.__init__).parameters) == 4:  # self, host, task, unified result (2.21)
        from ansible._internal._task import UnifiedTaskResult  # pylint: disable=import-outside-toplevel
        return TaskResult(Host(host_name), Task(), UnifiedTaskResult.from_module_result_dict(dict(result)))
    return TaskResult(Host(host_name), Task(), result, {})
