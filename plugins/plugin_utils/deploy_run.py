# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who this run of ansible-playbook is, and whether the run named by a deploy lease still runs (on the controller).

A run is its ansible-playbook process: the controller's name, that process's PID and start (clock ticks after boot),
the boot it runs in and the machine. A lease left by a run of this machine and boot whose process is gone (or whose PID
now belongs to a later process) can be taken over; a run of another machine cannot be checked from here, so its lease
is only ever broken by the operator.
"""

from __future__ import annotations

import getpass
import hashlib
import multiprocessing
import os
import re
import socket
import subprocess

from ansible_collections.llmops.serving.plugins.module_utils import procfs

PROC_ROOT = "/proc"
MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")
ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


def _read_first_line(path):
    try:
        with open(path, "r", encoding="ascii", errors="replace") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def machine():
    """A digest of this machine's ID (the ID itself stays here), or "" when it has none."""
    for path in MACHINE_ID_PATHS:
        found = _read_first_line(path)
        if found:
            return hashlib.sha256(("llmops.serving deploy run\n" + found).encode("ascii")).hexdigest()[:32]
    return ""


def boot(proc_root=None):
    return _read_first_line(os.path.join(proc_root or PROC_ROOT, "sys", "kernel", "random", "boot_id"))


def playbook_process():
    """The PID of this run's ansible-playbook: the process that started this worker (ansible-core runs each task in a
    multiprocessing worker of the main process), or this process when it is not a worker.

    Not found by walking up /proc by command line: a worker is a fork and shows the same command line as its parent,
    and a run started by another run's task has ansible-playbook above it too."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


def _ps_start(pid):
    """When ``pid`` started, as ps prints it ("" when ps cannot say)."""
    try:
        done = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _controller_name():
    # Printed in messages and part of the run ID: only the characters a host name has.
    return re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:63] or "controller"


# Options of ansible-playbook whose value is a separate argument that may end in .yml (not a playbook).
_VALUE_OPTIONS = ("-i", "--inventory", "--inventory-file", "-e", "--extra-vars", "--vault-password-file",
                  "--vault-id", "--private-key", "--key-file")


def playbooks_of(argv):
    """The playbook files an ansible-playbook command line names (their base names, comma-separated)."""
    argv = list(argv or [])
    starts = [index for index, item in enumerate(argv[:2]) if os.path.basename(item).startswith("ansible-playbook")]
    if not starts:
        return ""
    found = []
    for index in range(starts[0] + 1, len(argv)):
        item = argv[index]
        if item.endswith((".yml", ".yaml")) and not item.startswith("-") and argv[index - 1] not in _VALUE_OPTIONS:
            found.append(os.path.basename(item))
    return ", ".join(found)


def this_run(pid=None, proc_root=None):
    """The identity of the run of ansible-playbook ``pid`` (this run's by default): a dict for deploy_lease's ``run``."""
    controller = _controller_name()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.geteuid())
    process = playbook_process() if pid is None else pid
    run = {"controller": controller, "user": user[:64]}
    stat = procfs.read_stat(process, proc_root)
    if stat is None:
        # No /proc (a macOS controller): ps says when ansible-playbook started, so the ID is the same in every worker
        # of the run and differs from a later run's with the same PID. Whether that run still runs is never decided
        # from here (no machine, no boot): its lease is broken by the operator only.
        started = _ps_start(process)
        token = hashlib.sha256(started.encode("utf-8")).hexdigest()[:12] if started else "unknown-start"
        run.update(pid=process, id="%s/%d/%s" % (controller, process, token))
        return run
    btime = procfs.read_btime(proc_root)
    started = procfs.iso_utc(procfs.start_epoch(stat["starttime"], btime, procfs.clock_ticks_per_second()))
    playbook = "".join(char for char in playbooks_of(procfs.read_cmdline(process, proc_root)) if char.isprintable())
    if playbook:
        run["playbook"] = playbook[:200]
    run.update(pid=process, start_ticks=stat["starttime"], started=started, machine=machine(), boot=boot(proc_root),
               id="%s/%d/%s" % (controller, process, started.replace("-", "").replace(":", "")))
    return run


def state_of(run, proc_root=None):
    """Whether the run of a lease still runs: ALIVE, GONE (its boot ended, its process exited or its PID now belongs to
    another process), or UNKNOWN (a run of another controller, or one that recorded no process start)."""
    here = machine()
    if not run.get("machine") or not here or run["machine"] != here or "start_ticks" not in run or not run.get("boot"):
        return UNKNOWN
    if run["boot"] != boot(proc_root):
        return GONE
    stat = procfs.read_stat(run["pid"], proc_root)
    if stat is None or stat["starttime"] != run["start_ticks"] or stat["state"] in ("Z", "X"):
        return GONE
    return ALIVE
