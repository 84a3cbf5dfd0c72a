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

NVIDIA's installer registers the dkms module ``nvidia`` and installs ``nvidia.ko``; Debian's ``nvidia-kernel-dkms`` and
``nvidia-open-kernel-dkms`` (which Proxmox VE nodes install from Debian's non-free) register ``nvidia-current`` and
``nvidia-current-open`` and install ``nvidia-current.ko`` / ``nvidia-current-open.ko`` (their dkms.conf: PACKAGE_NAME,
DEST_MODULE_NAME[0]="$PACKAGE_NAME"). When a module is not built for a kernel, the driver and kernel pairs known not to
build (KNOWN_BUILD_FAILURES) name the cause and the release that fixes it.
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
# The dkms names of NVIDIA's kernel module, and the file name of its main module for each (see the docstring).
NVIDIA_DKMS_MODULES = ("nvidia", "nvidia-current", "nvidia-current-open")
DEBIAN_DKMS_MODULES = ("nvidia-current", "nvidia-current-open")
MODULE_FILE_PREFIXES = tuple(name + ".ko" for name in NVIDIA_DKMS_MODULES)
# Driver and kernel pairs known not to build, each with its source; a predicate on (dkms module, driver version,
# kernel version as a number tuple) and what to say. Only used for a kernel that has no module built.
KNOWN_BUILD_FAILURES = (
    {"applies": lambda module, version, kernel: (module in DEBIAN_DKMS_MODULES and version == "550.163.01"
                                                 and kernel is not None and (6, 17) <= kernel < (7,)),
     "what": "Debian trixie's nvidia-kernel-dkms 550.163.01-2 does not build for Linux 6.17 (drm_fb_create_takes_format_info, "
             "Debian bugs #1119901 and #1119308); 550.163.01-4 fixes it",
     "fix": "when dpkg -l nvidia-kernel-dkms shows 550.163.01-2 or -3, upgrade the driver packages to trixie-backports' "
            "550.163.01-4~bpo13+1 or later (apt install -t trixie-backports nvidia-driver nvidia-kernel-dkms), then dkms "
            "autoinstall -k {kernel}"},
    {"applies": lambda module, version, kernel: (module == "nvidia" and kernel is not None and kernel >= (7,)
                                                 and _release(version) is not None
                                                 and (_release(version) in ((580, 119, 2), (580, 126, 18))
                                                      or (595,) <= _release(version) < (595, 91, 7)
                                                      or (610,) <= _release(version) < (610, 57, 4))),
     "what": "NVIDIA's driver {version} lacks the Linux 7.0 build fixes of 595.91.07 and 610.57.04 (580.119.02, 580.126.18 "
             "and 595.71.05 are reported not to build there; 595.71.05 \"still tries to use screen_info struct which was "
             "refactored in 7.0\")",
     "fix": "install NVIDIA's driver 595.91.07 (or 610.57.04) or later (NVIDIA/open-gpu-kernel-modules pull request 1168: "
            "\"No longer needed since 595.91.07 and 610.57.04\"), or boot a 6.x kernel"},
)


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


def _release(version):
    """A version's leading numbers as a tuple: ``6.17.13-2-pve`` -> (6, 17, 13); None without a leading number."""
    match = re.match(r"^(\d+(?:\.\d+)*)", version or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


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


def _is_module_file(name):
    return name.startswith(MODULE_FILE_PREFIXES)


def module_files(modules_root, kernel):
    """Paths of the NVIDIA module (``nvidia.ko*``, Debian's ``nvidia-current.ko*``, ``nvidia-current-open.ko*``) built
    for ``kernel``: the dkms and the installer's usual places first, then anywhere in its tree (a bounded walk that does
    not follow links such as ``build``)."""
    tree = os.path.join(modules_root, kernel)
    found = []
    for directory in (os.path.join(tree, "updates", "dkms"), os.path.join(tree, "kernel", "drivers", "video")):
        try:
            found.extend(os.path.join(directory, name) for name in sorted(os.listdir(directory)) if _is_module_file(name))
        except OSError:
            continue
    if found:
        return found
    seen = 0
    for directory, subdirectories, names in os.walk(tree):
        seen += len(names) + len(subdirectories)
        found.extend(os.path.join(directory, name) for name in sorted(names) if _is_module_file(name))
        if found or seen > MAX_WALK_ENTRIES:
            break
    return found


def nvidia_entries(status):
    """dkms's lines about NVIDIA's module (any of NVIDIA_DKMS_MODULES)."""
    return [entry for entry in (status["entries"] if status else []) if entry["module"] in NVIDIA_DKMS_MODULES]


def dkms_installed(status, kernel):
    """The dkms line saying NVIDIA's module is installed for ``kernel``, else None."""
    for entry in nvidia_entries(status):
        if entry["kernel"] == kernel and entry["state"] == "installed":
            return entry["line"]
    return None


def known_build_failure(status, kernel):
    """(what, fix) of the first KNOWN_BUILD_FAILURES entry that fits the NVIDIA module dkms knows (its entry for
    ``kernel`` first, then the others) and ``kernel``; None when none fits."""
    entries = nvidia_entries(status)
    entries.sort(key=lambda entry: entry["kernel"] != kernel)
    release = _release(kernel)
    for entry in entries:
        for known in KNOWN_BUILD_FAILURES:
            if known["applies"](entry["module"], entry["version"], release):
                values = {"module": entry["module"], "version": entry["version"], "kernel": kernel}
                return known["what"].format(**values), known["fix"].format(**values)
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
    nvidia_lines = [entry["line"] for entry in nvidia_entries(status)]
    problems = problem_lines(status)
    for role, kernel in (("running", state["running"]), ("next boot", state["next_boot"])):
        if not kernel or (role == "next boot" and kernel == state["running"]):
            continue
        facts = state["kernels"][kernel]
        if facts["module_files"] or facts["dkms_line"] or facts.get("loaded"):
            continue
        evidence = nvidia_lines[:4] or ["dkms status lists no nvidia module"]
        evidence += problems[:max(0, 5 - len(evidence))]
        evidence.append("no nvidia.ko* or nvidia-current*.ko* under the module tree of %s" % kernel)
        known = known_build_failure(status, kernel)
        if role == "running":
            what = "no NVIDIA kernel module is built for the running kernel %s" % kernel
            consequence = "the driver cannot be loaded on this kernel: no GPU is usable until it is built"
        else:
            what = "no NVIDIA kernel module is built for %s, the kernel the node boots next%s" % (
                kernel, " (pinned in %s)" % state["pin_file"] if state["pin"] == kernel else " (the newest installed)")
            consequence = "the next reboot comes up without the NVIDIA driver: every GPU container fails to start its server"
        fix = "apt install %s, then dkms autoinstall -k %s (or reinstall the driver for that kernel)" % (headers_package(kernel), kernel)
        if known:
            what += ": %s" % known[0]
            fix = known[1]
        if role == "next boot":
            fix += "; or keep booting the working kernel: proxmox-boot-tool kernel pin %s" % state["running"]
        findings.append(Finding("nvidia_module_not_built", "error", "kernel %s (%s)" % (kernel, role), what, evidence,
                                consequence, fix))
    return findings
