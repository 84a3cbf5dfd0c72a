# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""node_exporter itself reading a textfile directory, for the tests: Debian's ``prometheus-node-exporter`` (the package
sglang_monitoring installs on a container when asked; scripts/host-packages.sh installs it on the test host).

promtool checks the exposition format; node_exporter's textfile collector is what really reads the verdict files, and
it has rules of its own (it drops a file whose metrics clash, and reports that as node_textfile_scrape_error 1).

Without the program the tests that need it are skipped with the reason, except under ``make test``
(LLMOPS_REQUIRE_PROMTOOL=1, set after the host packages are installed), where a missing one is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import urllib.request

import pytest

MISSING = ("prometheus-node-exporter is not installed (Debian package prometheus-node-exporter; scripts/host-packages.sh "
           "installs it)")
PROGRAM = "prometheus-node-exporter"
# How long node_exporter may take to say it listens; it says so within milliseconds on an idle machine.
START_TIMEOUT = 120
ATTEMPTS = 5


def node_exporter():
    """The node_exporter executable; skips the test (or fails it under make test) when there is none."""
    path = shutil.which(PROGRAM)
    if path is None:
        if os.environ.get("LLMOPS_REQUIRE_PROMTOOL") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return path


def _free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(program, directory, port):
    """Start node_exporter on 127.0.0.1:port; returns the process once it logged that it listens, or None when it
    exited first (the port was taken in the meantime)."""
    process = subprocess.Popen(
        [program, "--collector.disable-defaults", "--collector.textfile",
         "--collector.textfile.directory=%s" % directory, "--web.listen-address=127.0.0.1:%d" % port],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    listening = threading.Event()
    said = []

    def read_log():
        for line in process.stderr:
            said.append(line)
            if 'msg="Listening on"' in line:
                listening.set()
        listening.set()  # end of the log: the process is gone

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    if not listening.wait(START_TIMEOUT):
        process.kill()
        process.wait()
        raise AssertionError("node_exporter did not say it listens within %d s: %s" % (START_TIMEOUT, "".join(said)))
    if process.poll() is not None:
        process.wait()
        return None, "".join(said)
    return process, "".join(said)


def scrape_textfiles(directory):
    """Run node_exporter (textfile collector only) on ``directory``, scrape /metrics once, stop it; the scraped text."""
    program = node_exporter()
    said = ""
    for _attempt in range(ATTEMPTS):
        port = _free_loopback_port()
        process, said = _start(program, directory, port)
        if process is None:
            continue
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60) as response:
                return response.read().decode("utf-8")
        finally:
            process.terminate()
            process.wait()
    raise AssertionError("node_exporter did not start in %d attempts: %s" % (ATTEMPTS, said))
