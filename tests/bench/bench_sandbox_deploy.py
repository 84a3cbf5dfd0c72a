# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark deploy.yml on the sandbox: the first deploy, the unchanged rerun, and the rerun's cost per task against
the floor Ansible itself sets (a playbook of ansible.builtin.ping tasks of the same shape on the same hosts).

Run from the repository root as root, with no sandbox up (it builds one and removes it; --keep leaves it up):
    .venv/bin/python tests/bench/bench_sandbox_deploy.py [--reruns 3] [--max-ratio 1.5] [--keep]

The floor playbook mirrors the rerun play by play, batch by batch (a serial play reports each batch as a play run of
its own): the same hosts in the same order, the same connection settings (it runs on the same inventory), fact
gathering off as in deploy.yml, and as many ping tasks as the rerun executed per host in that play run (skipped tasks
are not counted: they cost no module run). Ratio = (rerun seconds / rerun
tasks) / (floor seconds / floor tasks); both are medians of --reruns runs taken alternately, so machine noise hits
both alike. Exit 1 when the ratio exceeds --max-ratio.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.tests.support.sandbox_inventory import (  # noqa: E402  pylint: disable=wrong-import-position
    INVENTORY, SANDBOX, ansible_environment)


def run_playbook(path, *args):
    """ansible-playbook on the sandbox inventory with the json callback: (parsed output, seconds); exits when it fails."""
    run = ansible_playbook(str(path), *args, inventory=INVENTORY, cwd=str(REPO), timeout=3600,
                           environment=ansible_environment())
    if run.rc != 0:
        raise SystemExit("%s failed (%s)" % (path, run.summary(4000)))
    return run.require_output(), run.seconds


def sandbox(*args):
    run = subprocess.run(["bash", str(REPO / "scripts" / "sandbox.sh")] + list(args), cwd=str(REPO), check=False, timeout=3600)
    if run.returncode != 0:
        raise SystemExit("scripts/sandbox.sh %s failed (rc=%d)" % (" ".join(args), run.returncode))


def executed_per_play(output):
    """For each play run of a json-callback run (one per batch of a serial play): its hosts, the most tasks any host
    executed, all task runs and the changed ones."""
    shape = []
    for play in output["plays"]:
        counts = {}
        changed = 0
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("skipped"):
                    continue
                counts[host] = counts.get(host, 0) + 1
                changed += 1 if result.get("changed") else 0
        shape.append({"name": play["play"]["name"], "hosts": sorted(counts), "tasks": max(counts.values()) if counts else 0,
                      "executed": sum(counts.values()), "changed": changed})
    return shape


def floor_playbook(shape):
    """One ping play per play run of the rerun: a serial play reports each batch as its own run, on that batch's hosts."""
    plays = []
    for play in shape:
        if not play["tasks"]:
            continue
        plays.append({"name": "Floor for: %s" % play["name"], "hosts": ",".join(play["hosts"]), "gather_facts": False,
                      "tasks": [{"name": "Ping %d" % number, "ansible.builtin.ping": None} for number in range(play["tasks"])]})
    return plays


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    options = parser.parse_args()
    if SANDBOX.exists():
        raise SystemExit("a sandbox exists in %s: run `make sandbox-down` first (the bench measures a first deploy)" % SANDBOX)
    try:
        sandbox("prepare")
        first_output, first_seconds = run_playbook("deploy.yml")
        first_shape = executed_per_play(first_output)
        rerun_seconds, floor_seconds, rerun_shape = [], [], None
        with tempfile.TemporaryDirectory() as tmp:
            floor_path = pathlib.Path(tmp) / "floor.yml"
            for dummy_run in range(max(options.reruns, 1)):
                output, seconds = run_playbook("deploy.yml")
                rerun_shape = executed_per_play(output)
                if any(play["changed"] for play in rerun_shape):
                    raise SystemExit("the rerun changed something: %s" % rerun_shape)
                rerun_seconds.append(seconds)
                floor_path.write_text(json.dumps(floor_playbook(rerun_shape)))
                dummy_output, seconds = run_playbook(floor_path)
                floor_seconds.append(seconds)
    finally:
        if not options.keep:
            sandbox("down")
    rerun_tasks = sum(play["executed"] for play in rerun_shape)
    floor_tasks = rerun_tasks
    rerun_median, floor_median = statistics.median(rerun_seconds), statistics.median(floor_seconds)
    ratio = (rerun_median / rerun_tasks) / (floor_median / floor_tasks)
    rows = [
        ("first deploy (2 containers)", "%.1f s" % first_seconds, "%d task runs" % sum(p["executed"] for p in first_shape)),
        ("unchanged rerun (median of %d)" % len(rerun_seconds), "%.1f s" % rerun_median, "%d task runs, changed=0" % rerun_tasks),
        ("ping floor, same shape (median)", "%.1f s" % floor_median, "%d task runs" % floor_tasks),
        ("rerun per task", "%.0f ms" % (1000 * rerun_median / rerun_tasks), ""),
        ("ping per task", "%.0f ms" % (1000 * floor_median / floor_tasks), ""),
        ("rerun / ping per task", "%.2f" % ratio, "target <= %.2f" % options.max_ratio),
    ]
    print("\nbench_sandbox_deploy: deploy.yml on the sandbox (%s)" % time.strftime("%Y-%m-%d %H:%M"))
    print("| %-32s | %-10s | %-28s |" % ("measure", "value", "note"))
    print("|%s|%s|%s|" % ("-" * 34, "-" * 12, "-" * 30))
    for row in rows:
        print("| %-32s | %-10s | %-28s |" % row)
    print("per play (rerun): " + "; ".join("%s: %d task runs on %d hosts" % (p["name"], p["executed"], len(p["hosts"])) for p in rerun_shape))
    return 0 if ratio <= options.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
