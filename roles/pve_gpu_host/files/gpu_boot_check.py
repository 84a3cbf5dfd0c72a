# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's GPU boot check (llmops-gpu-boot-check.service, ordered before pve-guests.service).

After a reboot the nvidia-uvm nodes exist only once something loads the module and creates them, and a driver update
can give nvidia-uvm another major than the one a raw ``lxc.cgroup2.devices.allow`` line of a container config names;
either way the container starts and CUDA fails inside it (error 999). Before any guest starts, this check:

1. creates the uvm nodes when they are missing or carry another major than the module's (``nvidia-modprobe -c0 -u``,
   what the udev rule also runs: safe before the guests start, nothing has the nodes open);
2. checks that every container config that passes NVIDIA devices reaches the uvm node with the current major (a
   ``devN:`` entry, which PVE resolves at each start, or an allow rule for the major); it changes no config;
3. writes a report (JSON, this boot's ID) that the GPU preflight and the operator read, logs each problem to the
   journal, and exits 1 when a problem remains so that ``systemctl --failed`` shows it. The guests start either way:
   a container without this problem must not wait for one with it.

Standard library only, and lxc_device_rules.py installed beside it (the parser the GPU preflight module uses).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lxc_device_rules  # noqa: E402 (found beside this file)

READ_LIMIT = 1024 * 1024
MODPROBE_TIMEOUT = 60
OUTPUT_LIMIT = 4096


def read_text(path):
    """A regular file's text, at most READ_LIMIT bytes, never blocking (a FIFO would hang the boot); None otherwise."""
    return lxc_device_rules.read_regular_text(path, READ_LIMIT)


def node_state(path, major):
    """``{"path", "state", "major"}``: state ``ok``, ``missing``, ``not-a-character-device`` or ``other-major``."""
    try:
        info = os.stat(path)
    except OSError:
        return {"path": path, "state": "missing", "major": None}
    if not stat.S_ISCHR(info.st_mode):
        return {"path": path, "state": "not-a-character-device", "major": None}
    node_major = os.major(info.st_rdev)
    if major is not None and node_major != major:
        return {"path": path, "state": "other-major", "major": node_major}
    return {"path": path, "state": "ok", "major": node_major}


def uvm_major(proc_devices):
    return lxc_device_rules.parse_proc_devices(read_text(proc_devices) or "").get("nvidia-uvm")


def run_modprobe(program):
    argv = [program, "-c0", "-u"]
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=MODPROBE_TIMEOUT, check=False)
    except FileNotFoundError:
        return {"argv": argv, "rc": None, "output": "%s does not exist" % program}
    except PermissionError:
        return {"argv": argv, "rc": None, "output": "%s is not executable" % program}
    except subprocess.TimeoutExpired:
        return {"argv": argv, "rc": None, "output": "did not finish within %d s" % MODPROBE_TIMEOUT}
    output = result.stdout[-OUTPUT_LIMIT:].decode("utf-8", "replace").strip()
    return {"argv": argv, "rc": result.returncode, "output": output}


def check_configs(config_dir, major, uvm_path):
    """One entry per container config that passes NVIDIA devices: ``{"vmid", "config", "access", "allowed_majors",
    "evidence"}``; access is ``dev``, ``allow``, ``none`` (no way to the uvm node) or ``unreadable``."""
    try:
        names = sorted(os.listdir(config_dir))
    except OSError:
        return None
    entries = []
    for name in names:
        match = lxc_device_rules.CONFIG_NAME.match(name)
        if not match:
            continue
        path = os.path.join(config_dir, name)
        text = read_text(path)
        if text is None:
            entries.append({"vmid": int(match.group("vmid")), "config": path, "access": "unreadable", "allowed_majors": [],
                            "evidence": []})
            continue
        config = lxc_device_rules.parse_container_config(text)
        if not lxc_device_rules.passes_gpus(config):
            continue
        access = lxc_device_rules.uvm_access(config, major, uvm_path) if major is not None else None
        entries.append({"vmid": int(match.group("vmid")), "config": path, "access": access or "none",
                        "allowed_majors": lxc_device_rules.allowed_char_majors(config),
                        "evidence": [line for _rule, line in config["allow"]] + [line for _path, line in config["dev"]
                                                                                 if "nvidia-uvm" in line]})
    return entries


