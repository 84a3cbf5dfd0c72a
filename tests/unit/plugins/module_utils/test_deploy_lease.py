# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy_lease (the target's half): a lease is taken by one run only, kept, handed over only to a run that names its
holder, given back only by its holder; and nothing another user could plant (a directory of theirs, a symlink, a FIFO,
a huge or forged file) is followed, opened or overwritten."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import deploy_lease

RUN_A = {"id": "laptop/4101/20261205T030102Z", "controller": "laptop", "user": "ops", "pid": 4101, "start_ticks": 900,
         "started": "2026-12-05T03:01:02Z", "machine": "m" * 32, "boot": "b-1", "playbook": "deploy.yml"}
RUN_B = dict(RUN_A, id="laptop/4202/20261205T030110Z", pid=4202, start_ticks=950)


def lease_path(tmp_path):
    return str(tmp_path / "run" / "lock" / "llmops-serving" / "lxc-201.json")


def test_a_free_lease_is_taken_in_a_private_directory_and_kept_by_its_run(tmp_path):
    path = lease_path(tmp_path)
    changed, before, after = deploy_lease.take(path, RUN_A)
    assert changed and before is None and after["run"] == RUN_A and after["took_over"] is None
    assert deploy_lease.read_lease(path)["run"] == RUN_A
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    # The same run again (a task that runs twice, a retry): nothing changes.
    assert deploy_lease.take(path, RUN_A) == (False, deploy_lease.read_lease(path), deploy_lease.read_lease(path))


def test_another_run_is_refused_unless_it_names_the_holder(tmp_path):
    path = lease_path(tmp_path)
    deploy_lease.take(path, RUN_A)
    with pytest.raises(deploy_lease.LeaseHeld) as held:
        deploy_lease.take(path, RUN_B, replace=["laptop/9999/20261205T000000Z"])
    assert held.value.holder["run"] == RUN_A
    assert "run laptop/4101/20261205T030102Z (ops on laptop, deploy.yml, started 2026-12-05T03:01:02Z)" == \
        deploy_lease.describe(held.value.holder)
    changed, before, after = deploy_lease.take(path, RUN_B, replace=[RUN_A["id"]])
    assert changed and before["run"] == RUN_A and after["took_over"] == RUN_A["id"]
    assert deploy_lease.read_lease(path)["run"]["id"] == RUN_B["id"]


def test_check_mode_says_what_would_happen_and_writes_nothing(tmp_path):
    path = lease_path(tmp_path)
    changed, before, after = deploy_lease.take(path, RUN_A, check_mode=True)
    assert changed and before is None and after["run"] == RUN_A
    assert not os.path.exists(path)
    deploy_lease.take(path, RUN_A)
    assert deploy_lease.give_back(path, RUN_A["id"], check_mode=True)[0] is True
    assert os.path.exists(path)


def test_only_the_holder_or_a_named_run_gives_the_lease_back(tmp_path):
    path = lease_path(tmp_path)
    # No directory yet: nothing to give back, and nothing created.
    assert deploy_lease.give_back(path, RUN_A["id"]) == (False, None)
    assert not os.path.exists(os.path.dirname(path))
    deploy_lease.take(path, RUN_A)
    changed, before = deploy_lease.give_back(path, RUN_B["id"])
    assert not changed and before["run"]["id"] == RUN_A["id"] and os.path.exists(path)
    assert deploy_lease.give_back(path, RUN_A["id"])[0] is True and not os.path.exists(path)
    assert deploy_lease.give_back(path, RUN_A["id"]) == (False, None)
    deploy_lease.take(path, RUN_A)
    assert deploy_lease.give_back(path, RUN_B["id"], replace=[RUN_A["id"]])[0] is True


def test_a_run_identity_with_control_characters_or_a_bad_id_is_refused():
    for run, said in ((dict(RUN_A, id="a\nb"), "run ID"), (dict(RUN_A, id=""), "run ID"), (dict(RUN_A, id="-x"), "run ID"),
                      (dict(RUN_A, id="a" * 201), "run ID"), (dict(RUN_A, user="ops\x1b[2J"), "user"),
                      (dict(RUN_A, controller="x" * 300), "controller"), (dict(RUN_A, pid=-1), "pid"),
                      (dict(RUN_A, pid=True), "pid"), (dict(RUN_A, extra="1"), "unknown fields"), ([RUN_A], "mapping")):
        with pytest.raises(ValueError, match=said):
            deploy_lease.check_run(run)


