# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The parser-building API of SGLang 0.5.23's sglang/srt/server_args.py, with the simulator's flags.

Real SGLang: `prepare_server_args(argv)` builds `argparse.ArgumentParser(prog="sglang serve")`, calls
`ServerArgs.add_cli_args(parser)` and `parser.parse_args(argv)`. The flags here are sglang-sim's subset of
0.5.23's (same names, defaults, abbreviation behaviour; `--cuda-graph-max-bs` is gone as in 0.5.23).
"""
from __future__ import annotations

import argparse

from sglang_sim import cli

# sglang_sim.cli keeps one adder per group of flags, as SGLang's add_cli_args does.
_FLAG_GROUPS = (
    cli._add_model_args,  # pylint: disable=protected-access
    cli._add_serving_args,  # pylint: disable=protected-access
    cli._add_memory_args,  # pylint: disable=protected-access
    cli._add_parallel_args,  # pylint: disable=protected-access
    cli._add_speculative_args,  # pylint: disable=protected-access
    cli._add_cuda_graph_args,  # pylint: disable=protected-access
)


class ServerArgs:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    @staticmethod
    def add_cli_args(parser):
        for add_group in _FLAG_GROUPS:
            add_group(parser)

    @classmethod
    def from_cli_args(cls, args):
        return cls(**cli.resolve_server_args(args))


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))
