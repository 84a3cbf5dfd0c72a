# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""verdict_textfile: an atomic .prom file with the verdict, check and diff mode, pending and absent states."""

from __future__ import annotations

import os
import stat
from unittest import mock

import pytest

from ansible_collections.llmops.serving.plugins.modules import verdict_textfile
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_verdict_metrics import DEPLOYMENT_ID, PASSED
from ansible_collections.llmops.serving.tests.support.node_exporter import scrape_textfiles
from ansible_collections.llmops.serving.tests.support.promtool import check_metrics


@pytest.fixture
def textfile_dir(tmp_path):
    directory = tmp_path / "node-exporter"
    directory.mkdir()
    return directory


def write(directory, summary=None, **extra):
    return run_module(verdict_textfile.main, dict({"summary": summary or PASSED, "directory": str(directory)}, **extra))


def test_writes_the_verdict_that_promtool_accepts(textfile_dir):
    result, failed = write(textfile_dir)
    assert not failed, result
    path = textfile_dir / "llmops_sglang_verdict_qwen36.prom"
    assert result["changed"] and result["path"] == str(path)
    content = path.read_text()
    assert content == result["metrics"]
    assert 'llmops_sglang_verdict_passed{sglang_instance="qwen36",deployment_id="%s"} 1' % DEPLOYMENT_ID in content
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert check_metrics(content) == (0, "")
    # Nothing but the .prom file: the temporary file was renamed, not left beside it.
    assert os.listdir(textfile_dir) == [path.name]


def test_the_file_is_replaced_by_rename_so_a_reader_never_sees_half_of_it(textfile_dir):
    write(textfile_dir)
    path = textfile_dir / "llmops_sglang_verdict_qwen36.prom"
    before = path.stat().st_ino
    with mock.patch.object(verdict_textfile.time, "time", return_value=1764620999.0):
        result, failed = write(textfile_dir, summary=dict(PASSED, status="failed", failed_step="Probe"))
    assert not failed and result["changed"]
    assert path.stat().st_ino != before, "a new inode: written beside and renamed over the old file"
    assert "llmops_sglang_verdict_timestamp_seconds" in path.read_text() and "1764620999.0" in path.read_text()


