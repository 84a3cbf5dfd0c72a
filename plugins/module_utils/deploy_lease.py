# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deploy lease of a container: which run of deploy.yml may change it now (the deploy_lease module's logic).

A lease is a small JSON file (mode 0600, in a directory of root's that nobody else may write) naming the run that holds
it. Unlike an flock it outlives the module that wrote it: a run holds it from its first play to its last, across
hundreds of module calls and connections. A run that dies leaves it behind, so a lease is only ever taken over by a run
that names it (the controller decides that the holder is gone, or the operator says so): never by age.

Every read and replacement happens under an flock on a sibling lock file, so two runs that race for a free or abandoned
lease cannot both win (compare-and-swap on the holder's run ID).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file

FORMAT = 1
# A lease file is a few hundred bytes; anything much larger is not one.
MAX_LEASE_BYTES = 64 * 1024
# How long a run waits for another run's read-or-replace of the lease (milliseconds of work) to finish.
LOCK_TIMEOUT_SECONDS = 30
# A run ID is printed in messages and typed back by the operator (-e llmops_deploy_lease_break=ID).
RUN_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}\Z")
MAX_FIELD_CHARS = 256
# The fields of a run besides its ID (plugin_utils/deploy_run.py fills them on the controller).
RUN_FIELDS = {"controller": str, "user": str, "playbook": str, "started": str, "pid": int, "start_ticks": int,
              "machine": str, "boot": str}


class LeaseProblem(Exception):
    """The lease cannot be read or written safely; the message names the path and what to do."""


class LeaseHeld(Exception):
    """Another run holds the lease; ``holder`` is its record."""

    def __init__(self, holder):
        super().__init__("held by run %s" % holder["run"]["id"])
        self.holder = holder


def check_run(run):
    """The run's identity as given (a dict with ``id`` and RUN_FIELDS), checked: raises ValueError naming the field."""
    if not isinstance(run, dict):
        raise ValueError("the run is not a mapping")
    if not isinstance(run.get("id"), str) or not RUN_ID.match(run["id"]):
        raise ValueError("the run ID %r is not 1-200 letters, digits and ._:/@+- (starting with a letter or digit)" % (
            run.get("id"),))
    checked = {"id": run["id"]}
    for name, kind in RUN_FIELDS.items():
        value = run.get(name)
        if value is None:
            continue
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError("the run's %s is not a non-negative integer: %r" % (name, value))
        elif not isinstance(value, str) or len(value) > MAX_FIELD_CHARS or not value.isprintable():
            raise ValueError("the run's %s is not printable text of at most %d characters" % (name, MAX_FIELD_CHARS))
        checked[name] = value
    unknown = sorted(set(run) - set(RUN_FIELDS) - {"id"})
    if unknown:
        raise ValueError("the run has unknown fields: %s" % ", ".join(str(name) for name in unknown))
    return checked


def describe(lease):
    """The holder of a lease in words: "run ID (user on controller, playbook, started T)"."""
    run = lease["run"]
    who = " on ".join(part for part in (run.get("user"), run.get("controller")) if part)
    details = [part for part in (who, run.get("playbook"), "started %s" % run["started"] if run.get("started") else "")
               if part]
    return "run %s%s" % (run["id"], " (%s)" % ", ".join(details) if details else "")


def _secure_directory(directory):
    """Create the lease directory (0700) when missing; refuse one that another user could write or replace."""
    parent = os.path.dirname(directory)
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LeaseProblem("cannot create the lease directory %s: %s" % (directory, exc.strerror or exc)) from None
    found = os.lstat(directory)
    if not stat.S_ISDIR(found.st_mode):
        raise LeaseProblem("%s is %s, not a directory: remove it (nothing of this collection made it)" % (
            directory, atomic_file.file_type(found.st_mode)))
    if found.st_uid != os.geteuid() or found.st_mode & 0o022:
        raise LeaseProblem(
            "%s is owned by UID %d with mode %04o: only the deploying user (UID %d) may write the directory of the "
            "deploy leases, or another user could take or forge one; remove it (no deploy may be running)" % (
                directory, found.st_uid, stat.S_IMODE(found.st_mode), os.geteuid()))


def read_lease(path):
    """The lease at ``path`` (a dict: format, run, taken, took_over), or None when there is none."""
    try:
        data = atomic_file.read_regular(path, MAX_LEASE_BYTES + 1)
    except FileNotFoundError:
        return None
    except atomic_file.NotARegularFile as exc:
        raise LeaseProblem("the deploy lease %s is %s: remove it (no deploy may be running)" % (path, exc.found)) from None
    except OSError as exc:
        raise LeaseProblem("cannot read the deploy lease %s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > MAX_LEASE_BYTES:
        raise LeaseProblem("the deploy lease %s is larger than %d bytes, not a lease: remove it (no deploy may be "
                           "running)" % (path, MAX_LEASE_BYTES))
    try:
        lease = json.loads(data.decode("utf-8"))
        if not isinstance(lease, dict) or lease.get("format") != FORMAT:
            raise ValueError("not a lease of format %d" % FORMAT)
        lease["run"] = check_run(lease.get("run"))
    except ValueError as exc:
        raise LeaseProblem("the deploy lease %s is not one this collection writes (%s): remove it (no deploy may be "
                           "running)" % (path, exc)) from None
    return {"format": FORMAT, "run": lease["run"], "taken": str(lease.get("taken", ""))[:64],
            "took_over": lease.get("took_over") if isinstance(lease.get("took_over"), str) else None}


def _locked(path):
    return atomic_file.file_lock(path + ".lock", LOCK_TIMEOUT_SECONDS)


def take(path, run, replace=(), check_mode=False):
    """Take the lease at ``path`` for ``run`` (checked by check_run). Free, already this run's, or held by a run whose ID
    is in ``replace``: taken (check mode: would be). Held by another run: raises LeaseHeld.

    Returns (changed, before, after): the lease found (or None) and the one held now.
    """
    _secure_directory(os.path.dirname(path))
    try:
        with _locked(path):
            before = read_lease(path)
            if before is not None and before["run"]["id"] == run["id"]:
                return False, before, before
            if before is not None and before["run"]["id"] not in replace:
                raise LeaseHeld(before)
            after = {"format": FORMAT, "run": run, "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "took_over": before["run"]["id"] if before else None}
            if not check_mode:
                atomic_file.atomic_write(path, (json.dumps(after, sort_keys=True) + "\n").encode("utf-8"), 0o600)
            return True, before, after
    except atomic_file.LockTimeout as exc:
        raise LeaseProblem(str(exc)) from None
    except OSError as exc:
        raise LeaseProblem("cannot write the deploy lease %s: %s" % (path, exc.strerror or exc)) from None


def give_back(path, run_id, replace=(), check_mode=False):
    """Remove the lease at ``path`` when ``run_id`` (or a run in ``replace``) holds it; another run's is left alone.

    Returns (changed, before): the lease found (or None).
    """
    directory = os.path.dirname(path)
    if not os.path.lexists(directory):
        return False, None
    _secure_directory(directory)
    try:
        with _locked(path):
            before = read_lease(path)
            if before is None or (before["run"]["id"] != run_id and before["run"]["id"] not in replace):
                return False, before
            if not check_mode:
                try:
                    os.unlink(path)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
            return True, before
    except atomic_file.LockTimeout as exc:
        raise LeaseProblem(str(exc)) from None
    except OSError as exc:
        raise LeaseProblem("cannot remove the deploy lease %s: %s" % (path, exc.strerror or exc)) from None


def render(lease):
    """A lease as the diff shows it ("" for none)."""
    return "" if lease is None else json.dumps(lease, indent=2, sort_keys=True) + "\n"
