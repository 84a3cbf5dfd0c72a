# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The unit's DeviceAllow= must let the server open its GPUs on a real node. With DevicePolicy=closed, systemd resolves
``char-<name>`` against the names in /proc/devices (bpf-devices.c matches each line's name with fnmatch): a name the
node's driver does not register allows nothing, and CUDA cannot open /dev/nvidia<minor> (major 195)."""
from __future__ import annotations

import fnmatch
import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
# /proc/devices of a real node: an H200 with the open kernel module 580.159.04 (captured on the project's GPU machine).
H200_PROC_DEVICES = REPO / "tests/unit/plugins/module_utils/data/gpu_preflight/h200-vm-580.159.04/proc-devices.txt"


def character_devices(text):
    """(major, name) of each line of /proc/devices' character section."""
    rows, in_characters = [], False
    for line in text.splitlines():
        if line.startswith("Character devices:"):
            in_characters = True
        elif line.startswith("Block devices:"):
            break
        elif in_characters and line.strip() and line.split()[0].isdigit():
            major, name = line.split(None, 1)
            rows.append((int(major), name.strip()))
    return rows


def allowed_majors(device_allow, proc_devices):
    """The majors systemd's char-<name> entries allow on a node with this /proc/devices."""
    groups = [entry.split()[0][len("char-"):] for entry in device_allow if entry.startswith("char-")]
    return {major for major, name in character_devices(proc_devices) for group in groups if fnmatch.fnmatchcase(name, group)}


def default_device_allow():
    return yaml.safe_load((REPO / "roles/sglang_service/defaults/main.yml").read_text())["sglang_service_device_allow"]


def test_the_defaults_allow_the_gpus_and_uvm_on_a_real_open_module_node():
    text = H200_PROC_DEVICES.read_text()
    uvm = [major for major, name in character_devices(text) if name == "nvidia-uvm"]
    assert (195, "nvidia") in character_devices(text) and uvm == [238]
    # The GPU nodes are not listed by path (their minors vary): only the group of major 195 lets CUDA open them.
    assert not any(entry.startswith("/dev/nvidia0") for entry in default_device_allow())
    assert {195, 238} <= allowed_majors(default_device_allow(), text)


def test_the_old_default_would_have_denied_the_gpus_on_that_node():
    old = [entry for entry in default_device_allow() if entry != "char-nvidia rw"]
    assert 195 not in allowed_majors(old, H200_PROC_DEVICES.read_text())


def test_the_proprietary_modules_name_is_still_allowed():
    # The proprietary module registers major 195 as "nvidia-frontend" (synthetic line in /proc/devices' format).
    assert 195 in allowed_majors(default_device_allow(), "Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n")