def test_mode_is_applied_and_a_mode_change_alone_is_a_change(textfile_dir):
    write(textfile_dir)
    path = textfile_dir / "llmops_sglang_verdict_qwen36.prom"
    with mock.patch.object(verdict_textfile, "render_verdict", return_value=path.read_text()):
        assert not write(textfile_dir)[0]["changed"]
        assert write(textfile_dir, mode="0640")[0]["changed"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_check_mode_renders_and_writes_nothing(textfile_dir):
    result, failed = run_module(verdict_textfile.main, {"summary": PASSED, "directory": str(textfile_dir)},
                                check_mode=True, diff=True)
    assert not failed and result["changed"]
    assert "llmops_sglang_verdict_info" in result["metrics"]
    assert result["diff"]["before"] == "" and result["diff"]["after"] == result["metrics"]
    assert os.listdir(textfile_dir) == []


def test_pending_needs_a_timeout_and_writes_the_deadline(textfile_dir):
    pending = {"instance": "qwen36", "deployment_id": DEPLOYMENT_ID, "status": "pending"}
    result, failed = write(textfile_dir, summary=pending)
    assert failed and "pending_timeout" in result["msg"]
    with mock.patch.object(verdict_textfile.time, "time", return_value=1000.0):
        result, failed = write(textfile_dir, summary=pending, pending_timeout=1800)
    assert not failed
    assert ('llmops_sglang_verification_deadline_timestamp_seconds{sglang_instance="qwen36",deployment_id="%s"} 2800.0'
            % DEPLOYMENT_ID) in result["metrics"]


def test_absent_removes_the_file_once(textfile_dir):
    write(textfile_dir)
    result, failed = run_module(verdict_textfile.main, {"instance": "qwen36", "directory": str(textfile_dir), "state": "absent"})
    assert not failed and result["changed"]
    assert os.listdir(textfile_dir) == []
    again = run_module(verdict_textfile.main, {"instance": "qwen36", "directory": str(textfile_dir), "state": "absent"})[0]
    assert not again["changed"]


@pytest.mark.parametrize("args, message", [
    ({"summary": dict(PASSED, instance="../etc")}, "not a valid instance name"),
    ({"summary": dict(PASSED, instance="a\nb")}, "control characters"),
    ({"summary": PASSED, "instance": "other"}, "differs from the summary"),
    ({"summary": dict(PASSED, status="maybe")}, "cannot render the verdict"),
    ({"summary": PASSED, "mode": "rw-r--r--"}, "octal"),
    ({"instance": "qwen36"}, "summary"),
    ({"summary": dict(PASSED, canaries=[{"name": "greedy", "passed": True, "message": ""}])},
     "cannot render the verdict: unknown canary 'greedy'"),
    ({"summary": dict(PASSED, canaries=[{"name": "soak", "passed": "yes", "message": ""}])},
     "cannot render the verdict: canary 'soak': passed must be true, false or null (skipped), not 'yes'"),
])
def test_refuses_bad_input_with_a_message(textfile_dir, args, message):
    result, failed = run_module(verdict_textfile.main, dict({"directory": str(textfile_dir)}, **args))
    assert failed and message in result["msg"], result
    assert os.listdir(textfile_dir) == []


def test_a_missing_directory_is_named_not_created(tmp_path):
    result, failed = write(tmp_path / "nowhere")
    assert failed and str(tmp_path / "nowhere") in result["msg"] and "--collector.textfile.directory" in result["msg"]
    assert not (tmp_path / "nowhere").exists()


def test_create_directory_makes_a_missing_directory_0755_whatever_the_umask(tmp_path):
    directory = tmp_path / "var" / "node-exporter"
    result, failed = run_module(verdict_textfile.main, {"summary": PASSED, "directory": str(directory),
                                                        "create_directory": True}, check_mode=True)
    assert not failed and result["directory_created"] and not directory.exists()
    old = os.umask(0o077)
    try:
        result, failed = write(directory, create_directory=True)
    finally:
        os.umask(old)
    assert not failed and result["directory_created"], result
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755
    assert (directory / "llmops_sglang_verdict_qwen36.prom").is_file()
    result, failed = write(directory, create_directory=True)
    assert not failed and not result["directory_created"]


def test_create_directory_does_not_replace_a_file_where_the_directory_should_be(tmp_path):
    blocker = tmp_path / "node-exporter"
    blocker.write_text("not a directory\n")
    result, failed = write(blocker, create_directory=True)
    assert failed and "cannot create the textfile directory" in result["msg"], result
    assert blocker.read_text() == "not a directory\n"


def test_check_mode_predicts_the_write_into_a_directory_that_does_not_exist_yet(tmp_path):
    result, failed = run_module(verdict_textfile.main, {"summary": PASSED, "directory": str(tmp_path / "later")},
                                check_mode=True)
    assert not failed and result["changed"] and "does not exist (yet)" in result["msg"]
    assert not (tmp_path / "later").exists()


def test_a_symlink_in_place_of_the_file_is_refused(textfile_dir, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    (textfile_dir / "llmops_sglang_verdict_qwen36.prom").symlink_to(target)
    result, failed = write(textfile_dir)
    assert failed and "not a regular file" in result["msg"]
    assert target.read_text() == "keep me\n"


def test_node_exporter_reads_every_kind_of_verdict_without_a_scrape_error(textfile_dir):
    # What really reads the files: node_exporter's textfile collector, with several instances in one directory. The
    # families must agree in HELP and TYPE across files: node_exporter 1.5 keeps the first file's and silently drops
    # the clashing samples of the others (node_textfile_scrape_error stays 0), so each instance's sample is looked for.
    hostile = dict(PASSED, instance="qwen36-b", status="failed", failed_step='Probe "the output"\nfor\\degeneration',
                   probe_verdict="sampling loop", deployment_id="a" * 64)
    assert not write(textfile_dir)[1]
    assert not write(textfile_dir, hostile)[1]
    assert not write(textfile_dir, dict(PASSED, instance="qwen36-c", status="pending"), pending_timeout=600)[1]
    scraped = scrape_textfiles(textfile_dir)
    assert "node_textfile_scrape_error 0" in scraped, scraped
    # node_exporter prints labels sorted by name.
    assert 'llmops_sglang_verdict_passed{deployment_id="%s",sglang_instance="qwen36"} 1' % DEPLOYMENT_ID in scraped
    assert 'llmops_sglang_verdict_passed{deployment_id="%s",sglang_instance="qwen36-b"} 0' % ("a" * 64) in scraped
    assert 'failed_step="Probe \\"the output\\"\\nfor\\\\degeneration"' in scraped
    assert 'llmops_sglang_verification_deadline_timestamp_seconds{deployment_id="%s",sglang_instance="qwen36-c"}' % (
        DEPLOYMENT_ID) in scraped


def test_canary_results_are_written_and_node_exporter_reads_them(textfile_dir):
    canaries = [{"name": "greedy_reference", "passed": True, "message": "equal"},
                {"name": "speculative_lossless", "passed": False, "message": "token 17 differs"},
                {"name": "tool_call", "passed": None, "message": "skipped: no tool-call parser"}]
    summary = dict(PASSED, status="failed", failed_step="Canaries", canaries=canaries,
                   canary_acceptance={"short": 2.9, "long": 1.2})
    result, failed = write(textfile_dir, summary)
    assert not failed, result
    labels = 'sglang_instance="qwen36",deployment_id="%s"' % DEPLOYMENT_ID
    assert 'llmops_sglang_verdict_canary_passed{%s,canary="greedy_reference"} 1\n' % labels in result["metrics"]
    assert 'llmops_sglang_verdict_canary_passed{%s,canary="speculative_lossless"} 0\n' % labels in result["metrics"]
    assert 'canary="tool_call"' not in result["metrics"] and "token 17" not in result["metrics"]
    assert 'llmops_sglang_verdict_canary_accept_length{%s,context="long"} 1.2\n' % labels in result["metrics"]
    scraped = scrape_textfiles(textfile_dir)
    assert "node_textfile_scrape_error 0" in scraped, scraped
    assert ('llmops_sglang_verdict_canary_passed{canary="speculative_lossless",deployment_id="%s",sglang_instance="qwen36"} 0'
            % DEPLOYMENT_ID) in scraped
    assert ('llmops_sglang_verdict_canary_accept_length{context="short",deployment_id="%s",sglang_instance="qwen36"} 2.9'
            % DEPLOYMENT_ID) in scraped
