# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf-hub-sim command line: `generate` writes the stand-in model into a root, `serve` serves a root."""
from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys

from hf_hub_sim import faults as fault_switches
from hf_hub_sim import model, repos, server


def cmd_generate(args):
    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    if not os.path.exists(os.path.join(root, "hub.json")):
        repos.write_tokens(root, {})
    directory = model.write_model(root, args.config)
    print("hf-hub-sim: wrote %s (commit %s) into %s" % (model.REPO_ID, model.COMMIT, directory))
    return 0


def cmd_serve(args):
    try:
        hub = repos.Hub(args.root)
        initial = None
        if args.faults and os.path.exists(args.faults):
            with open(args.faults, encoding="utf-8") as handle:
                initial = fault_switches.validate(json.load(handle))
    except (repos.HubRootError, fault_switches.FaultError, OSError, ValueError) as error:
        sys.stderr.write("hf-hub-sim: %s\n" % error)
        return 2
    tls_context = None
    if args.tls_cert:
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_context.load_cert_chain(args.tls_cert, args.tls_key)
    state = server.State(hub, fault_switches.Faults(args.faults, initial), server.RequestLog(args.request_log),
                         args.tree_page_size, "https" if tls_context else "http")

    def stop(signum, frame):  # pylint: disable=unused-argument
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve(state, args.host, args.port, args.cdn_port, args.ready_file, tls_context)
    except OSError as error:
        sys.stderr.write("hf-hub-sim: %s\n" % error)
        return 2
    return 0


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="hf-hub-sim",
                                     description="A stand-in for the Hugging Face Hub's download API.")
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser("generate", help="write the stand-in model (Qwen/Qwen3.6-27B) into a root")
    generate.add_argument("--root", required=True)
    generate.add_argument("--config", default=model.DEFAULT_CONFIG, help="the config.json the stand-in model carries")
    generate.set_defaults(func=cmd_generate)
    serve = commands.add_parser("serve", help="serve the repositories of a root")
    serve.add_argument("--root", required=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="the hub's port (0: any free one, see --ready-file)")
    serve.add_argument("--cdn-port", type=int, default=0, help="the port LFS downloads are redirected to (0: any)")
    serve.add_argument("--ready-file", help="written (JSON: endpoint, cdn, pid) once both ports accept connections")
    serve.add_argument("--faults", help="JSON file of fault switches, read again whenever it changes")
    serve.add_argument("--request-log", help="append one JSON line per request")
    serve.add_argument("--tree-page-size", type=int, default=1000, help="entries per page of a tree listing")
    serve.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--tls-key", help="the certificate's key (PEM)")
    serve.set_defaults(func=cmd_serve)
    args = parser.parse_args(argv)
    if args.command == "serve" and bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.command == "serve" and args.tree_page_size < 1:
        parser.error("--tree-page-size must be at least 1")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)
