# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""start_failure: the log directory's filesystem read by statvfs on a real tmpfs (full, out of inodes, read-only, in a
mount namespace of its own), and the journal lines of an invocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import start_failure
from ansible_collections.llmops.serving.tests.support.private_tmpfs import private_tmpfs_prefix

# The checkout's collections/ (ansible_collections/llmops/serving links to the checkout), for the driver's imports.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(REPO, "collections")
# In the namespace: mount a 2 MiB tmpfs with 16 inodes, fill it as told, and print what start_failure says of it.
DRIVER = r"""
import json, os, subprocess, sys
from ansible_collections.llmops.serving.plugins.module_utils import start_failure
where, fill = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,nr_inodes=16", "llmops-test", where], check=True)
if fill == "blocks":
    with open(os.path.join(where, "filler"), "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
for number in range(100 if fill == "inodes" else 0):
    try:
        open(os.path.join(where, "filler-%d" % number), "wb").close()
    except OSError:
        break
if fill == "read_only":
    subprocess.run(["mount", "-o", "remount,ro", where], check=True)
facts = start_failure.filesystem_facts(where)
print(json.dumps([facts, start_failure.filesystem_problems(facts)]))
"""


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    """The unshare prefix for a mount namespace of its own where a tmpfs can be mounted, or a skip."""
    return private_tmpfs_prefix(tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("fill, problems", [
    ("blocks", ["is full (0 bytes free of 2.0 MiB)"]),
    ("inodes", ["has no free inodes (0 of 16)"]),
    ("read_only", ["is read-only"]),
    ("nothing", []),
], ids=["full", "no-inodes", "read-only", "room"])
def test_a_real_filesystem_is_read_as_a_non_root_writer_sees_it(namespace, tmp_path, fill, problems):
    environment = dict(os.environ, PYTHONPATH=COLLECTIONS)
    run = subprocess.run(namespace + [sys.executable, "-c", DRIVER, str(tmp_path), fill], capture_output=True, text=True,
                         timeout=60, check=False, env=environment)
    assert run.returncode == 0, run.stderr
    facts, said = json.loads(run.stdout)
    assert said == problems
    assert facts["path"] == str(tmp_path) and facts["bytes_total"] == 2 * 1024 * 1024 and facts["inodes_total"] == 16
    assert facts["read_only"] is (fill == "read_only")


def test_a_directory_that_cannot_be_examined_says_why(tmp_path):
    facts = start_failure.filesystem_facts(str(tmp_path / "gone"))
    assert facts == {"path": str(tmp_path / "gone"), "error": "No such file or directory"}
    assert start_failure.filesystem_problems(facts) == ["cannot be examined (No such file or directory)"]


@pytest.mark.parametrize("count, text", [(0, "0 bytes"), (1023, "1023 bytes"), (1024, "1.0 KiB"), (1048576, "1.0 MiB"),
                                         (5 * 1024 ** 3 // 2, "2.5 GiB")])
def test_sizes_read_as_an_operator_reads_them(count, text):
    assert start_failure.human_bytes(count) == text


def test_an_invocation_id_that_is_not_one_is_never_passed_to_journalctl():
    def run_command(args, **kwargs):
        raise AssertionError("journalctl run with %r" % (args,))
    assert start_failure.journal_lines(run_command, "x + _UID=0") == ([], "no invocation ID to look up ('x + _UID=0')")
    assert start_failure.journal_lines(run_command, "") == ([], "no invocation ID to look up ('')")
