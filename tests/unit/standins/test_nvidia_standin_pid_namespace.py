# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML numbers GPU processes as the caller's PID namespace sees them: a server in a container (its own PID namespace)
allocates under its container PID, and the node's nvidia-smi must list it under its host PID - the number the node's
/proc knows, whose cgroup names the container's unit. A real PID namespace (unshare), not a mock."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.tests.support.waiting import wait_until
from ansible_collections.llmops.serving.tests.unit.standins.test_nvidia_standin import Kit, ns

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace and mknod need root"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is missing"),
]

CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
import nvidia_standin as ns
driver = ns.Driver(sys.argv[2], sys.argv[3], sys.argv[4], "580.95.05")
allocation = driver.allocate(driver.visible_gpus()[0], 1024, "sglang::scheduler_TP0")
print(allocation.record["pid"], flush=True)
time.sleep(120)
"""


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
        return [int(item) for item in handle.read().split()]


def test_the_node_sees_a_container_process_under_its_host_pid(tmp_path):
    kit = Kit(tmp_path)
    standin_dir = os.path.dirname(ns.__file__)
    unshare = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", CHILD, standin_dir,
                                str(kit.proc), str(kit.dev), str(kit.ledger)], stdout=subprocess.PIPE, text=True)
    try:
        recorded = int(unshare.stdout.readline())
        assert recorded == 1  # the first process of its namespace, as a container's init sees itself
        host = wait_until(lambda: children(unshare.pid), timeout=30, what="the namespace's first process")[0]
        query = "--query-compute-apps=pid,process_name,used_memory"
        assert kit.smi(query, "--format=csv,noheader,nounits") == (0, "%d, sglang::scheduler_TP0, 1024\n" % host)
    finally:
        unshare.kill()
        unshare.wait(timeout=30)
