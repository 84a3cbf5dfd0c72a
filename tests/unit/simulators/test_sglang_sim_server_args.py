# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's parser is the committed spec (dumped from SGLang 0.5.23), its converters and its --config merge."""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os

import pytest
import yaml

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import SIM_SOURCE, http
# A fixture, requested by the tests under this name: these runs use TP 1, on an H200.
from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import start_sim_on_one_big_card as start_sim  # pylint: disable=unused-import
from sglang_sim import arg_types, cli, config_file, server_args


DUMP_TOOL = os.path.join(SIM_SOURCE, "tools", "dump_sglang_args.py")


def load_dump_tool():
    spec = importlib.util.spec_from_file_location("dump_sglang_args", DUMP_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spec_is_sglang_0_5_23s_parser():
    spec = server_args.load_spec()
    assert (spec["sglang_version"], spec["prog"], spec["allow_abbrev"]) == ("0.5.23", "sglang serve", True)
    assert len(spec["actions"]) > 500
    assert spec["dests_not_in_server_args"] == ["config", "help"]


def test_the_simulators_parser_dumps_back_to_the_spec():
    """Every option is rebuilt as dumped: the dump tool run over the simulator's parser gives the committed spec."""
    tool = load_dump_tool()
    names = {converter: name for name, converter in arg_types.TYPE_CONVERTERS.items()}
    parser = server_args.build_parser()
    original = tool.type_name
    tool.type_name = lambda converter: None if converter is None else names[converter]
    try:
        rebuilt = [tool.dump_action(action) for action in parser._actions]  # pylint: disable=protected-access
    finally:
        tool.type_name = original
    assert rebuilt == server_args.load_spec()["actions"]


def test_an_unknown_converter_or_action_stops_the_build():
    entry = dict(server_args.load_spec()["actions"][1], type="sglang.srt.utils.common.new_converter")
    with pytest.raises(ValueError, match="no converter for type sglang.srt.utils.common.new_converter"):
        server_args.add_spec_argument(argparse.ArgumentParser(), entry)
    entry = dict(server_args.load_spec()["actions"][1], action="DeprecatedAliasStoreAction")
    with pytest.raises(ValueError, match="action DeprecatedAliasStoreAction is not implemented"):
        server_args.add_spec_argument(argparse.ArgumentParser(), entry)


@pytest.mark.parametrize("text, value", [("128k", 128000), ("1Ki", 1024), ("25.6k", 25600), ("2M", 2000000),
                                         (" 4096 ", 4096), ("-1", -1), ("1Gi", 1 << 30)])
def test_human_readable_int(text, value):
    assert arg_types.human_readable_int(text) == value


@pytest.mark.parametrize("text, message", [
    ("1.5Ki", "Decimals are not allowed with IEC suffixes like 'Ki'. Use an integer IEC value such as '1Ki', or an "
              "SI value such as '1.5K'."),
    ("128K", "Invalid integer value: '128K'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
             "Suffixes are case-sensitive."),
])
def test_human_readable_int_refusals(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        arg_types.human_readable_int(text)
    assert str(raised.value) == message


def test_json_list_type_is_strict_like_orjson():
    assert arg_types.json_list_type('["a", 1]') == ["a", 1]
    for text in ("[NaN]", "[1,]", "[%d]" % (1 << 64)):
        with pytest.raises(argparse.ArgumentTypeError, match="Invalid JSON list"):
            arg_types.json_list_type(text)


YAML_DOCUMENTS = [
    "model-path: /models/Qwen3.6-27B\ntp-size: 2\n",
    "# comment\n---\napi-key: \"s3cr3t \\\"key\\\"\\u00e9\"  # trailing\nname: 'it''s'\n",
    "a: yes\nb: Off\nc: ~\nd:\ne: null\nf: 0x1F\ng: 0o17\nh: 017\ni: 1_000\nj: 1:30\nk: 1.5e+3\nl: .inf\nm: -.5\n",
    "list: [1, two, \"3\", 4.0]\nempty: []\nblock:\n  - a\n  - 2\nsame-indent:\n- x\n- true\n",
    "nested:\n  decode:  1\n  prefill: two\nafter: 3\n",
    "key with spaces: value with spaces\nurl: http://host:8000/path\ncolon-in-value: a:b\n",
    "",
    "# only a comment\n",
]


@pytest.mark.parametrize("document", YAML_DOCUMENTS)
def test_yaml_subset_reads_like_pyyaml(document):
    expected = yaml.safe_load(document)
    got = config_file.load_yaml_subset(document)
    if isinstance(expected, dict) and "l" in expected:
        assert math.isinf(got.pop("l")) and math.isinf(expected.pop("l"))
    assert got == expected


@pytest.mark.parametrize("document", ["a: &x 1\nb: *x\n", "a: |\n  text\n", "a: {b: 1}\n", "a:\n  b:\n    c: 1\n",
                                      "- a\n- b\n", "a: 2026-01-01\n", "a: 1\n---\nb: 2\n"])
def test_yaml_subset_refuses_what_it_cannot_read(document):
    with pytest.raises(config_file.YamlSubsetError, match="install PyYAML"):
        config_file.load_yaml_subset(document)


def test_config_merge_puts_the_file_first_so_the_command_line_wins(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("model-path: /models/q\napi-key: from-file\ntp-size: 2\nenable-metrics: true\n"
                      "trust-remote-code: false\ncuda-graph-bs-decode: [1, 2]\n")
    namespace, launch_command = cli.prepare_server_args(["--config", str(config), "--tp-size", "4"])
    assert (namespace.api_key, namespace.tp_size, namespace.enable_metrics, namespace.cuda_graph_bs_decode) == \
        ("from-file", 4, True, [1, 2])
    # SGLang's launch_command is the merged argv: the file's values are in it.
    assert launch_command == ("--model-path /models/q --api-key from-file --tp-size 2 --enable-metrics "
                              "--cuda-graph-bs-decode 1 2 --tp-size 4")


def test_config_file_values_show_in_server_args_and_server_info(start_sim, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("api-key: from-file\nmax-running-requests: 8\nspeculative-algorithm: nextn\n")
    sim = start_sim(["--config", str(config)])
    sim.wait_ready()
    info = json.loads(http("GET", sim.url + "/server_info", headers={"Authorization": "Bearer from-file"})[2])
    assert (info["api_key"], info["max_running_requests"], info["speculative_algorithm"]) == ("from-file", 8, "EAGLE")
    assert "--api-key from-file" in info["launch_command"]
    server_args_line = next(line for line in sim.log().splitlines() if "] server_args={" in line)
    assert "'api_key': 'from-file'" in server_args_line and "'max_running_requests': 8" in server_args_line
