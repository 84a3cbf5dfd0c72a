# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.systemd_environment import FilterModule, systemd_environment


def test_one_assignment_per_variable_in_the_given_order():
    assert systemd_environment([("B", "b c"), ("A", "$HOME"), ("P", "100%"), ("N", 1)]) == [
        '"B=b c"', '"A=$HOME"', "P=100%%", "N=1"]
    assert systemd_environment({"CUDA_HOME": "/usr/local/cuda"}) == ["CUDA_HOME=/usr/local/cuda"]
    assert FilterModule().filters()["systemd_environment"] is systemd_environment


@pytest.mark.parametrize("variables, message", [
    ({"A": "x\ny"}, r"sglang_service_environment\['A'\] contains a newline"),
    ({"A-B": "x"}, "'A-B' is not an environment variable name"),
    ({"A": None}, "the value of A is not a string"),
    ("A=1", "must be a mapping or a list"),
])
def test_bad_names_and_values_are_refused(variables, message):
    with pytest.raises(AnsibleFilterError, match=message):
        systemd_environment(variables, "sglang_service_environment")
