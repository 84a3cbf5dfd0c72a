# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Root's file operations in places others can write (issue #12, classes 1 and 6), on the real unit.

The log pruner runs as root (ExecStartPre=+) in the log directory that the service account owns. Here the service
account fills that directory with hostile entries before a restart: a file whose name holds a newline followed by the
name of a root-owned canary in the pruner's working directory (/, under systemd; a name cannot hold a slash, so that is
where the old line-by-line pruner deleted it), a symlink to a root-owned canary, a FIFO, all named like logs, and
enough old logs that the pruner has work to do. The restart must leave every canary and every hostile entry as it was,
prune only the old logs, and start the service.

The deployment record: a truncated deployment.json makes the role's record step fail with a message that says what
happened and how to go on, and keeps the bad file aside, instead of replacing it (and the rollback history) in silence.

Each case puts the target back as it found it, so the scenario's other checks run on an untouched instance.
"""

from __future__ import annotations

import base64
import json
import shlex
import time

import pytest

from sglang_checks import LOG_DIR, RECORD, UNIT, rerun_role, unit_properties, wait_ready, wait_until

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge

# The unit's User= (roles/sglang_service: sglang_service_user).
SERVICE_USER = "sglang"
# The scenario's sglang_service_log_retention: the pruner keeps 49 earlier logs.
RETENTION = 50
# Canaries outside the log directory, root's. The first sits in the pruner's working directory (/).
NAME_CANARY = "/llmops-prune-canary.log"
CANARY_DIR = "/var/lib/llmops-prune-canary"
LINK_CANARY = CANARY_DIR + "/symlink-target.log"
# Hostile entries, named as the launcher names logs (<YYYYmmddTHHMMSSZ>-<32 hex>.log), older than every real log.
NEWLINE_NAME = "20200101T000000Z-%s.log\n%s" % ("e" * 32, NAME_CANARY.lstrip("/"))
SYMLINK_NAME = "20200101T000001Z-%s.log" % ("f" * 32)
FIFO_NAME = "20200101T000002Z-%s.log" % ("d" * 32)
# Old logs, so that the pruner (and the old one) has more than RETENTION - 1 earlier logs to look at.
FILLERS = ["20200102T%06dZ-%032x.log" % (n, n) for n in range(RETENTION)]
FILLER_EPOCH = 1577923200  # 2020-01-02T00:00:00Z

# Runs on the target: python3 in isolated mode, with one JSON argument; prints JSON.
ENTRIES = """
import json, os, stat, sys
directory = json.loads(sys.argv[1])
fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
found = {}
for name in os.listdir(fd):
    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    kind = ("link" if stat.S_ISLNK(info.st_mode) else "fifo" if stat.S_ISFIFO(info.st_mode)
            else "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other")
    found[name] = [kind, os.readlink(name, dir_fd=fd) if kind == "link" else None]
print(json.dumps(found))
"""
PLANT = """
import json, os, sys
spec = json.loads(sys.argv[1])
fd = os.open(spec["dir"], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
def create(name, text, mtime):
    handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640, dir_fd=fd)
    os.write(handle, text.encode())
    os.close(handle)
    os.utime(name, (mtime, mtime), dir_fd=fd)
create(spec["newline"], "hostile\\n", spec["epoch"] - 300)
os.symlink(spec["link_target"], spec["symlink"], dir_fd=fd)
os.mkfifo(spec["fifo"], dir_fd=fd)
for n, name in enumerate(spec["fillers"]):
    create(name, "old log %d\\n" % n, spec["epoch"] + n)
