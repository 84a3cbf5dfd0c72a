# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang 0.5.23 command line: parse as prepare_server_args does, resolve as the server does at start.

parse_server_args: every SGLang option, from the spec dumped from the real parser (server_args.py), a --config YAML
merged first (config_file.py), then the log-level lookup prepare_server_args makes right after parsing.
resolve_server_args: the namespace reduced to ServerArgs' fields (ServerArgs.from_cli_args), then what SGLang
resolves and refuses at start (resolution.py); the result is what the `server_args=` line and /server_info show.
"""
from __future__ import annotations

import logging

from sglang_sim import resolution
from sglang_sim.server_args import build_parser, load_spec, merge_config

__all__ = ["build_parser", "parse_server_args", "prepare_server_args", "resolve_server_args", "server_args_fields"]


def prepare_server_args(argv):
    """sglang/srt/server_args.py: prepare_server_args: (namespace, launch_command); argparse errors exit 2.

    launch_command is SGLang's: the parsed argv (a --config file's options merged in) joined with spaces.
    """
    parser = build_parser()
    argv = merge_config(argv, parser)
    namespace = parser.parse_args(argv)
    # prepare_server_args: logging.basicConfig(level=getattr(logging, raw_args.log_level.upper())); --log-level has
    # no choices, so an unknown level fails here with AttributeError, as in SGLang.
    getattr(logging, namespace.log_level.upper())
    return namespace, " ".join(argv)


def parse_server_args(argv):
    """The namespace prepare_server_args parses (`sglang serve: error: ...`, exit 2, on a bad flag)."""
    return prepare_server_args(argv)[0]


def server_args_fields(namespace) -> dict:
    """ServerArgs.from_cli_args: the namespace attributes that are ServerArgs fields (not `config`)."""
    dropped = set(load_spec()["dests_not_in_server_args"])
    return {dest: value for dest, value in vars(namespace).items() if dest not in dropped}


def resolve_server_args(namespace, cuda=None) -> dict:
    """The resolved server args (SGLang resolves after parsing; refusals raise SGLang's exceptions). ``cuda``: what
    torch sees (sglang_sim/cuda.py), as the server resolves; None: as on a CUDA device (resolution.py)."""
    return resolution.resolve(server_args_fields(namespace), cuda)
