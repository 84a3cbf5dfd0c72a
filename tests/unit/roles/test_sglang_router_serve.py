# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang-router-serve (roles/sglang_router/files): the key comes from the credential file and never from the command
line, and the router started is the one package the virtualenv holds - smg or sglang-router - run in a separate Python
against stand-in packages that expose the real ones' two functions (parse_router_args, launch_router)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

SERVE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "sglang_router" / "files" / "sglang-router-serve"
# A stand-in launch module: parses --host/--port/--api-key like the real parser and prints what it would start.
LAUNCH = '''
import argparse, json
def parse_router_args(args):
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--api-key", dest="api_key")
    return parser.parse_args(args)
def launch_router(router_args):
    print(json.dumps({"module": __name__, "host": router_args.host, "port": router_args.port, "api_key": router_args.api_key}))
'''


def packages(tmp_path, *names):
    site = tmp_path / "site"
    for name in names:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
        (site / name / "launch_router.py").write_text(LAUNCH)
    site.mkdir(parents=True, exist_ok=True)
    return site


def serve(site, *argv):
    # -s: no user site; PYTHONPATH the stand-in packages only, as the virtualenv holds only its own.
    return subprocess.run([sys.executable, "-s", str(SERVE)] + list(argv), env={"PYTHONPATH": str(site)},
                          capture_output=True, text=True, timeout=60, check=False)


def test_smg_is_started_with_the_key_from_the_credential_file(tmp_path):
    secrets = tmp_path / "router-secrets.json"
    secrets.write_text(json.dumps({"api-key": "sk-from-file"}))
    done = serve(packages(tmp_path, "smg"), "--host", "127.0.0.1", "--port", "30080", "--config", str(secrets))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"module": "smg.launch_router", "host": "127.0.0.1", "port": 30080,
                                       "api_key": "sk-from-file"}


def test_sglang_router_is_started_for_an_existing_install(tmp_path):
    done = serve(packages(tmp_path, "sglang_router"), "--port", "30080")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["module"] == "sglang_router.launch_router"


def test_both_routers_or_none_or_a_key_on_the_command_line_are_refused(tmp_path):
    both = serve(packages(tmp_path / "both", "smg", "sglang_router"), "--port", "30080")
    assert both.returncode != 0 and "exactly one of the packages smg and sglang-router" in both.stderr
    assert "smg.launch_router, sglang_router.launch_router" in both.stderr
    none = serve(packages(tmp_path / "none"), "--port", "30080")
    assert none.returncode != 0 and "(found the modules: none)" in none.stderr
    key = serve(packages(tmp_path / "key", "smg"), "--api-key", "sk-visible-in-proc")
    assert key.returncode != 0 and "refusing --api-key on the command line" in key.stderr
    assert "sk-visible-in-proc" not in key.stdout + key.stderr
