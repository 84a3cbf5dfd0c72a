# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Hugging Face Hub stand-in (simulators/hf_hub) for tests: a root with the stand-in model, the server as a
subprocess on 127.0.0.1 with ports it picks itself, and the real `hf` of the project's virtualenv pointed at it; and a
hostile server on 127.0.0.1 that answers whatever a test tells it to (``hostile``)."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from ansible_collections.llmops.serving.tests.support.waiting import wait_until

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HUB_SOURCE = os.path.join(REPO_ROOT, "simulators", "hf_hub")
if HUB_SOURCE not in sys.path:
    sys.path.insert(0, HUB_SOURCE)

from hf_hub_sim import model, repos  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order

MODEL_REPO = model.REPO_ID
MODEL_COMMIT = model.COMMIT
# The real CLI of the pinned huggingface_hub (requirements/dev.txt), beside the interpreter running the tests.
HF_CLI = os.path.join(os.path.dirname(sys.executable), "hf")


def make_root(directory, tokens=None):
    """A hub root with the stand-in model and ``tokens`` ({token: {"user", "access"}})."""
    repos.write_tokens(directory, tokens or {})
    model.write_model(directory)
    return directory


def make_tls_cert(directory):
    """A self-signed certificate for 127.0.0.1 (openssl): (cert, key); skips the test without openssl."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    cert, key = os.path.join(directory, "hub.pem"), os.path.join(directory, "hub.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=hf-hub-sim", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class HubProcess:
    """One stand-in server: ``endpoint``, ``cdn``, the fault file (``set_faults``) and the request log
    (``requests()``)."""

    def __init__(self, workdir, root, tls=None, tree_page_size=None, faults=None):
        self.workdir = workdir
        self.root = root
        self.ready_file = os.path.join(workdir, "hub.ready")
        self.faults_file = os.path.join(workdir, "hub-faults.json")
        self.log_file = os.path.join(workdir, "hub-requests.jsonl")
        self.output = os.path.join(workdir, "hub.out")
        self.ca_file = tls[0] if tls else None
        if faults:
            self.set_faults(faults)
        argv = [sys.executable, "-m", "hf_hub_sim", "serve", "--root", root, "--host", "127.0.0.1", "--port", "0",
                "--cdn-port", "0", "--ready-file", self.ready_file, "--faults", self.faults_file,
                "--request-log", self.log_file]
        if tls:
            argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        if tree_page_size:
            argv += ["--tree-page-size", str(tree_page_size)]
        env = dict(os.environ, PYTHONPATH=HUB_SOURCE)
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(  # pylint: disable=consider-using-with
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        try:
            wait_until(self._ready, 30, "the hub stand-in's ready file")
        except BaseException:
            # Not yet in the fixture's list: stop it here, or it keeps running with its ports.
            self.stop()
            raise
        with open(self.ready_file, encoding="utf-8") as handle:
            ready = json.load(handle)
        self.endpoint, self.cdn = ready["endpoint"], ready["cdn"]

    def _ready(self):
        if self.process.poll() is not None:
            with open(self.output, encoding="utf-8", errors="replace") as handle:
                pytest.fail("the hub stand-in exited with %s: %s" % (self.process.returncode, handle.read()[-2000:]))
        return os.path.exists(self.ready_file)

    def set_faults(self, faults):
        tmp = self.faults_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(faults, handle)
        os.replace(tmp, self.faults_file)

    def requests(self):
        if not os.path.exists(self.log_file):
            return []
        with open(self.log_file, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def hf_env(self, token=None, home=None):
        """The environment for the real `hf` against this server (no token unless given)."""
        env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
        env.update(HF_ENDPOINT=self.endpoint, HF_HUB_DISABLE_UPDATE_CHECK="1", HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HOME=home or os.path.join(self.workdir, "hf-home"), NO_COLOR="1")
        if token:
            env["HF_TOKEN"] = token
        if self.ca_file:
            env["SSL_CERT_FILE"] = self.ca_file
        return env

    def hf_download(self, repo, local_dir, revision=None, token=None, timeout=120):
        """Run the real `hf download` (CompletedProcess, text)."""
        if not os.path.exists(HF_CLI):
            pytest.skip("the pinned huggingface_hub (hf) is not installed in this virtualenv")
        argv = [HF_CLI, "download", repo, "--local-dir", local_dir]
        if revision:
            argv += ["--revision", revision]
        return subprocess.run(argv, env=self.hf_env(token), capture_output=True, text=True, timeout=timeout,
                              check=False)


@pytest.fixture
def hf_hub(tmp_path):
    """hf_hub(tokens=None, tls=False, tree_page_size=None, faults=None, root=None) -> HubProcess; stopped at
    teardown."""
    started = []

    def _start(tokens=None, tls=False, tree_page_size=None, faults=None, root=None):
        workdir = str(tmp_path / ("hub-%d" % len(started)))
        os.makedirs(workdir)
        root = root or make_root(os.path.join(workdir, "root"), tokens)
        hub = HubProcess(workdir, root, make_tls_cert(workdir) if tls else None, tree_page_size, faults)
        started.append(hub)
        return hub

    yield _start
    for hub in started:
        hub.stop()


# -- a hostile server -------------------------------------------------------------------------------------------------


class Hostile(http.server.BaseHTTPRequestHandler):
    """Answers what a test put in ``server.answers`` by path; records what it was sent."""

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def do_GET(self):  # pylint: disable=invalid-name
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = self.server.answers.get(self.path.split("?")[0], (404, {}, b"{}"))
        if callable(body):
            body = body(self)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET


@pytest.fixture
def hostile():
    servers = []

    def _start(answers):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
        server.answers, server.seen = answers, []
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return server, "http://127.0.0.1:%d" % server.server_address[1]

    yield _start
    for server in servers:
        server.shutdown()
        server.server_close()
