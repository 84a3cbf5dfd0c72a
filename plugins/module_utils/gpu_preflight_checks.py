# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU preflight's remaining checks: each GPU's state from ``nvidia-smi --query-gpu``, the ``nvidia-uvm`` device
node against ``/proc/devices`` and the container configs, and processes holding GPU memory outside any service unit.

Also the one way the preflight runs a program: ``run_bounded`` (a timeout, bounded output, a missing program is an
answer and not an exception).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import subprocess
import threading

from ansible_collections.llmops.serving.plugins.module_utils import lxc_device_rules, pcie_path, procfs
from ansible_collections.llmops.serving.plugins.module_utils.lxc_device_rules import (
    parse_container_config, parse_proc_devices, uvm_access)
from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding, gpu_subject, visible

COMMAND_TIMEOUT = 60
OUTPUT_LIMIT = 8 * 1024 * 1024
FILE_LIMIT = 1024 * 1024

# The order the module asks nvidia-smi for; name is parsed as the free-text field it is (it may hold a comma).
GPU_QUERY_FIELDS = ("index", "uuid", "pci.bus_id", "name", "persistence_mode", "pcie.link.gen.gpucurrent",
                    "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "ecc.mode.current",
                    "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure")
# Drivers before pcie.link.gen.gpucurrent refuse it with 'Field "..." is not a valid field to query.' and exit 2.
GEN_CURRENT_FALLBACK = ("pcie.link.gen.gpucurrent", "pcie.link.gen.current")
APPS_QUERY = "--query-compute-apps=pid,gpu_uuid,used_memory,process_name"
NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]", "")


# --------------------------------------------------------------------------- running programs

def run_bounded(argv, timeout=COMMAND_TIMEOUT, limit=OUTPUT_LIMIT):
    """Run ``argv`` without a shell: ``{"rc", "stdout", "stderr", "missing", "timed_out", "truncated"}``.

    ``rc`` None when it could not start (``missing`` True for a program that is not there) or timed out; each stream
    keeps its first and last ``limit // 2`` bytes (the rest is dropped while reading, so a flood costs no memory)."""
    result = {"rc": None, "stdout": "", "stderr": "", "missing": False, "timed_out": False, "truncated": False,
              "error": None}
    try:
        # Not AnsibleModule.run_command: it keeps all of a flood of output in memory and cannot kill the program's
        # process group at a timeout, both of which this bound exists for.
        # pylint: disable-next=ansible-bad-function
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        result["missing"] = True
        result["error"] = "%s: not found" % argv[0]
        return result
    except OSError as exc:
        result["error"] = "%s: %s" % (argv[0], exc.strerror or exc)
        result["missing"] = isinstance(exc, PermissionError)
        return result
    collected = {}
    readers = [threading.Thread(target=_drain, args=(stream, limit, collected, name), daemon=True)
               for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))]
    for reader in readers:
        reader.start()
    try:
        result["rc"] = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        result["timed_out"] = True
        result["error"] = "%s did not finish within %d s" % (argv[0], timeout)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            process.kill()
        process.wait()
    for reader in readers:
        reader.join(5)
    for name in ("stdout", "stderr"):
        data, truncated = collected.get(name, (b"", False))
        result[name] = data.decode("utf-8", "replace")
        result["truncated"] = result["truncated"] or truncated
    return result


def _drain(stream, limit, collected, name):
    head, tail = bytearray(), bytearray()
    half = limit // 2
    dropped = False
    try:
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            if len(head) < half:
                room = half - len(head)
                head.extend(chunk[:room])
                chunk = chunk[room:]
            if chunk:
                tail.extend(chunk)
                if len(tail) > half:
                    del tail[:len(tail) - half]
                    dropped = True
    finally:
        stream.close()
    data = bytes(head) + (b"\n[... output cut ...]\n" if dropped else b"") + bytes(tail)
    collected[name] = (data, dropped)


