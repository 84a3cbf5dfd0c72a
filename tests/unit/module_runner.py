"""Run a module's main() in-process with ansible-core's own test helper and capture its result.

ansible-core 2.19 ships ``ansible.module_utils.testing.patch_module_args``; exit_json/fail_json are
patched to raise so a test gets the result dict back instead of the process exiting.
"""

from __future__ import annotations

import contextlib
import json
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    """Raised instead of exit_json; ``result`` holds the module's return value."""

    def __init__(self, result):
        super().__init__(json.dumps(result, default=str)[:500])
        self.result = result


class ModuleFail(Exception):
    """Raised instead of fail_json; ``result`` holds msg and the other returned keys."""

    def __init__(self, result):
        super().__init__(result.get("msg"))
        self.result = result


def _exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise ModuleExit(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["failed"] = True
    kwargs["msg"] = msg
    raise ModuleFail(kwargs)


@contextlib.contextmanager
def patched_exits():
    with mock.patch.multiple(basic.AnsibleModule, exit_json=_exit_json, fail_json=_fail_json):
        yield


def run_module(main, args, check_mode=False, diff=False):
    """Call ``main()`` with ``args``; return (result, failed)."""
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), patched_exits():
        try:
            main()
        except ModuleExit as exc:
            return exc.result, False
        except ModuleFail as exc:
            return exc.result, True
    raise AssertionError("the module returned without calling exit_json or fail_json")
