# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Is the NVIDIA kernel module built for the kernel that runs and for the kernel the node boots next?

``dkms status`` prints one line per module, version and kernel: ``nvidia/550.54.14, 6.8.4-2-pve, x86_64:
installed`` (dkms 3) or ``nvidia, 550.54.14, 6.8.4-2-pve, x86_64: installed`` (dkms 2), ``built`` when compiled but
not installed, ``added`` (no kernel) when only the source is registered, and sometimes a suffix such as
``(Original modules exist)`` or a ``WARNING:`` line. A kernel is installed when ``<modules_root>/<version>/`` exists
and ``<boot_dir>/vmlinuz-<version>`` beside it. The kernel booted next is the newest installed one by version order
(Proxmox's proxmox-boot-tool and Debian's GRUB both sort that way), unless ``proxmox-boot-tool kernel pin`` wrote
``/etc/kernel/proxmox-boot-pin`` (``--next-boot`` writes ``next-boot-pin`` beside it, which wins once).
"""

from __future__ import annotations

import os
import re

from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding

_STATUS = re.compile(r"^(?P<module>[A-Za-z0-9_.+-]+)(?:/|,\s*)(?P<version>[^,:\s]+)"
                     r"(?:,\s*(?P<kernel>[^,:\s]+)(?:,\s*(?P<arch>[^,:\s]+))?)?:\s*(?P<state>[A-Za-z]+)(?P<extra>.*)$")
# What dkms says when it cannot answer or a build is off: ``Error! Could not locate dkms.conf file.``, a ``WARNING:``
# line, ``File: /var/lib/dkms/nvidia/390.48/source/dkms.conf does not exist.``
_PROBLEM = re.compile(r"^\s*(?:Error!|Warning)|/dkms/nvidia", re.IGNORECASE)
MAX_LINES = 5000
MAX_WALK_ENTRIES = 100000
NEXT_BOOT_PIN = "next-boot-pin"


def parse_dkms_status(text):
    """``{"entries": [{"module", "version", "kernel", "arch", "state", "extra", "line"}], "other": [lines]}``.

    ``other`` keeps what is not a status line (warnings, errors), verbatim. ``extra`` is what follows the state, for
    example ``(original_module exists)`` (dkms 2), ``(Original modules exist)`` or ``(WARNING! Diff between built and
    installed module!)`` (dkms 3): the module is installed either way."""
    entries, other = [], []
    for line in text.splitlines()[:MAX_LINES]:
        stripped = line.strip()
        if not stripped:
            continue
        match = _STATUS.match(stripped)
        if match:
            entry = match.groupdict()
            entry["state"] = entry["state"].lower()
            entry["extra"] = entry["extra"].strip()
            entry["line"] = line
            entries.append(entry)
        else:
            other.append(line)
    return {"entries": entries, "other": other}


def version_key(version):
    """Sort key for kernel versions: numbers numerically, ``6.8.12-10-pve`` after ``6.8.12-9-pve``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", version) if part]


def installed_kernels(modules_root, boot_dir):
    """Kernel versions with a module tree and a ``vmlinuz-<version>``, oldest first."""
    try:
        names = os.listdir(modules_root)
    except OSError:
        return []
    kernels = [name for name in names
               if os.path.isdir(os.path.join(modules_root, name)) and os.path.isfile(os.path.join(boot_dir, "vmlinuz-" + name))]
    return sorted(kernels, key=version_key)


def read_pin(boot_pin_file):
    """The pinned kernel (next-boot pin first), with the file it came from; (None, None) when nothing is pinned."""
    for path in (os.path.join(os.path.dirname(boot_pin_file), NEXT_BOOT_PIN), boot_pin_file):
        try:
            with open(path, "rb") as handle:
                value = handle.read(256).decode("utf-8", "replace").strip()
        except OSError:
            continue
        if value:
            return value.split()[0], path
    return None, None


def next_boot_kernel(kernels, pin):
    """The pinned kernel when it is installed, else the newest installed; None without any."""
    if pin and pin in kernels:
        return pin
    return kernels[-1] if kernels else None


def module_files(modules_root, kernel):
    """Paths of ``nvidia.ko*`` built for ``kernel``: the dkms and the installer's usual places first, then anywhere
    in its tree (a bounded walk that does not follow links such as ``build``)."""
    tree = os.path.join(modules_root, kernel)
    found = []
    for directory in (os.path.join(tree, "updates", "dkms"), os.path.join(tree, "kernel", "drivers", "video")):
        try:
            found.extend(os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.startswith("nvidia.ko"))
        except OSError:
            continue
    if found:
        return found
    seen = 0
    for directory, subdirectories, names in os.walk(tree):
        seen += len(names) + len(subdirectories)
        found.extend(os.path.join(directory, name) for name in sorted(names) if name.startswith("nvidia.ko"))
        if found or seen > MAX_WALK_ENTRIES:
            break
    return found


