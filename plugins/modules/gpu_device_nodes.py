#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_device_nodes
short_description: Discover device nodes and their major and minor numbers by stat
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
description:
  - Expands shell-style patterns (for example C(/dev/nvidia[0-9]*)) on the target and stats every match. Character
    and block devices are returned with the major and minor numbers the kernel gave them, so that nothing downstream
    assumes a number. This matters for C(nvidia-uvm) and C(nvidia-caps), whose majors are dynamic and change with
    kernel or driver updates.
  - Directories are returned with type C(d) when O(include_directories) is true; other files are left out and listed
    in RV(other_files).
  - The list is in a stable order (natural sort, so C(nvidia10) follows C(nvidia9)) and has no duplicates.
  - The result can be passed as is to the C(devices) option of M(llmops.serving.lxc_gpu_passthrough).
options:
  patterns:
    description:
      - Glob patterns of the nodes to discover, as understood by Python's C(glob) (C(*), C(?), C([0-9])).
    type: list
    elements: str
    default:
      - /dev/nvidia[0-9]*
      - /dev/nvidiactl
      - /dev/nvidia-modeset
      - /dev/nvidia-uvm
      - /dev/nvidia-uvm-tools
      - /dev/nvidia-caps/nvidia-cap[0-9]*
  required:
    description:
      - Patterns of O(patterns) (or any other patterns) that must match at least one device node; the module fails
        and names them when they match nothing.
    type: list
    elements: str
    default: []
  include_directories:
    description: Return matching directories as type C(d) instead of skipping them.
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - Symbolic links are followed; RV(devices[].path) is the path that matched, not the link target.
seealso:
  - module: llmops.serving.lxc_gpu_passthrough
  - name: Linux allocated devices
    description: The kernel's list of fixed majors (195 is NVIDIA) and the dynamic ranges.
    link: https://www.kernel.org/doc/Documentation/admin-guide/devices.txt
"""

EXAMPLES = r"""
- name: Discover the NVIDIA device nodes
  llmops.serving.gpu_device_nodes:
    required:
      - /dev/nvidia[0-9]*
      - /dev/nvidiactl
      - /dev/nvidia-uvm
  register: gpu_nodes

- name: Pass them into a container
  llmops.serving.lxc_gpu_passthrough:
    vmid: 120
    devices: "{{ gpu_nodes.devices }}"
"""

RETURN = r"""
devices:
  description: The device nodes found, in natural order of their paths.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path that matched.
      type: str
      sample: /dev/nvidia-uvm
    type:
      description: C(c) character device, C(b) block device, C(d) directory.
      type: str
      sample: c
    major:
      description: Major number; null for a directory.
      type: int
      sample: 508
    minor:
      description: Minor number; null for a directory.
      type: int
      sample: 0
  sample:
    - {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
    - {"path": "/dev/nvidia-uvm", "type": "c", "major": 508, "minor": 0}
majors:
  description: The distinct major numbers of the character devices found, ascending.
  returned: always
  type: list
  elements: int
  sample: [195, 508]
unmatched:
  description: Patterns that matched no device node.
  returned: always
  type: list
  elements: str
  sample: ["/dev/nvidia-caps/nvidia-cap[0-9]*"]
other_files:
  description:
    - Matches that are neither device nodes nor (with O(include_directories)) directories, for example the
      C(/dev/nvidia-caps) directory that C(/dev/nvidia*) matches.
    - Named so because Ansible reserves a result key C(skipped) (a non-empty one would show the task as skipped).
  returned: always
  type: list
  elements: str
  sample: []
"""

import glob
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule

MAX_MATCHES_PER_PATTERN = 4096


def natural_key(path):
    """Sort key that orders embedded numbers numerically: nvidia2 < nvidia10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path)]


def describe(path, include_directories):
    """A device dict for ``path``, None when it is to be skipped. Raises OSError when it cannot be stat'ed."""
    info = os.stat(path)
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return {"path": path, "type": "c" if stat.S_ISCHR(info.st_mode) else "b",
                "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev)}
    if include_directories and stat.S_ISDIR(info.st_mode):
        return {"path": path, "type": "d", "major": None, "minor": None}
    return None


def discover(patterns, include_directories=False):
    """Returns (devices, unmatched patterns, other files: matches that are neither devices nor wanted directories)."""
    found = {}
    other_files = []
    unmatched = []
    for pattern in patterns:
        matched = False
        for path in sorted(glob.glob(pattern))[:MAX_MATCHES_PER_PATTERN]:
            path = os.path.normpath(path)
            if path in found:
                matched = True
                continue
            try:
                device = describe(path, include_directories)
            except FileNotFoundError:
                continue  # removed between glob and stat
            if device is None:
                if path not in other_files:
                    other_files.append(path)
                continue
            found[path] = device
            matched = True
        if not matched:
            unmatched.append(pattern)
    devices = [found[path] for path in sorted(found, key=natural_key)]
    return devices, unmatched, other_files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            patterns=dict(type="list", elements="str", default=[
                "/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                "/dev/nvidia-caps/nvidia-cap[0-9]*",
            ]),
            required=dict(type="list", elements="str", default=[]),
            include_directories=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        devices, unmatched, other_files = discover(params["patterns"], params["include_directories"])
        extra = [pattern for pattern in params["required"] if pattern not in params["patterns"]]
        _extra_devices, extra_unmatched, _extra_other_files = discover(extra, params["include_directories"])
    except OSError as exc:
        module.fail_json(msg="cannot stat %s: %s" % (exc.filename, exc.strerror), devices=[], majors=[], unmatched=[],
                         other_files=[])
    missing = [pattern for pattern in params["required"] if pattern in unmatched or pattern in extra_unmatched]
    majors = sorted(set(device["major"] for device in devices if device["type"] == "c"))
    result = dict(changed=False, devices=devices, majors=majors, unmatched=unmatched, other_files=other_files)
    if missing:
        module.fail_json(msg="no device node matches %s: is the driver loaded and are its nodes created?" % ", ".join(missing), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
