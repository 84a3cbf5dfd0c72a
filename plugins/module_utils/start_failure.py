# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Why a start of a unit left no log: the log directory's filesystem, and the invocation's own journal lines.

The launcher (roles/sglang_service/templates/sglang-launch.j2) writes every start's output to a new log file. When that
file cannot be created or written (a full or read-only filesystem, no free inodes, a quota), it says so in one line on
the unit's stderr, the journal, and exits 75; the log of the invocation then is empty or missing, and a check that only
quotes the log has nothing to say. These functions give it the two other witnesses:

- filesystem_facts() and filesystem_problems(): the filesystem of the log directory, as statvfs gives it (bytes and
  inodes free to non-root users, since the server is not root; read-only), and what is wrong with it, in words;
- journal_lines(): the lines the invocation itself wrote to the journal (``journalctl _SYSTEMD_INVOCATION_ID=<id>``),
  bounded in lines and in characters per line, with a time limit, secrets masked before any cut (sglang_log.quoted()).
"""

from __future__ import annotations

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils import sglang_log

# The launcher's exit status when the log of a start cannot be created or written (EX_TEMPFAIL; status=75/TEMPFAIL).
EXIT_LOG_UNWRITABLE = 75
# Less free space than this for the service account is named (a start writes more than that to its log).
NEARLY_FULL_BYTES = 1024 * 1024
# journalctl gets this long (its own timeout, killed 2 s later) before its answer is given up.
JOURNAL_TIMEOUT_SECONDS = 10
_INVOCATION_RE = re.compile(r"\A[0-9a-f]{32}\Z")


def human_bytes(count):
    """``0 bytes``, ``512 bytes``, ``1.0 MiB``, ``20.5 GiB``."""
    if count < 1024:
        return "%d bytes" % count
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024.0
        if value < 1024 or unit == "PiB":
            return "%.1f %s" % (value, unit)
    return "%d bytes" % count  # not reached


def filesystem_facts(directory):
    """What statvfs says about ``directory``'s filesystem, for a non-root writer: a dict with ``path``, ``bytes_free``,
    ``bytes_total``, ``inodes_free``, ``inodes_total`` (0 where the filesystem counts none), ``read_only``; or ``path``
    and ``error`` (the OS error) when statvfs fails."""
    try:
        stats = os.statvfs(directory)
    except OSError as exc:
        return {"path": directory, "error": exc.strerror or str(exc)}
    block = stats.f_frsize or stats.f_bsize
    return {
        "path": directory,
        "bytes_free": stats.f_bavail * block,
        "bytes_total": stats.f_blocks * block,
        "inodes_free": stats.f_favail,
        "inodes_total": stats.f_files,
        "read_only": bool(stats.f_flag & os.ST_RDONLY),
    }


def filesystem_problems(facts):
    """What keeps a non-root writer from writing to the filesystem of ``facts`` (filesystem_facts()), each a phrase
    that follows ``the log filesystem of <dir>``; [] when nothing is wrong with it."""
    if "error" in facts:
        return ["cannot be examined (%s)" % facts["error"]]
    problems = []
    if facts["read_only"]:
        problems.append("is read-only")
    if facts["bytes_free"] == 0:
        problems.append("is full (0 bytes free of %s)" % human_bytes(facts["bytes_total"]))
    elif facts["bytes_free"] < NEARLY_FULL_BYTES:
        problems.append("is nearly full (%s free of %s)" % (human_bytes(facts["bytes_free"]), human_bytes(facts["bytes_total"])))
    # A filesystem without an inode limit (btrfs, for one) reports 0 inodes in all.
    if facts["inodes_total"] and facts["inodes_free"] == 0:
        problems.append("has no free inodes (0 of %d)" % facts["inodes_total"])
    return problems


def journal_command(invocation_id, lines):
    """The journalctl command line for the ``lines`` last journal lines of one invocation, under coreutils' timeout."""
    return ["timeout", "--kill-after=2", str(JOURNAL_TIMEOUT_SECONDS), "journalctl", "--quiet", "--no-pager", "-o", "cat",
            "-n", str(max(1, int(lines))), "_SYSTEMD_INVOCATION_ID=%s" % invocation_id]


def journal_lines(run_command, invocation_id, lines=15):
    """(lines, problem): the last ``lines`` lines that invocation ``invocation_id`` wrote to the journal, each masked and
    shortened (sglang_log.quoted()), and None; or ([], why they could not be read).

    ``run_command`` follows AnsibleModule.run_command: (args, environ_update=...) -> (rc, stdout, stderr).
    """
    if not _INVOCATION_RE.match(invocation_id or ""):
        return [], "no invocation ID to look up (%r)" % (invocation_id,)
    args = journal_command(invocation_id, lines)
    rc, stdout, stderr = run_command(args, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"})
    if rc == 124 or rc == 137:
        return [], "journalctl gave no answer within %d s" % JOURNAL_TIMEOUT_SECONDS
    if rc != 0:
        said = (stderr or "").strip() or (stdout or "").strip()
        return [], "journalctl failed (rc=%s): %s" % (rc, sglang_log.quoted(said.splitlines()[-1]) if said else "no output")
    # Masked whole, then cut: a key is never left half visible (sglang_log.quoted() masks before it shortens).
    quoted = [sglang_log.quoted(line) for line in (stdout or "").splitlines() if line.strip()]
    return quoted[-max(1, int(lines)):], None
