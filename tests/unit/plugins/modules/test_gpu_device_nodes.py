"""gpu_device_nodes: stat-based discovery. Real character devices (/dev/null 1:3, /dev/zero 1:5, /dev/full 1:7)
stand in for GPU nodes through symbolic links, so the test runs unprivileged and still reads real rdev numbers."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.modules import gpu_device_nodes
from ansible_collections.llmops.serving.tests.support.task_result import ansible_task_result
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module


@pytest.fixture
def dev(tmp_path):
    for name, target in (("nvidia0", "/dev/null"), ("nvidia10", "/dev/zero"), ("nvidia2", "/dev/full"), ("nvidiactl", "/dev/null")):
        os.symlink(target, tmp_path / name)
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "nvidia-notes.txt").write_text("not a device\n")
    return tmp_path


def test_nodes_come_with_their_real_numbers_in_natural_order(dev):
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia[0-9]*" % dev, "%s/nvidiactl" % dev]})
    assert not failed and result["changed"] is False
    assert result["devices"] == [
        {"path": "%s/nvidia0" % dev, "type": "c", "major": 1, "minor": 3},
        {"path": "%s/nvidia2" % dev, "type": "c", "major": 1, "minor": 7},
        {"path": "%s/nvidia10" % dev, "type": "c", "major": 1, "minor": 5},
        {"path": "%s/nvidiactl" % dev, "type": "c", "major": 1, "minor": 3},
    ]
    assert result["majors"] == [1]
    assert result["unmatched"] == [] and result["other_files"] == []


def test_other_files_are_left_out_and_directories_only_on_request(dev):
    patterns = ["%s/nvidia-*" % dev]
    result, failed = run_module(gpu_device_nodes.main, {"patterns": patterns})
    assert not failed
    assert result["devices"] == []
    assert result["other_files"] == ["%s/nvidia-caps" % dev, "%s/nvidia-notes.txt" % dev]
    assert result["unmatched"] == patterns
    result, failed = run_module(gpu_device_nodes.main, {"patterns": patterns, "include_directories": True})
    assert not failed
    assert result["devices"] == [{"path": "%s/nvidia-caps" % dev, "type": "d", "major": None, "minor": None}]
    assert result["majors"] == [] and result["other_files"] == ["%s/nvidia-notes.txt" % dev]


def test_a_directory_among_the_matches_does_not_make_ansible_call_the_task_skipped(dev):
    # Issue #13: /dev/nvidia* also matches the /dev/nvidia-caps directory; a result key named `skipped` listing it made
    # Ansible show the task as SKIPPED and `is skipped` true. ansible-core's own TaskResult decides here.
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia*" % dev]})
    assert not failed and "%s/nvidia-caps" % dev in result["other_files"]
    task_result = ansible_task_result("pve", result)
    assert not task_result.is_skipped() and not task_result.is_failed() and not task_result.is_changed()
    assert not set(result) & {"skipped", "failed", "unreachable", "results", "ansible_facts", "invocation"}


def test_overlapping_patterns_list_a_node_once(dev):
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia0" % dev, "%s/nvidia[0-9]" % dev, "%s/nvidia*" % dev]})
    assert not failed
    assert [device["path"] for device in result["devices"]] == ["%s/%s" % (dev, name) for name in ("nvidia0", "nvidia2", "nvidia10", "nvidiactl")]
    assert result["unmatched"] == []


def test_a_required_pattern_without_a_node_fails_and_names_it(dev):
    uvm = "%s/nvidia-uvm" % dev
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia[0-9]*" % dev, uvm], "required": [uvm, "%s/nvidia0" % dev]})
    assert failed
    assert result["msg"] == "no device node matches %s: is the driver loaded and are its nodes created?" % uvm
    assert len(result["devices"]) == 3 and result["unmatched"] == [uvm]


def test_a_required_pattern_outside_patterns_is_checked_too(dev):
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia0" % dev], "required": ["%s/nvidiactl" % dev]})
    assert not failed and len(result["devices"]) == 1
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia0" % dev], "required": ["%s/nvidia-modeset" % dev]})
    assert failed and "nvidia-modeset" in result["msg"]


def test_a_dangling_link_is_not_a_node(dev):
    os.symlink("/nonexistent/nvidia-uvm", dev / "nvidia-uvm")
    result, failed = run_module(gpu_device_nodes.main, {"patterns": ["%s/nvidia-uvm" % dev]})
    assert not failed and result["devices"] == [] and result["unmatched"] == ["%s/nvidia-uvm" % dev]


def test_natural_key_orders_numbers_numerically_and_gpus_first():
    paths = ["/dev/nvidia10", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia9", "/dev/nvidia-uvm", "/dev/nvidia0"]
    assert sorted(paths, key=gpu_device_nodes.natural_key) == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia9", "/dev/nvidia10", "/dev/nvidia-uvm", "/dev/nvidiactl"]
