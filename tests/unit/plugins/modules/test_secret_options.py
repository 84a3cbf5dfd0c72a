# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every option of every module that carries a secret is no_log, so Ansible masks its value wherever it would print it
(the invocation in results, -vvv output, the callback's JSON). The argument specs are read from the modules themselves."""

from __future__ import annotations

import importlib
import pathlib
import re
from unittest import mock

import pytest
from ansible.module_utils import basic

MODULES = sorted(path.stem for path in (pathlib.Path(__file__).parents[4] / "plugins" / "modules").glob("*.py")
                 if path.stem != "__init__")
SECRET_NAME = re.compile(r"(api_?key|password|passwd|secret|token_value|token_secret|credential)", re.IGNORECASE)


class SpecRead(Exception):
    """Raised by the patched AnsibleModule constructor, carrying the spec it was given."""


def argument_spec(name):
    module = importlib.import_module("ansible_collections.llmops.serving.plugins.modules." + name)
    if not hasattr(module, "main"):
        # Documentation of an action plugin (it runs on the controller): the plugin's own spec.
        return importlib.import_module("ansible_collections.llmops.serving.plugins.action." + name).ARGUMENT_SPEC

    def capture(self, argument_spec, **kwargs):
        del self, kwargs
        raise SpecRead(argument_spec)

    with mock.patch.object(basic.AnsibleModule, "__init__", capture):
        with pytest.raises(SpecRead) as caught:
            module.main()
    return caught.value.args[0]


def options(spec, prefix=""):
    for name, option in spec.items():
        yield prefix + name, option
        yield from options(option.get("options") or {}, prefix + name + ".")


@pytest.mark.parametrize("name", MODULES)
def test_secret_options_are_no_log(name):
    secret = [(option_name, option.get("no_log")) for option_name, option in options(argument_spec(name))
              if SECRET_NAME.search(option_name.rsplit(".", 1)[-1])]
    assert all(no_log is True for dummy_name, no_log in secret), secret


def test_the_probe_sends_a_key_and_hides_it():
    assert argument_spec("generation_probe")["api_key"]["no_log"] is True
