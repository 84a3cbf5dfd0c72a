# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark how an unchanged rerun of deploy.yml grows with the fleet: one container against N, in one run.

Run from the repository root as root, with no sandbox up (it builds one with N containers and removes it; --keep
leaves it up):
    .venv/bin/python tests/bench/bench_fleet_rerun.py [--containers 4] [--reruns 3] [--max-ratio 1.5] [--keep]

After the first deploy of all N containers (SANDBOX_CONTAINERS=N), it times unchanged reruns with
`--limit llm-qwen-a` and over the whole fleet, alternately, and prints both medians and their ratio. Then it rolls a
package change out to the N containers (one more installer argument: a new SGLang virtualenv on each, staged in
parallel, then the serial cutover) and prints how the time splits between staging and cutover. The CPU seconds the
machine spent busy in each rerun say how much of the ratio is work that the machine's CPUs cannot run side by side
(the controller, the containers and the simulated servers share them here). Issue 15's target: N=4
costs at most 1.5 x one container. Exit 1 when the ratio exceeds --max-ratio, or when a rerun changed anything.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_playbook  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.tests.support.sandbox_inventory import (  # noqa: E402  pylint: disable=wrong-import-position
    INVENTORY, SANDBOX, ansible_environment)


STAGING_PLAY = "Stage SGLang on the containers that cut over"
CUTOVER_PLAY = "Roll out the servers, one batch of containers at a time"


def play_seconds(run, play):
    """Wall time of one play of a run: its first task's start to its last task's end, over every host."""
    times = [(datetime.datetime.fromisoformat(item.duration["start"].rstrip("Z")),
              datetime.datetime.fromisoformat(item.duration["end"].rstrip("Z")))
             for item in run.results if item.play == play and item.duration]
    return (max(end for _start, end in times) - min(start for start, _end in times)).total_seconds() if times else 0.0


def machine_cpu_seconds():
    """CPU seconds the whole machine spent busy since boot (/proc/stat: every state but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def deploy_run(*args):
    """deploy.yml on the sandbox inventory, an AnsibleRun; exits when it fails."""
    run = ansible_playbook("deploy.yml", *args, inventory=INVENTORY, cwd=str(REPO), timeout=7200,
                           environment=ansible_environment())
    if run.rc != 0:
        raise SystemExit("deploy.yml %s failed (%s)" % (" ".join(args), run.summary(4000)))
    return run


def deploy(*args):
    """deploy.yml on the sandbox inventory: (seconds, changed task runs, hosts in the rollout); exits when it fails."""
    cpu_before = machine_cpu_seconds()
    run = deploy_run(*args)
    run.cpu_seconds = machine_cpu_seconds() - cpu_before
    changed = sum(1 for item in run.results if item.result.get("changed"))
    rolled = sorted({item.host for item in run.results if item.host.startswith("llm-qwen-")})
    return run.seconds, changed, rolled, run


def play_breakdown(run):
    """[(play, wall seconds, task runs)] of a run, in play order."""
    plays = []
    for item in run.results:
        if not plays or plays[-1] != item.play:
            plays.append(item.play)
    return [(play, play_seconds(run, play), sum(1 for item in run.results if item.play == play)) for play in plays]


def sandbox(action, containers):
    run = subprocess.run(["bash", str(REPO / "scripts" / "sandbox.sh"), action], cwd=str(REPO), check=False, timeout=3600,
                         env=dict(os.environ, SANDBOX_CONTAINERS=str(containers)))
    if run.returncode != 0:
        raise SystemExit("scripts/sandbox.sh %s failed (rc=%d)" % (action, run.returncode))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=4)
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    options = parser.parse_args()
    if SANDBOX.exists():
        raise SystemExit("a sandbox exists in %s: run `make sandbox-down` first" % SANDBOX)
    one, fleet = [], []
    last = {}
    try:
        sandbox("prepare", options.containers)
        first_seconds, _changed, rolled, _run = deploy()
        if len(rolled) != options.containers:
            raise SystemExit("the first deploy reached %s, not %d containers" % (rolled, options.containers))
        for _run in range(max(options.reruns, 1)):
            for target, args in ((one, ("--limit", "llm-qwen-a")), (fleet, ())):
                seconds, changed, _rolled, run = deploy(*args)
                if changed:
                    raise SystemExit("an unchanged rerun (%s) changed %d task runs" % (" ".join(args) or "fleet", changed))
                target.append(seconds)
                last[id(target)] = run
        upgrade = deploy_run("-e", json.dumps({"sglang_installer_extra_args": ["--no-compile"]}))
        staged = sorted({item.host for item in upgrade.results if item.play == STAGING_PLAY})
        cut_over = sorted({item.host for item in upgrade.results if item.play == CUTOVER_PLAY})
        if len(staged) != options.containers or len(cut_over) != options.containers:
            raise SystemExit("the package change staged %s and cut over %s" % (staged, cut_over))
    finally:
        if not options.keep:
            sandbox("down", 2)
    one_median, fleet_median = statistics.median(one), statistics.median(fleet)
    ratio = fleet_median / one_median
    print("\nbench_fleet_rerun: unchanged rerun of deploy.yml, 1 vs %d containers (%s)"
          % (options.containers, time.strftime("%Y-%m-%d %H:%M")))
    print("| %-40s | %-10s |" % ("measure", "value"))
    print("|%s|%s|" % ("-" * 42, "-" * 12))
    for row in (("first deploy, %d containers" % options.containers, "%.1f s" % first_seconds),
                ("unchanged rerun, 1 container (median of %d)" % len(one), "%.1f s" % one_median),
                ("unchanged rerun, %d containers (median of %d)" % (options.containers, len(fleet)), "%.1f s" % fleet_median),
                ("%d containers / 1 container" % options.containers, "%.2f" % ratio),
                ("CPU busy, 1 container (last rerun)", "%.1f s" % last[id(one)].cpu_seconds),
                ("CPU busy, %d containers (last rerun)" % options.containers, "%.1f s" % last[id(fleet)].cpu_seconds),
                ("  %d containers / 1 container" % options.containers,
                 "%.2f" % (last[id(fleet)].cpu_seconds / last[id(one)].cpu_seconds)),
                ("machine's CPUs", "%d" % (os.cpu_count() or 1)),
                ("package change to %d containers" % options.containers, "%.1f s" % upgrade.seconds),
                ("  of which staging (parallel)", "%.1f s" % play_seconds(upgrade, STAGING_PLAY)),
                ("  of which cutover (serial)", "%.1f s" % play_seconds(upgrade, CUTOVER_PLAY)),
                ("target", "<= %.2f" % options.max_ratio)):
        print("| %-40s | %-10s |" % row)
    runs_one = ["%.1f" % seconds for seconds in one]
    runs_fleet = ["%.1f" % seconds for seconds in fleet]
    print("runs: 1 container %s; %d containers %s" % (runs_one, options.containers, runs_fleet))
    # Where the time of the last rerun of each went: play by play, 1 container and N.
    print("\n| %-58s | %-14s | %-14s |" % ("play (last unchanged rerun)", "1 container", "%d containers" % options.containers))
    print("|%s|%s|%s|" % ("-" * 60, "-" * 16, "-" * 16))
    fleet_plays = dict((play, (seconds, tasks)) for play, seconds, tasks in play_breakdown(last[id(fleet)]))
    for play, seconds, tasks in play_breakdown(last[id(one)]):
        other = fleet_plays.get(play, (0.0, 0))
        print("| %-58s | %5.1f s %4d t | %5.1f s %4d t |" % (play[:58], seconds, tasks, other[0], other[1]))
    return 0 if ratio <= options.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
