# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The parser and resolution API of SGLang 0.5.23's sglang/srt/server_args.py, backed by sglang-sim.

Real SGLang: `prepare_server_args(argv)` builds `argparse.ArgumentParser(prog="sglang serve")`, calls
`ServerArgs.add_cli_args(parser)`, merges a `--config` YAML and parses; the server then calls
`ServerArgs.resolve_once()` and `check_server_args()`, which refuse combinations such as an unknown speculative
algorithm. Here the options are sglang-sim's spec dumped from 0.5.23's parser, and the resolution is the
simulator's model of SGLang's (sglang_sim/resolution.py, same exceptions and messages).
"""
from __future__ import annotations

import argparse

from sglang_sim import cli, resolution, server_args as sim_server_args


class ServerArgs:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
        self._resolved = None

    @staticmethod
    def add_cli_args(parser):
        for entry in sim_server_args.load_spec()["actions"]:
            if entry["action"] != "help":
                sim_server_args.add_spec_argument(parser, entry)

    @classmethod
    def from_cli_args(cls, args):
        return cls(**cli.server_args_fields(args))

    def _fields(self):
        return {name: value for name, value in vars(self).items() if not name.startswith("_")}

    def resolve_once(self):
        if self._resolved is None:
            self._resolved = resolution.run_resolution_pipeline(self._fields())

    def check_server_args(self):
        resolution.check_server_args(self.resolved_dict())

    def resolved_dict(self):
        self.resolve_once()
        return dict(self._resolved)

    @property
    def launch_command(self):
        return getattr(self, "_launch_command", None)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    argv = sim_server_args.merge_config(argv, parser)
    raw_args = parser.parse_args(argv)
    server_args = ServerArgs.from_cli_args(raw_args)
    server_args._launch_command = " ".join(argv)  # pylint: disable=protected-access,attribute-defined-outside-init
    return server_args