def dkms_installed(status, kernel):
    """The dkms line saying ``nvidia`` is installed for ``kernel``, else None."""
    for entry in status["entries"] if status else []:
        if entry["module"] == "nvidia" and entry["kernel"] == kernel and entry["state"] == "installed":
            return entry["line"]
    return None


def headers_package(kernel):
    """The headers package dkms needs: ``proxmox-headers-<k>`` on Proxmox VE 8 and later (kernel 6.x), before
    ``pve-headers-<k>``; ``linux-headers-<k>`` elsewhere."""
    if kernel.endswith("-pve"):
        major = re.match(r"^(\d+)", kernel)
        return ("proxmox-headers-%s" if major and int(major.group(1)) >= 6 else "pve-headers-%s") % kernel
    return "linux-headers-%s" % kernel


def build_state(modules_root, boot_dir, boot_pin_file, running_kernel, status, loaded=None):
    """What was found per kernel: ``{"running", "next_boot", "pin", "pin_file", "installed", "kernels": {kernel:
    {"module_files", "dkms_line", "loaded"}}}`` for the running and the next-boot kernel.

    ``loaded``: evidence that the NVIDIA module is loaded now (for example ``/sys/module/nvidia``); a loaded module
    was built for the running kernel, wherever its file lies (some distributions keep modules outside /lib/modules)."""
    kernels = installed_kernels(modules_root, boot_dir)
    pin, pin_file = read_pin(boot_pin_file)
    following = next_boot_kernel(kernels, pin)
    state = {"running": running_kernel, "next_boot": following, "pin": pin, "pin_file": pin_file, "installed": kernels,
             "kernels": {}}
    for kernel in [running_kernel, following]:
        if kernel and kernel not in state["kernels"]:
            state["kernels"][kernel] = {"module_files": module_files(modules_root, kernel)[:5],
                                        "dkms_line": dkms_installed(status, kernel),
                                        "loaded": loaded if kernel == running_kernel else None}
    return state


def problem_lines(status):
    """dkms's own error and warning lines (and those naming the nvidia dkms tree), verbatim."""
    return [line.strip() for line in (status["other"] if status else []) if _PROBLEM.search(line)]


def build_findings(state, status):
    """``nvidia_module_not_built`` (error) for the running and for the next-boot kernel when no ``nvidia.ko`` exists
    for it and dkms does not say installed. The evidence is dkms's nvidia lines (or that it lists none) and its own
    error lines, then the module tree searched."""
    findings = []
    nvidia_lines = [entry["line"] for entry in (status["entries"] if status else []) if entry["module"] == "nvidia"]
    problems = problem_lines(status)
    for role, kernel in (("running", state["running"]), ("next boot", state["next_boot"])):
        if not kernel or (role == "next boot" and kernel == state["running"]):
            continue
        facts = state["kernels"][kernel]
        if facts["module_files"] or facts["dkms_line"] or facts.get("loaded"):
            continue
        evidence = nvidia_lines[:4] or ["dkms status lists no nvidia module"]
        evidence += problems[:max(0, 5 - len(evidence))]
        evidence.append("no nvidia.ko* under the module tree of %s" % kernel)
        if role == "running":
            what = "no NVIDIA kernel module is built for the running kernel %s" % kernel
            consequence = "the driver cannot be loaded on this kernel: no GPU is usable until it is built"
        else:
            what = "no NVIDIA kernel module is built for %s, the kernel the node boots next%s" % (
                kernel, " (pinned in %s)" % state["pin_file"] if state["pin"] == kernel else " (the newest installed)")
            consequence = "the next reboot comes up without the NVIDIA driver: every GPU container fails to start its server"
        fix = "apt install %s, then dkms autoinstall -k %s (or reinstall the driver for that kernel)" % (headers_package(kernel), kernel)
        if role == "next boot":
            fix += "; or keep booting the working kernel: proxmox-boot-tool kernel pin %s" % state["running"]
        findings.append(Finding("nvidia_module_not_built", "error", "kernel %s (%s)" % (kernel, role), what, evidence,
                                consequence, fix))
    return findings