def read_text(path, limit=FILE_LIMIT):
    """The first ``limit`` bytes of a file as text; None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def read_regular_text(path, limit=FILE_LIMIT):
    """read_text() of a regular file only, never blocking on a FIFO (lxc_device_rules.read_regular_text)."""
    return lxc_device_rules.read_regular_text(path, limit)


def first_line(result):
    text = (result.get("stderr") or "").strip() or (result.get("stdout") or "").strip()
    return text.splitlines()[0] if text else (result.get("error") or "exit status %s and no output" % result.get("rc"))


# --------------------------------------------------------------------------- nvidia-smi --query-gpu

def _value(text):
    text = text.strip()
    return None if text in NOT_AVAILABLE else text


def _int(text):
    value = _value(text or "")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _yes(text):
    value = _value(text or "")
    if value is None:
        return None
    return value.lower() in ("yes", "enabled", "1", "true")


def parse_gpu_query(text, fields=GPU_QUERY_FIELDS):
    """Rows of ``--format=csv,noheader,nounits`` for ``fields`` as GPU dicts; a row with too few fields is skipped
    (a truncated line), extra commas are kept in ``name``."""
    gpus = []
    name_at = fields.index("name")
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        extra = len(values) - len(fields)
        if extra < 0:
            continue
        if extra:
            values[name_at:name_at + extra + 1] = [", ".join(values[name_at:name_at + extra + 1])]
        row = dict(zip(fields, values))
        index = _int(row["index"])
        if index is None:
            continue
        gen_current = row.get("pcie.link.gen.gpucurrent", row.get("pcie.link.gen.current"))
        gpus.append({
            "index": index,
            "uuid": _value(row["uuid"]),
            "bus_id": _bus_id(row["pci.bus_id"]),
            "name": visible(_value(row["name"]), 200) or None,
            "persistence_mode": _value(row["persistence_mode"]),
            "pcie": {"gen_current": _int(gen_current), "gen_max": _int(row["pcie.link.gen.max"]),
                     "width_current": _int(row["pcie.link.width.current"]), "width_max": _int(row["pcie.link.width.max"])},
            "ecc_mode": _value(row["ecc.mode.current"]),
            "retired_pages_pending": _yes(row["retired_pages.pending"]),
            "remapped_rows_pending": _yes(row["remapped_rows.pending"]),
            "remapped_rows_failure": _yes(row["remapped_rows.failure"]),
            "line": line,
        })
    return gpus


def _bus_id(text):
    """``0000:3b:00.0`` from nvidia-smi's ``00000000:3B:00.0``; the text as is when it is something else."""
    match = re.match(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", (text or "").strip())
    if not match:
        return _value(text or "")
    return "%04x:%s:%s.%s" % (int(match.group(1), 16), match.group(2).lower(), match.group(3).lower(), match.group(4))


def query_gpus(nvidia_smi, runner=run_bounded):
    """``(gpus, findings, fields used)``: asks with pcie.link.gen.gpucurrent and again with pcie.link.gen.current
    when the driver refuses it; a missing or failing nvidia-smi is an ``nvidia_smi_failed`` error finding."""
    fields = GPU_QUERY_FIELDS
    for attempt in range(2):
        result = runner([nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        output = result["stdout"] + "\n" + result["stderr"]
        if result["rc"] == 0:
            return parse_gpu_query(result["stdout"], fields), [], fields
        if attempt == 0 and "is not a valid field to query" in output and GEN_CURRENT_FALLBACK[0] in output:
            fields = tuple(GEN_CURRENT_FALLBACK[1] if field == GEN_CURRENT_FALLBACK[0] else field for field in fields)
            continue
        break
    if result["missing"]:
        what = "nvidia-smi (%s) is not installed or not executable here" % nvidia_smi
    else:
        what = "nvidia-smi --query-gpu failed: %s" % first_line(result)
    return [], [Finding("nvidia_smi_failed", "error", "nvidia-smi", what, [first_line(result)],
                        "no GPU can be checked, and a server cannot use the GPUs while NVML does not answer",
                        "install the NVIDIA driver matching the host's kernel module, or fix what the line names")], fields


def gpu_findings(gpu, from_sysfs_link=False):
    """Per-GPU findings from the query: persistence mode, ECC, pending retirement and remapping, and the PCIe link
    when sysfs did not already judge it (``from_sysfs_link``)."""
    subject = gpu_subject(gpu["index"], gpu["bus_id"])
    evidence = [gpu["line"]]
    findings = []
    if gpu["persistence_mode"] == "Disabled":
        findings.append(Finding(
            "persistence_mode", "warning", subject, "persistence mode is off", evidence,
            "the driver tears the GPU's state down whenever no process holds it: every start of the server pays a "
            "driver initialisation of seconds, and GPU errors are not kept between processes",
            "systemctl enable --now nvidia-persistenced (NVIDIA's way; nvidia-smi -pm 1 is deprecated)"))
    if gpu["ecc_mode"] == "Disabled":
        findings.append(Finding(
            "ecc_disabled", "warning", subject, "ECC is disabled on a GPU that supports it", evidence,
            "memory bit errors go undetected: the server can return wrong tokens without any error",
            "nvidia-smi -i %s -e 1, then reset the GPU or reboot" % gpu["index"]))
    if gpu["remapped_rows_failure"]:
        findings.append(Finding(
            "row_remap_failure", "error", subject, "a row remapping failed: the GPU has memory it cannot repair", evidence,
            "uncorrectable memory errors can hit the server at any time (Xid 48/95, wrong results)",
            "take the GPU out of service and contact the vendor (RMA); nvidia-smi -q -d ROW_REMAPPER shows the counts"))
    if gpu["remapped_rows_pending"]:
        findings.append(Finding(
            "row_remap_pending", "error", subject, "a row remapping is pending: the GPU needs a reset to apply it", evidence,
            "until the reset the faulty memory row is still in use: errors or wrong results in the server",
            "with no process on the GPU: nvidia-smi -r -i %s, or reboot the node" % gpu["index"]))
    if gpu["retired_pages_pending"]:
        findings.append(Finding(
            "retired_pages_pending", "error", subject, "a memory page retirement is pending: the GPU needs a reset",
            evidence, "the page to retire is still in use until the reset: errors or wrong results in the server",
            "with no process on the GPU: nvidia-smi -r -i %s, or reboot the node" % gpu["index"]))
    if not from_sysfs_link:
        pcie = gpu["pcie"]
        width = pcie_path.width_finding(subject, pcie["width_current"], pcie["width_max"], evidence, "nvidia-smi")
        speed = pcie_path.speed_finding(subject, _gen_gts(pcie["gen_current"]), _gen_gts(pcie["gen_max"]), evidence, "nvidia-smi")
        findings.extend(finding for finding in (width, speed) if finding)
    return findings


def _gen_gts(gen):
    return {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}.get(gen)


def resolve_groups(groups, gpus):
    """``([(name, [gpu, ...])], findings)``: each group's GPUs by UUID or index string; ``gpu_unknown`` error for
    one nvidia-smi does not list."""
    by_uuid = {gpu["uuid"].lower(): gpu for gpu in gpus if gpu["uuid"]}
    by_index = {str(gpu["index"]): gpu for gpu in gpus}
    resolved, findings = [], []
    for group in groups:
        members = []
        for wanted in group.get("gpus") or []:
            key = str(wanted).strip()
            gpu = by_uuid.get(key.lower()) or by_index.get(key)
            if gpu is None:
                findings.append(Finding(
                    "gpu_unknown", "error", "server %s" % group["name"], "nvidia-smi here lists no GPU %s" % key,
                    ["GPUs listed: %s" % (", ".join("%s %s" % (gpu["index"], gpu["uuid"]) for gpu in gpus) or "none")],
                    "the server cannot start on the GPUs it is given",
                    "name the GPU by an index or UUID that nvidia-smi -L shows on this host"))
            elif gpu not in members:
                members.append(gpu)
        resolved.append((group["name"], members))
    return resolved, findings


# --------------------------------------------------------------------------- nvidia-uvm

def stat_node(path):
    """``{"exists", "char", "major", "minor"}`` of a device node (links followed)."""
    try:
        info = os.stat(path)
    except OSError:
        return {"exists": os.path.lexists(path), "char": False, "major": None, "minor": None}
    if not stat.S_ISCHR(info.st_mode):
        return {"exists": True, "char": False, "major": None, "minor": None}
    return {"exists": True, "char": True, "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev)}


def open_error(path):
    """errno name of opening a device node read-write as CUDA does, or None when the open gets past the devices cgroup
    and the node's mode: ENXIO (a node whose major has no driver behind it) also got past them."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            return None
        return errno.errorcode.get(exc.errno, str(exc.errno))
    os.close(fd)
    return None


def uvm_open_findings(node, dev_path, opener=open_error):
    """``uvm_node`` error inside a container when the node is there with the right major but may not be opened: EPERM
    is the devices cgroup (a privileged container's allow line names an old major), EACCES the node's owner and mode."""
    if not node["exists"] or not node["char"]:
        return []
    error = opener(dev_path)
    if error not in ("EPERM", "EACCES"):
        return []
    why = ("the devices cgroup denies major %d: the container's allow line names another major (after a driver or kernel "
           "update on the node)" % node["major"]) if error == "EPERM" else "its owner and mode do not let this user open it"
    return [Finding("uvm_node", "error", dev_path, "%s cannot be opened here (%s): %s" % (dev_path, error, why),
                    ["open(%s, O_RDWR): %s" % (dev_path, error)],
                    "CUDA fails to initialise (CUDA error 999) and the server does not start",
                    "run deploy.yml (pve_container writes the node's current major and restarts the container), or pass the "
                    "node with 'devN: %s' on PVE 8.1+" % dev_path if error == "EPERM" else
                    "give the node NVIDIA's mode 0666 (pve_container_gpu_dev_mode) or the service user's group")]


def uvm_node_findings(proc_devices_text, node, dev_path, scope):
    """``uvm_node`` errors: the module not loaded, the node missing, not a character device, or with another major
    than ``/proc/devices`` (a stale node from before a driver reload)."""
    majors = parse_proc_devices(proc_devices_text)
    major = majors.get("nvidia-uvm")
    subject = dev_path
    where = "on the node" if scope == "node" else "in the container (the node must create it and pass it in)"
    fix_create = "on the node: nvidia-modprobe -u -c=0 (and keep it at boot: a udev rule or modules-load for nvidia-uvm)"
    if proc_devices_text is None:
        return major, [Finding("uvm_node", "warning", subject, "/proc/devices cannot be read", [],
                               "the nvidia-uvm major cannot be checked", "run the preflight as root")]
    if major is None:
        return None, [Finding("uvm_node", "error", subject, "the nvidia-uvm kernel module is not loaded (/proc/devices has no nvidia-uvm)",
                              ["Character devices: %s" % ", ".join("%s %s" % (m, n) for n, m in majors.items() if "nvidia" in n)],
                              "CUDA cannot initialise (cudaErrorUnknown / CUDA error 999) in any container",
                              "on the node: modprobe nvidia-uvm && nvidia-modprobe -u -c=0")]
    evidence = ["/proc/devices: %d nvidia-uvm" % major]
    if not node["exists"]:
        return major, [Finding("uvm_node", "error", subject, "%s does not exist %s" % (dev_path, where), evidence,
                               "CUDA fails to initialise (CUDA error 999) and the server does not start", fix_create)]
    if not node["char"]:
        return major, [Finding("uvm_node", "error", subject, "%s is not a character device" % dev_path, evidence,
                               "CUDA cannot open it and fails to initialise",
                               "remove it and recreate it: rm %s && nvidia-modprobe -u -c=0" % dev_path)]
    if node["major"] != major:
        evidence.append("%s: character device %d:%d" % (dev_path, node["major"], node["minor"]))
        return major, [Finding("uvm_node", "error", subject,
                               "%s has major %d, the loaded module uses %d" % (dev_path, node["major"], major), evidence,
                               "opening it reaches no driver: CUDA fails to initialise",
                               "recreate the node: rm %s && nvidia-modprobe -u -c=0 (node); restart the container" % dev_path)]
    return major, []


def config_findings(path, text, major, uvm_path="/dev/nvidia-uvm"):
    """``uvm_major_mismatch`` when a container config neither passes the uvm node by path (PVE's ``devN:``, which
    follows the node's current major) nor allows its current major. A warning, not an error: the node is checked before
    the containers, and pve_container's next step is what rewrites the allow line - an error here would stop the run
    before its own fix. The container's preflight names the container that still cannot open the node (an error)."""
    if text is None:
        return [Finding("container_config_unreadable", "warning", path, "the container config cannot be read", [],
                        "whether the container may open the nvidia-uvm node is unknown", "check the path; run as root")]
    if major is None:
        return []
    config = parse_container_config(text)
    if uvm_access(config, major, uvm_path):
        return []
    allow_lines = [line for _rule, line in config["allow"]]
    evidence = allow_lines + [line for line in config["mounts"] if "nvidia-uvm" in line]
    if allow_lines:
        what = "the config allows no character devices of major %d, the current nvidia-uvm major" % major
    else:
        what = "the config passes no %s (no devN entry, no device allow rule)" % uvm_path
    return [Finding("uvm_major_mismatch", "warning", path, what, evidence or ["(no device lines)"],
                    "until it is corrected and the container restarted, the container cannot open %s: CUDA fails to "
                    "initialise (CUDA error 999) and the server does not start" % uvm_path,
                    "deploy.yml corrects it (pve_container writes the current major and restarts the container); by hand: "
                    "'lxc.cgroup2.devices.allow: c %d:* rwm', or pass the node by path with 'devN: %s' (PVE 8.1+: "
                    "follows the major), then restart the container" % (major, uvm_path))]


# --------------------------------------------------------------------------- the node's boot check

BOOT_CHECK_FIX = ("deploy.yml installs and enables it (pve_gpu_host); by hand: systemctl enable --now "
                  "llmops-gpu-boot-check.service, and journalctl -b -u llmops-gpu-boot-check for why it did not run")


def boot_check_findings(report_path, report_text, boot_id):
    """``boot_check`` warnings from the report of pve_gpu_host's boot check (gpu_boot_check.py, before pve-guests):
    none for this boot (the unit did not run, or failed before writing), or problems it recorded and could not repair
    (each one's own text says what and the fix). Nothing when the report is this boot's and clean."""
    if report_text is None:
        return [Finding("boot_check", "warning", report_path, "no boot check report for this boot", [],
                        "nothing checked the uvm nodes and the GPU containers' device rules before the guests started",
                        BOOT_CHECK_FIX)]
    try:
        report = json.loads(report_text)
    except ValueError:
        report = None
    if not isinstance(report, dict):
        return [Finding("boot_check", "warning", report_path, "the boot check report is not a JSON object",
                        [report_text[:200]], "what the boot check found at boot is unknown", BOOT_CHECK_FIX)]
    evidence = ["boot_id %s, checked at %s" % (report.get("boot_id"), report.get("checked_at"))]
    if boot_id and report.get("boot_id") != boot_id:
        return [Finding("boot_check", "warning", report_path, "the boot check report is from another boot (this boot: %s)" % boot_id,
                        evidence, "nothing checked the uvm nodes and the GPU containers' device rules before the guests "
                        "started in this boot", BOOT_CHECK_FIX)]
    problems = [str(problem) for problem in report.get("problems") or [] if problem]
    if not problems:
        return []
    return [Finding("boot_check", "warning", report_path, "at boot: %s" % "; ".join(problems), evidence + problems,
                    "the guests started with these problems",
                    "as each problem says, then run the check again: systemctl restart llmops-gpu-boot-check")]


# --------------------------------------------------------------------------- processes holding GPU memory

def parse_compute_apps(text):
    """Rows of ``--query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv,noheader,nounits``."""
    apps = []
    for line in text.splitlines():
        values = [value.strip() for value in line.split(",", 3)]
        if len(values) < 4 or not values[0].isdigit():
            continue
        apps.append({"pid": int(values[0]), "gpu_uuid": values[1], "used_mib": _int(values[2]),
                     "name": visible(values[3], 200), "line": line})
    return apps


def unit_of(cgroup_path):
    """The ``.service`` unit a cgroup path belongs to (the innermost), else None: ``/user.slice/.../session-3.scope``
    is a login session, ``/lxc/105/ns/system.slice/sglang.service`` the container's unit."""
    units = [part for part in (cgroup_path or "").split("/") if part.endswith(".service")]
    return units[-1] if units else None


def is_same_process(pid, name, proc_root):
    """Whether PID here is the process nvidia-smi named: NVML numbers processes in the node's PID namespace, so inside a
    container the same number can be another process (or none). The name is its executable as nvidia-smi prints it
    (a path or a name, cut), compared with argv[0] and the kernel's 15-character comm."""
    wanted = os.path.basename((name or "").strip())
    if not wanted or wanted.startswith("["):
        return True  # "[Not Found]" or no name: nothing to compare, the cgroup decides
    argv = procfs.read_cmdline(pid, proc_root)
    proc_stat = procfs.read_stat(pid, proc_root)
    if argv is None and proc_stat is None:
        return False
    seen = set()
    if argv:
        seen.add(os.path.basename(argv[0]))
    if proc_stat:
        seen.add(proc_stat["comm"])
    return any(wanted == item or (len(item) >= 15 and wanted.startswith(item)) or item.startswith(wanted) for item in seen if item)


def process_cgroup(pid, proc_root):
    entries = procfs.read_cgroup(pid, proc_root)
    if not entries:
        return None
    for entry in entries:
        if entry["hierarchy"] == 0 and not entry["controllers"]:
            return entry["path"]
    for entry in entries:
        if "name=systemd" in entry["controllers"]:
            return entry["path"]
    return entries[0]["path"]


def process_findings(apps, gpus, deployment_indexes, proc_root):
    """``gpu_memory_without_unit`` for each process holding GPU memory whose cgroup is in no ``.service`` unit: an
    error on a GPU of this deployment, a warning on another; ``gpu_process_unattributed`` (info) for a PID not
    visible here (another PID namespace)."""
    by_uuid = {(gpu["uuid"] or "").lower(): gpu for gpu in gpus}
    findings = []
    for app in apps:
        gpu = by_uuid.get(app["gpu_uuid"].lower())
        subject = gpu_subject(gpu["index"], gpu["bus_id"]) if gpu else "GPU %s" % app["gpu_uuid"]
        mib = "%s MiB" % app["used_mib"] if app["used_mib"] is not None else "an unknown amount of memory"
        cgroup = process_cgroup(app["pid"], proc_root) if is_same_process(app["pid"], app["name"], proc_root) else None
        if cgroup is None:
            findings.append(Finding(
                "gpu_process_unattributed", "info", subject,
                "PID %d (%s) holds %s, but is not visible here" % (app["pid"], app["name"], mib), [app["line"]],
                "the process runs in another PID namespace (a container, or the node); it was not checked",
                "run the preflight where the process runs (on the node for every container's processes)"))
            continue
        if unit_of(cgroup):
            continue
        ours = deployment_indexes is None or (gpu is not None and gpu["index"] in deployment_indexes)
        findings.append(Finding(
            "gpu_memory_without_unit", "error" if ours else "warning", subject,
            "PID %d (%s) holds %s and belongs to no service unit (cgroup %s)" % (app["pid"], app["name"], mib, cgroup),
            [app["line"], "cgroup: %s" % cgroup],
            ("the server on this GPU starts with %s less (out of memory at start or a smaller KV cache), and a second "
             "server may answer on the same port" % mib) if ours else
            "the GPU is not one of this deployment's; the memory is taken from whatever runs there",
            "check what it is (ps -o pid,user,lstart,args -p %d); stop it with systemctl stop <its unit> or kill %d, "
            "and run servers only as units" % (app["pid"], app["pid"])))
    return findings
