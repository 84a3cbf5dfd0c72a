#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run argv probes through SGLang's prepare_server_args (real) or sglang-sim's parser (sim); print the outcomes as JSON.

Usage: python sglang_probe_runner.py real|sim < probes.json > outcomes.json
probes.json: [{"id": ..., "argv": [...], "files": {"name.yaml": "text"}}]; `{dir}` in argv is the folder the
files are written to. One outcome per probe: {"id", "outcome": "accepted" | the last line of the error,
"values": {dest: value} of the ServerArgs fields when accepted, "messages": other stderr lines}.
real: run with SGLang's python (the slow tier's venv); the parsing half of prepare_server_args, exactly:
prepare_server_args itself is called and the values are read from the ServerArgs it returns.
sim: run with any python 3.9+; imports sglang_sim from simulators/sglang_sim.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode(item) for item in value]}
    if isinstance(value, list):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted(encode(item) for item in value)}
    return {"__repr__": repr(value)}


def real_parse(argv):
    from sglang.srt.server_args import ServerArgs, prepare_server_args  # pylint: disable=import-error

    server_args = prepare_server_args(argv)
    fields = {field.name for field in __import__("msgspec").structs.fields(ServerArgs)}
    return {name: getattr(server_args, name) for name in sorted(fields)}


def sim_parse(argv):
    sys.path.insert(0, os.path.join(ROOT, "simulators", "sglang_sim"))
    from sglang_sim import cli  # pylint: disable=import-outside-toplevel

    return cli.server_args_fields(cli.parse_server_args(argv))


def run_probe(parse, probe, workdir):
    probe_dir = os.path.join(workdir, probe["id"])
    os.makedirs(probe_dir, exist_ok=True)
    for name, text in probe.get("files", {}).items():
        with open(os.path.join(probe_dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    argv = [arg.replace("{dir}", probe_dir) for arg in probe["argv"]]
    stderr = io.StringIO()
    values, outcome = None, "accepted"
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            values = parse(argv)
        except SystemExit as error:
            outcome = None if error.code == 0 else "exit %s" % error.code
        except Exception as error:  # pylint: disable=broad-except
            outcome = traceback.format_exception_only(type(error), error)[-1].strip()
        finally:
            # prepare_server_args configures the root logger with the probe's stderr; the next probe gets a fresh one.
            logging.root.handlers.clear()
    lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
    if outcome and outcome.startswith("exit "):
        # argparse: usage lines, then `prog: error: message`.
        outcome = lines[-1] if lines else outcome
        lines = lines[:-1]
    messages = [line for line in lines if not line.startswith(("usage:", " "))]
    return {"id": probe["id"], "outcome": outcome, "values": None if values is None else encode(values),
            "messages": messages}


def main(which):
    parse = {"real": real_parse, "sim": sim_parse}[which]
    probes = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as workdir:
        outcomes = [run_probe(parse, probe, workdir) for probe in probes]
    json.dump(outcomes, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
