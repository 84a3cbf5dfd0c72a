# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router's input check (tasks/validate.yml): the flags the role owns cannot come in through the extra flags."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO, render

ROUTER_VARS = ("roles/sglang_router/defaults/main.yml", "roles/sglang_router/vars/main.yml")
# A router host as tasks/install.yml leaves it: the interpreter's release read (part of the virtualenv's name).
HOST = {"inventory_hostname": "r", "groups": {"sglang_servers": []}, "_sglang_router_python_release": "3.13"}


def failed_conditions(**variables):
    with open(os.path.join(REPO, "roles/sglang_router/tasks/validate.yml"), encoding="utf-8") as handle:
        task = next(task for task in yaml.safe_load(handle) if task["name"] == "Check the router's inputs")
    conditions = task["ansible.builtin.assert"]["that"]
    holds = render("{{ [%s] }}" % ", ".join("(%s) | bool" % condition for condition in conditions),
                   dict(HOST, **variables), ROUTER_VARS)
    return [condition for condition, held in zip(conditions, holds) if not held]


def test_the_defaults_pass():
    assert failed_conditions() == []


@pytest.mark.parametrize("flag", ["api-key", "worker-urls", "config"])
def test_flags_the_role_owns_are_refused_in_the_extra_flags(flag):
    # config: sglang-router-serve reads the key's credential file from the --config the launcher appends.
    failed = failed_conditions(sglang_router_extra_flags={flag: "x"})
    assert len(failed) == 1 and repr(flag) in failed[0]


def test_dependency_pins_are_name_equals_version_and_join_the_install_request():
    assert failed_conditions(sglang_router_dependency_pins=["fastapi==0.165.0", "pydantic_core==2.50.5", "uvicorn==0.55.0"]) == []
    # An option, a path, a URL, a range or a bare name: pip would read each as something else than a pin.
    for pin in ("--index-url=http://evil.example/simple", "./evil.whl", "https://evil.example/x.whl", "fastapi>=0.1",
                "fastapi", "fastapi==0.165.0 --pre", "fastapi==0.165.0\n--trusted-host=x"):
        failed = failed_conditions(sglang_router_dependency_pins=[pin])
        assert len(failed) == 1 and "sglang_router_dependency_pins" in failed[0], (pin, failed)
    variables = dict(HOST)
    plain = render("{{ [_sglang_router_venv, _sglang_router_install_argv] }}", variables, ROUTER_VARS)
    pinned = render("{{ [_sglang_router_venv, _sglang_router_install_argv] }}",
                    dict(variables, sglang_router_dependency_pins=["fastapi==0.165.0"]), ROUTER_VARS)
    assert pinned[1][1:] == plain[1][1:] + ["fastapi==0.165.0"]
    assert pinned[0] != plain[0], "a new pin is a new install request: a new virtualenv beside the running one"


def test_smg_by_default_and_the_predecessor_for_existing_installs():
    variables = dict(HOST)
    default = render("{{ [sglang_router_package_spec, _sglang_router_install_argv[-1], _sglang_router_venv] }}", variables,
                     ROUTER_VARS)
    assert default[:2] == ["smg==1.13.0", "smg==1.13.0"] and default[2].startswith("/opt/sglang-router/envs/1.13.0-")
    kept = render("{{ [sglang_router_package_spec, _sglang_router_venv] }}",
                  dict(variables, sglang_router_package="sglang-router", sglang_router_version="0.3.2"), ROUTER_VARS)
    assert kept[0] == "sglang-router==0.3.2" and kept[1].startswith("/opt/sglang-router/envs/0.3.2-")
    assert failed_conditions(sglang_router_package="sglang-router", sglang_router_version="0.3.2") == []
    failed = failed_conditions(sglang_router_package="vllm-router")
    assert len(failed) == 1 and "sglang_router_package" in failed[0]


def test_another_release_of_the_same_interpreter_is_another_virtualenv():
    # After an OS upgrade /usr/bin/python3 is 3.13 where it was 3.11: the old environment's compiled wheels (grpcio,
    # PyYAML) are the old Python's, so the request, and the virtualenv, must differ.
    variables = dict(HOST)
    names = [render("{{ _sglang_router_venv }}", dict(variables, _sglang_router_python_release=release),
                    ROUTER_VARS) for release in ("3.11", "3.11", "3.13")]
    assert names[0] == names[1] != names[2]
    assert all(name.startswith("/opt/sglang-router/envs/1.13.0-") for name in names)