def test_a_lease_directory_another_user_could_write_or_replace_is_refused(tmp_path):
    path = lease_path(tmp_path)
    directory = os.path.dirname(path)
    os.makedirs(directory)
    os.chmod(directory, 0o777)
    with pytest.raises(deploy_lease.LeaseProblem, match="mode 0777"):
        deploy_lease.take(path, RUN_A)
    assert os.listdir(directory) == []
    os.chmod(directory, 0o700)
    if os.geteuid() == 0:
        os.chown(directory, 65534, 65534)
        with pytest.raises(deploy_lease.LeaseProblem, match="owned by UID 65534"):
            deploy_lease.take(path, RUN_A)
        with pytest.raises(deploy_lease.LeaseProblem, match="owned by UID 65534"):
            deploy_lease.give_back(path, RUN_A["id"])
        assert os.listdir(directory) == []


def test_a_symlinked_lease_directory_is_refused_and_its_target_untouched(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    path = lease_path(tmp_path)
    os.makedirs(os.path.dirname(os.path.dirname(path)))
    os.symlink(str(elsewhere), os.path.dirname(path))
    with pytest.raises(deploy_lease.LeaseProblem, match="is a symbolic link, not a directory"):
        deploy_lease.take(path, RUN_A)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory", "huge", "garbage", "other_format", "forged_run"])
def test_whatever_is_planted_at_the_lease_path_is_named_and_left_as_it_is(tmp_path, plant):
    path = lease_path(tmp_path)
    deploy_lease.take(path, RUN_A)
    deploy_lease.give_back(path, RUN_A["id"])
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    expected = {"symlink": "is a symbolic link", "fifo": "is a FIFO", "directory": "is a directory",
                "huge": "larger than 65536 bytes", "garbage": "not one this collection writes",
                "other_format": "not a lease of format 1", "forged_run": "run ID"}[plant]
    if plant == "symlink":
        os.symlink(str(secret), path)
    elif plant == "fifo":
        os.mkfifo(path)  # a reader would block forever
    elif plant == "directory":
        os.mkdir(path)
    elif plant == "huge":
        with open(path, "wb") as handle:
            handle.write(b" " * (deploy_lease.MAX_LEASE_BYTES + 10))
    elif plant == "garbage":
        with open(path, "wb") as handle:
            handle.write(b"\x00\xff{not json")
    elif plant == "other_format":
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"format": 2, "run": RUN_A}, handle)
    else:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"format": 1, "run": dict(RUN_A, id="x\n\x1b[31mroot")}, handle)
    for attempt in (lambda: deploy_lease.take(path, RUN_B, replace=[RUN_A["id"]]),
                    lambda: deploy_lease.give_back(path, RUN_A["id"])):
        with pytest.raises(deploy_lease.LeaseProblem, match=expected) as refused:
            attempt()
        assert path in str(refused.value) and "remove it" in str(refused.value)
    assert secret.read_text() == "root's\n"
    assert os.path.lexists(path)


def _race(path, run, barrier, results):
    barrier.wait(timeout=30)
    try:
        deploy_lease.take(path, run)
        results.put(run["id"])
    except deploy_lease.LeaseHeld as exc:
        results.put("refused by " + exc.holder["run"]["id"])


def test_two_runs_racing_for_a_free_lease_never_both_take_it(tmp_path):
    path = lease_path(tmp_path)
    context = multiprocessing.get_context("fork")
    for _round in range(10):
        barrier = context.Barrier(2)
        results = context.Queue()
        workers = [context.Process(target=_race, args=(path, run, barrier, results)) for run in (RUN_A, RUN_B)]
        for worker in workers:
            worker.start()
        outcome = sorted(results.get(timeout=60) for _worker in workers)
        for worker in workers:
            worker.join(timeout=60)
        winner = deploy_lease.read_lease(path)["run"]["id"]
        assert outcome == sorted([winner, "refused by " + winner]), outcome
        os.unlink(path)
