from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.cli_flags import cli_flags


def test_renders_values_booleans_and_lists_in_order():
    flags = {
        "model-path": "/models/Qwen3.6-27B",
        "tp-size": 2,
        "mamba-full-memory-ratio": 0.5,
        "enable-metrics": True,
        "disable-radix-cache": False,
        "api-key": None,
        "chat-template": "",
        "cuda-graph-bs": [1, 2, 4],
    }
    assert cli_flags(flags) == [
        "--model-path", "/models/Qwen3.6-27B",
        "--tp-size", "2",
        "--mamba-full-memory-ratio", "0.5",
        "--enable-metrics",
        "--cuda-graph-bs", "1", "2", "4",
    ]


def test_values_with_spaces_stay_one_word():
    assert cli_flags({"served-model-name": "qwen 3.6"}) == ["--served-model-name", "qwen 3.6"]


@pytest.mark.parametrize("bad", [{"--tp-size": 2}, {"tp size": 2}, {"": 1}, {"json": {"a": 1}}, ["--tp-size", "2"]])
def test_rejects_what_is_not_a_flag_mapping(bad):
    with pytest.raises(AnsibleFilterError):
        cli_flags(bad)