"""
REMOVE = """
import json, os, sys
spec = json.loads(sys.argv[1])
fd = os.open(spec["dir"], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
for name in spec["names"]:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
"""


def target_python(host, code, argument, user=None):
    """Run ``code`` with python3 -I on the target (as ``user`` when given) with ``argument`` as JSON; its stdout."""
    command = "python3 -I -c %s %s" % (shlex.quote(code), shlex.quote(json.dumps(argument)))
    if user:
        command = "runuser -u %s -- %s" % (user, command)
    return host.check_output(command)


def entries(host, directory=LOG_DIR):
    """{name: [kind, symlink target]} of every entry of ``directory``, read NUL-safe (names may hold newlines)."""
    return json.loads(target_python(host, ENTRIES, directory))


def file_state(host, path):
    """(owner, mode, content) of a regular file on the target, or None when it is gone."""
    file = host.file(path)
    if not file.exists:
        return None
    assert file.is_file and not file.is_symlink, "%s is not a regular file" % path
    return file.user, file.mode, file.content_string


def pruner_lines(host, since):
    """The unit's journal since the epoch ``since`` once the pruner's first removal is in it (what it ignored comes
    before), else None."""
    text = host.check_output("journalctl -u %s --since @%d -o cat --no-pager" % (UNIT, since))
    return text if "sglang-log-prune: removed '%s'" % FILLERS[0] in text else None


@pytest.fixture
def hostile_log_dir(host):
    """The real log directory with the hostile entries and old logs in it, planted by the service account; afterwards
    every planted entry and the canaries are gone, and only logs of new starts were added."""
    wait_ready(host)
    before = entries(host)
    assert not [name for name in before if name in FILLERS or "\n" in name], "a previous run left planted entries"
    host.check_output("printf 'canary by name\\n' > %s && chmod 0644 %s" % (NAME_CANARY, NAME_CANARY))
    host.check_output("mkdir -p %s && printf 'canary by link\\n' > %s && chmod 0644 %s" % (CANARY_DIR, LINK_CANARY, LINK_CANARY))
    canaries = {path: file_state(host, path) for path in (NAME_CANARY, LINK_CANARY)}
    planted = [NEWLINE_NAME, SYMLINK_NAME, FIFO_NAME] + FILLERS
    target_python(host, PLANT, {"dir": LOG_DIR, "newline": NEWLINE_NAME, "symlink": SYMLINK_NAME, "link_target": LINK_CANARY,
                                "fifo": FIFO_NAME, "fillers": FILLERS, "epoch": FILLER_EPOCH}, user=SERVICE_USER)
    yield before, canaries
    target_python(host, REMOVE, {"dir": LOG_DIR, "names": planted})
    host.check_output("rm -f %s && rm -rf %s" % (NAME_CANARY, CANARY_DIR))
    after = entries(host)
    assert set(before) <= set(after), "a log of the scenario was lost: %s" % sorted(set(before) - set(after))
    assert [name for name in set(after) - set(before) if not name.endswith(".log") or name in planted] == []
    wait_ready(host)


def test_the_pruner_run_by_the_unit_follows_no_hostile_entry_and_removes_only_old_logs(host, hostile_log_dir):
    before, canaries = hostile_log_dir
    real_logs = sorted(name for name, (kind, _target) in before.items() if kind == "file" and name.endswith(".log"))
    # With KEEP = RETENTION the pruner removes the len(real_logs) + 1 oldest of FILLERS + real_logs: fillers only.
    assert len(real_logs) <= RETENTION - 2, "too many logs in the scenario for this check: %d" % len(real_logs)
    previous = unit_properties(host)["InvocationID"]
    since = int(time.time()) - 1

    host.check_output("systemctl restart %s" % UNIT)
    props = wait_ready(host)
    assert props["InvocationID"] != previous, "the unit started again (ExecStartPre=+ pruner, then the launcher)"

    for path, state in canaries.items():
        assert file_state(host, path) == state, "root's %s outside the log directory was touched" % path
    assert sorted(entries(host, CANARY_DIR)) == ["symlink-target.log"]
    now = entries(host)
    # The hostile entries are where the service account put them, as it put them: never followed, never removed.
    assert now[NEWLINE_NAME] == ["file", None]
    assert now[SYMLINK_NAME] == ["link", LINK_CANARY]
    assert now[FIFO_NAME] == ["fifo", None]
    # Oldest first: exactly the len(real_logs) + 1 oldest fillers went, and every real log stayed.
    removed = [name for name in FILLERS if name not in now]
    assert removed == FILLERS[:len(real_logs) + 1]
    assert set(real_logs) <= set(now)
    # The pruner said what it left alone and what it removed (the journal of this start).
    journal = wait_until(lambda: pruner_lines(host, since), 30, "the pruner's lines in the journal")
    assert "ignoring '%s': a symbolic link, not a log file" % SYMLINK_NAME in journal
    assert "ignoring '%s': a FIFO, not a log file" % FIFO_NAME in journal
    assert "removed '%s'" % FILLERS[0] in journal


@pytest.fixture
def record_kept(host):
    """deployment.json as the converge left it; afterwards it is back, byte for byte and with its mode, and no copy
    set aside remains."""
    record = host.file(RECORD)
    saved = (record.content, record.mode, record.user)
    yield saved
    host.check_output("rm -f %s.corrupt-*" % RECORD)
    host.check_output("printf %%s %s | base64 -d > %s.restore && chmod %o %s.restore && mv -f %s.restore %s" % (
        shlex.quote(base64.b64encode(saved[0]).decode()), RECORD, saved[1], RECORD, RECORD, RECORD))
    assert (host.file(RECORD).content, host.file(RECORD).mode, host.file(RECORD).user) == saved
    # The instance is as the converge left it: converging again changes nothing.
    assert rerun_role({}).changed_tasks() == []


def test_a_truncated_record_fails_the_role_and_is_kept_aside(host, record_kept):
    original = record_kept[0]
    truncated = original[:len(original) // 2]
    host.check_output("head -c %d %s > %s.cut && mv -f %s.cut %s" % (len(truncated), RECORD, RECORD, RECORD, RECORD))
    assert host.file(RECORD).content == truncated

    run = rerun_converge({})
    assert run.failed, "a corrupt record must not be replaced in silence"
    failures = run.failures()
    assert len(failures) == 1 and failures[0].startswith("Compute and record the deployment ID on "), run.summary()
    asides = host.check_output("ls -1 %s.corrupt-*" % RECORD).splitlines()
    assert len(asides) == 1
    assert host.file(asides[0]).content == truncated, "the bad file is kept as it was"
    assert not host.file(RECORD).exists
    message = failures[0]
    assert "the deployment record %s is not JSON (" % RECORD in message
    assert "moved aside to %s" % asides[0] in message
    assert "rollback history" in message and "run the deployment again" in message
    assert json.loads(original)["deployment_id"] in message, "the archived deployments are listed by ID"
