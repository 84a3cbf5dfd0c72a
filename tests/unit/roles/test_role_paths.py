# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' names and paths come from deployment_layout: sglang_service's variables, and sglang_verify's with and
without what sglang_service published in the play."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import instance_paths
from ansible_collections.llmops.serving.tests.unit.roles.templar import render

SERVICE_VARS = ("roles/sglang_service/defaults/main.yml", "roles/sglang_service/vars/main.yml")
VERIFY_VARS = ("roles/sglang_verify/defaults/main.yml", "roles/sglang_verify/vars/main.yml")
VERIFY_PATHS = "{{ {'unit': _sglang_verify_unit, 'log': _sglang_verify_log, 'record': _sglang_verify_record} }}"


def verify_paths(variables):
    return render(VERIFY_PATHS, dict({"playbook_dir": "/p", "inventory_hostname": "h"}, **variables), VERIFY_VARS)


def test_sglang_service_puts_each_file_where_the_modules_look_for_it():
    rendered = render(
        "{{ [_sglang_service_paths, _sglang_service_unit, _sglang_service_unit_path, _sglang_service_server_env,"
        " _sglang_service_deployment_env, _sglang_service_log_dir, _sglang_service_cache_dir, _sglang_service_sampling_file,"
        " _sglang_service_secrets_file] }}",
        {"sglang_service_instance": "m", "sglang_service_state_dir": "/srv/state", "sglang_service_log_root": "/var/log/x"},
        SERVICE_VARS)
    expected = instance_paths("m", state_dir="/srv/state", log_root="/var/log/x")
    assert rendered == [expected, expected["unit"], expected["unit_path"], expected["server_env"], expected["deployment_env"],
                        expected["log_dir"], expected["cache_dir"], expected["sampling_path"],
                        expected["secrets_config"]]


def test_sglang_verify_alone_finds_the_instance_by_the_same_definition():
    expected = instance_paths("qwen36")
    assert verify_paths({}) == {"unit": expected["unit"], "log": expected["current_log"], "record": expected["record_path"]}
    expected = instance_paths("other", state_dir="/srv/state", log_root="/var/log/x")
    assert verify_paths({"sglang_verify_instance": "other", "sglang_verify_state_dir": "/srv/state",
                         "sglang_verify_log_root": "/var/log/x"}) == {
        "unit": expected["unit"], "log": expected["current_log"], "record": expected["record_path"]}


PUBLISHED = {"instance": "m", "unit": "sglang-m.service", "current_log": "/published/current.log",
             "record_path": "/published/deployment.json"}


def test_sglang_verify_takes_what_sglang_service_published_for_the_instance():
    assert verify_paths({"sglang_service_instance": "m", "sglang_service_paths": PUBLISHED}) == {
        "unit": "sglang-m.service", "log": "/published/current.log", "record": "/published/deployment.json"}


def test_sglang_verify_of_another_instance_ignores_what_was_published():
    expected = instance_paths("other")
    assert verify_paths({"sglang_verify_instance": "other", "sglang_service_paths": PUBLISHED}) == {
        "unit": expected["unit"], "log": expected["current_log"], "record": expected["record_path"]}


def test_an_instance_name_that_escapes_the_roots_fails_the_templating():
    with pytest.raises(AssertionError, match="not a valid instance name"):
        verify_paths({"sglang_verify_instance": "../etc"})
