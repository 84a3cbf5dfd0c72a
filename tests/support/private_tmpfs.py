# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A mount namespace of its own, where a test may mount a small tmpfs and fill it: a real full or read-only filesystem."""
from __future__ import annotations

import os
import subprocess

import pytest


def namespace_prefix():
    """The unshare command that gives a process a mount namespace of its own (as root, or in a user namespace)."""
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


def private_tmpfs_prefix(probe_dir):
    """namespace_prefix() once a tmpfs was mounted there on ``probe_dir``; a skip when this machine cannot."""
    prefix = namespace_prefix()
    try:
        probe = subprocess.run(prefix + ["mount", "-t", "tmpfs", "-o", "size=4096", "llmops-probe", str(probe_dir)],
                               capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip("cannot run unshare to mount a test tmpfs: %s" % exc)
    if probe.returncode != 0:
        pytest.skip("this machine cannot mount a tmpfs in a mount namespace of its own (%s): %s"
                    % (" ".join(prefix), probe.stderr.strip()))
    return prefix
