#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse SGLang server flags with the INSTALLED SGLang's own argument parser, without launching a server.

Usage: python sglang-validate-args.py [--] FLAG...   (run with the SGLang virtualenv's python)

It builds the parser the way `sglang.srt.server_args.prepare_server_args` does (ArgumentParser(prog="sglang serve")
plus `ServerArgs.add_cli_args(parser)`) and calls `parse_args(argv)`, and stops there: `ServerArgs.from_cli_args`
and `__post_init__` would probe GPUs and the model. A removed or renamed flag exits 2 with argparse's own message,
for example `sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, ...`.
On success it prints a JSON object: the SGLang version and the values of the options the argv set.
"""
from __future__ import annotations

import argparse
import json
import sys

PROG = "sglang serve"


def build_parser():
    """SGLang's parser, built as prepare_server_args builds it."""
    from sglang.srt.server_args import ServerArgs  # pylint: disable=import-error

    parser = argparse.ArgumentParser(prog=PROG)
    ServerArgs.add_cli_args(parser)
    return parser


def sglang_version():
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        # Another distribution may provide the `sglang` import.
        import sglang  # pylint: disable=import-error

        return getattr(sglang, "__version__", None)


def main(argv):
    if argv and argv[0] == "--":
        argv = argv[1:]
    if "--config" in argv:
        # SGLang merges a config file before parsing; the rendered service flags never use one.
        print(f"{PROG}: error: --config is not supported by this validator; pass the flags themselves", file=sys.stderr)
        return 2
    parser = build_parser()
    namespace = parser.parse_args(argv)
    # What the argv changed (abbreviations such as --tp included), for the play's output.
    given = {dest: value for dest, value in vars(namespace).items() if value != parser.get_default(dest)}
    print(json.dumps({"sglang_version": sglang_version(), "parsed": given}, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