def problems_of(report):
    problems = []
    if report["uvm_major"] is None:
        problems.append("nvidia-uvm is not loaded (no nvidia-uvm in %s) after %s: CUDA cannot start in any container; "
                        "check 'modprobe nvidia-uvm' and the driver for the running kernel"
                        % (report["proc_devices"], " ".join(report["modprobe"]["argv"]) if report["modprobe"] else "the boot"))
    for node in report["nodes"]:
        if node["state"] != "ok":
            problems.append("%s is %s after the check (uvm major %s): containers cannot open it; run nvidia-modprobe -c0 -u"
                            % (node["path"], node["state"].replace("-", " ") + (" %s" % node["major"] if node["major"] else ""),
                               report["uvm_major"]))
    if report["containers"] is None:
        problems.append("the container configs in %s cannot be listed" % report["config_dir"])
    for entry in report["containers"] or ():
        if entry["access"] == "unreadable":
            problems.append("container %d: %s cannot be read" % (entry["vmid"], entry["config"]))
        elif entry["access"] == "none" and report["uvm_major"] is not None:
            problems.append("container %d: %s passes NVIDIA devices but allows no character devices of major %d, the "
                            "nvidia-uvm major of this boot (allows %s): CUDA fails in it (error 999). Rerun deploy.yml "
                            "(pve_container writes the current major), or pass the node by path ('devN: %s')"
                            % (entry["vmid"], entry["config"], report["uvm_major"],
                               ", ".join(str(major) for major in entry["allowed_majors"]) or "none", report["uvm_path"]))
    return problems


def write_report(path, report):
    """Write ``report`` as JSON: a temporary file beside it, then a rename, so a reader never sees half of one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    temporary = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def check(args):
    boot_id = (read_text(args.boot_id_file) or "").strip() or None
    major = uvm_major(args.proc_devices)
    before = [node_state(path, major) for path in args.uvm_device]
    modprobe = None
    if major is None or any(node["state"] != "ok" for node in before):
        modprobe = run_modprobe(args.nvidia_modprobe)
        major = uvm_major(args.proc_devices)
    after = [node_state(path, major) for path in args.uvm_device] if modprobe else before
    report = {
        "boot_id": boot_id,
        "checked_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "proc_devices": args.proc_devices,
        "uvm_major": major,
        "uvm_path": args.uvm_path,
        "nodes_before": before,
        "nodes": after,
        "created": [node["path"] for node, was in zip(after, before) if node["state"] == "ok" and was["state"] != "ok"],
        "modprobe": modprobe,
        "config_dir": args.config_dir,
        "containers": check_configs(args.config_dir, major, args.uvm_path),
    }
    report["problems"] = problems_of(report)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nvidia-modprobe", default="/usr/bin/nvidia-modprobe")
    parser.add_argument("--uvm-device", action="append", default=[], help="a uvm node to create (repeat)")
    parser.add_argument("--uvm-path", default="/dev/nvidia-uvm", help="the uvm node the container configs must reach")
    parser.add_argument("--proc-devices", default="/proc/devices")
    parser.add_argument("--config-dir", default="/etc/pve/lxc")
    parser.add_argument("--boot-id-file", default="/proc/sys/kernel/random/boot_id")
    parser.add_argument("--report", required=True)
    args = parser.parse_args(argv)
    args.uvm_device = args.uvm_device or ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    report = check(args)
    write_report(args.report, report)
    for problem in report["problems"]:
        sys.stderr.write("llmops-gpu-boot-check: %s\n" % problem)
    sys.stdout.write("llmops-gpu-boot-check: uvm major %s; created %s; %d GPU container config(s) checked; %d problem(s); "
                     "report %s\n" % (report["uvm_major"], ", ".join(report["created"]) or "nothing",
                                      len(report["containers"] or ()), len(report["problems"]), args.report))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
