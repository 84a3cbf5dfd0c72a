# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The pure parts of lxc_gpu_passthrough's back ends: the plan's changes as pct arguments and as the API's PUT.
The back ends themselves run in tests/unit/plugins/modules/test_lxc_gpu_passthrough.py."""
from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough import split_changes
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough_api import config_put_params
from ansible_collections.llmops.serving.plugins.module_utils.lxc_passthrough_cli import pct_set_args

CHANGES = [
    {"action": "update", "key": "dev0", "value": "/dev/nvidia0,gid=44", "old_value": "/dev/nvidia0", "reason": "options"},
    {"action": "remove", "key": "dev4", "old_value": "/dev/nvidia0", "reason": "duplicate"},
    {"action": "add", "key": "dev1", "value": "/dev/nvidiactl,gid=44", "reason": "new node"},
    {"action": "remove", "key": "dev5", "old_value": "/dev/nvidiactl", "reason": "duplicate"},
]


def test_split_changes_keeps_the_order_of_the_plan():
    assert split_changes(CHANGES) == ([("dev0", "/dev/nvidia0,gid=44"), ("dev1", "/dev/nvidiactl,gid=44")], ["dev4", "dev5"])
    assert split_changes([]) == ([], [])


def test_pct_set_args_put_the_deletes_last_in_one_option():
    assert pct_set_args(CHANGES) == ["-dev0", "/dev/nvidia0,gid=44", "-dev1", "/dev/nvidiactl,gid=44", "-delete", "dev4,dev5"]
    assert pct_set_args(CHANGES[1:2]) == ["-delete", "dev4"]


def test_config_put_params_carry_the_digest_that_was_read():
    wanted = {"dev0": "/dev/nvidia0,gid=44", "dev1": "/dev/nvidiactl,gid=44", "delete": "dev4,dev5", "digest": "abc123"}
    assert config_put_params(CHANGES, "abc123") == wanted
    assert config_put_params(CHANGES[:1], None) == {"dev0": "/dev/nvidia0,gid=44"}
