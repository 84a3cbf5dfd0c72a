# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.deployment_paths import FilterModule, deployment_paths
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import instance_paths


def test_the_filter_gives_the_layout_the_modules_use():
    assert deployment_paths("qwen36") == instance_paths("qwen36")
    assert deployment_paths("q", config_dir="/c", state_dir="/s", log_root="/var/log/x") == instance_paths(
        "q", config_dir="/c", state_dir="/s", log_root="/var/log/x")
    assert FilterModule().filters()["deployment_paths"] is deployment_paths


def test_the_roles_names_for_an_instance():
    paths = deployment_paths("molecule", config_dir="/etc/llmops-serving", state_dir="/var/lib/llmops-serving",
                             log_root="/var/log/llmops-serving")
    assert (paths["unit"], paths["current_log"]) == ("sglang-molecule.service", "/var/log/llmops-serving/molecule/current.log")
    assert paths["record_path"] == "/var/lib/llmops-serving/molecule/deployment.json"


@pytest.mark.parametrize("instance, kwargs, why", [
    ("../x", {}, "not a valid instance name"),
    (None, {}, "expects an instance name"),
    ("q", {"state_dir": "relative"}, "state_dir must be an absolute path"),
    ("q", {"log_root": None}, "log_root must be an absolute path"),
])
def test_bad_input_fails_the_templating_with_the_reason(instance, kwargs, why):
    with pytest.raises(AnsibleFilterError, match=why):
        deployment_paths(instance, **kwargs)
