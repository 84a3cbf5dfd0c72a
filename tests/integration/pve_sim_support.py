# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the integration tests against pve-sim share: its command line and the cached container template."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SIM_SOURCE = REPO / "simulators" / "pve_sim"
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
CACHE = pathlib.Path(os.environ.get("PVE_SIM_TEMPLATE_CACHE") or REPO / ".build" / "pve-sim-cache")


def sim_cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(SIM_SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pve_sim"] + [str(arg) for arg in args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def ensure_template():
    """The cached template, rebuilt when it is missing or was built from another recipe (`template check`)."""
    if sim_cli("template", "check", "--output", CACHE / TEMPLATE).returncode == 0:
        return
    if shutil.which("debootstrap") is None or shutil.which("zstd") is None:
        pytest.skip("no current template in %s and no debootstrap/zstd to build one" % CACHE)
    CACHE.mkdir(parents=True, exist_ok=True)
    built = sim_cli("template", "build", "--output", CACHE / TEMPLATE, timeout=1200)
    if built.returncode != 0:
        pytest.skip("could not build the debootstrap template (Debian mirror unreachable?): %s" % built.stderr[-500:])
