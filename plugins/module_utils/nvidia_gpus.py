# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which GPU is which: NVIDIA's identities of a GPU and the assignment of a node's GPUs to containers.

A GPU has three numbers that are easy to confuse. nvidia-smi's ``index`` is the GPU's place in PCI bus order on the
node (and renumbered from 0 inside a container, which sees only the GPUs passed to it); its device node is
``/dev/nvidia<minor>``, where the minor is the order the driver probed the boards in and need not follow the index (a
public report: index 3 is minor 0 on a four-GPU host); its UUID never changes. Inventories name GPUs by node index or
UUID, device nodes are passed by minor, and the kernel module lists every GPU of the node (with its minor and UUID) in
``/proc/driver/nvidia/gpus/<bus>/information``, which containers see too.

Pure functions of text and data, except read_driver_gpus and device_node_state, which read the driver's files and
stat a node (no program is run).
"""

from __future__ import annotations

import os
import re
import stat

# /proc/driver/nvidia/gpus/<bus>/information: "Key: \t value" lines (tabs and spaces vary between drivers).
_INFORMATION_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
_BUS_ID = re.compile(r"^(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.(?P<function>[0-7])$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
# What nvidia_driver_facts asks nvidia-smi for, name last: a GPU's name is the only field that could hold a comma. No
# minor: nvidia-smi has no query field for it (580.159.04 answers `Field "minor_number" is not a valid field to query.`
# and exit 2, captured on an H200); the kernel module's information file names it (with_minors).
GPU_QUERY_FIELDS = ("index", "uuid", "pci.bus_id", "memory.total", "name")
ALL = "all"
# The GPU nodes' major (nvidia0..N, nvidiactl, nvidia-modeset); nvidia-uvm's and nvidia-caps' are dynamic.
NVIDIA_MAJOR = 195
# Minors from here up are the driver's own nodes (nvidia-modeset 254, nvidiactl 255), not GPUs.
FIRST_CONTROL_MINOR = 254


class GpuError(ValueError):
    """Text that is not what NVIDIA's tools print, or an assignment that cannot be made; the message says which."""


def normalise_bus_id(text):
    """``00000000:18:00.0`` (nvidia-smi) and ``0000:18:00.0`` (procfs, sysfs) as one form: ``0000:18:00.0``."""
    match = _BUS_ID.match(text.strip())
    if not match:
        raise GpuError("%r is not a PCI bus ID" % (text,))
    return "%04x:%s:%s.%s" % (int(match.group("domain"), 16), match.group("bus").lower(), match.group("device").lower(),
                              match.group("function"))


def _bus_key(bus_id):
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return (int(domain, 16), int(bus, 16), int(device, 16), int(function))


def parse_information(text):
    """One GPU from the kernel module's ``information`` file: ``bus_id``, ``uuid``, ``name`` and ``minor``.

    GpuError when the file does not name the three identities (an old driver's file has no UUID line)."""
    fields = {}
    for line in text.splitlines():
        match = _INFORMATION_LINE.match(line)
        if match:
            fields[match.group("key").strip()] = match.group("value")
    missing = [key for key in ("Bus Location", "GPU UUID", "Device Minor") if not fields.get(key)]
    if missing:
        raise GpuError("the GPU information file has no %s line" % " or ".join(repr(key + ":") for key in missing))
    if not fields["Device Minor"].isdigit():
        raise GpuError("Device Minor is %r, not a number" % fields["Device Minor"])
    if not _UUID.match(fields["GPU UUID"]):
        raise GpuError("GPU UUID is %r, not a GPU UUID" % fields["GPU UUID"])
    return {"bus_id": normalise_bus_id(fields["Bus Location"]), "uuid": fields["GPU UUID"],
            "name": fields.get("Model") or None, "minor": int(fields["Device Minor"])}


def index_driver_gpus(gpus):
    """The kernel module's GPUs in PCI bus order with ``index`` set to that order: nvidia-smi's index on the node."""
    ordered = sorted(gpus, key=lambda gpu: _bus_key(gpu["bus_id"]))
    return [dict(gpu, index=index) for index, gpu in enumerate(ordered)]


def parse_gpu_query(text):
    """``nvidia-smi --query-gpu=index,uuid,pci.bus_id,memory.total,name --format=csv,noheader,nounits``.

    One dict per GPU: ``index``, ``uuid``, ``bus_id``, ``minor`` (None: nvidia-smi cannot be asked for it, see
    with_minors), ``memory_total_mib`` (None where the driver prints ``[N/A]``) and ``name``. GpuError on a line that is
    not such a row."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",", len(GPU_QUERY_FIELDS) - 1)]
        if len(parts) != len(GPU_QUERY_FIELDS) or not parts[0].isdigit() or not _UUID.match(parts[1]):
            raise GpuError("nvidia-smi printed %r where a row of %s was expected" % (line.strip()[:200], ",".join(GPU_QUERY_FIELDS)))
        gpus.append({"index": int(parts[0]), "uuid": parts[1], "bus_id": normalise_bus_id(parts[2]), "minor": None,
                     "memory_total_mib": int(parts[3]) if parts[3].isdigit() else None, "name": parts[4]})
    return gpus


def with_minors(gpus, driver_gpus):
    """nvidia-smi's GPUs with each one's device minor from the kernel module's list (read_driver_gpus), matched by UUID;
    None for a GPU the module does not list (then its node cannot be named)."""
    minors = dict((gpu["uuid"].lower(), gpu["minor"]) for gpu in driver_gpus or [])
    return [dict(gpu, minor=minors.get(gpu["uuid"].lower())) for gpu in gpus]


def describe(gpu):
    """``GPU 1 (GPU-5e1d0001-...)``: how messages name a GPU of a node."""
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("uuid"))


def resolve(node_gpus, request, where="the node"):
    """The GPUs of a node that ``request`` names: ``all`` (or None) or a list of node indices and UUIDs.

    Returns them in index order; GpuError naming the request and what the node has when one is unknown, repeated or the
    list is empty."""
    gpus = sorted(node_gpus, key=lambda gpu: gpu["index"])
    if request is None or request == ALL:
        return gpus
    if isinstance(request, (str, int)):
        request = [request]
    if not isinstance(request, (list, tuple)) or not request:
        raise GpuError("the GPU assignment must be 'all' or a non-empty list of GPU indices and UUIDs, not %r" % (request,))
    have = ", ".join("%d=%s" % (gpu["index"], gpu["uuid"]) for gpu in gpus) or "no GPU"
    chosen = []
    for item in request:
        text = str(item).strip()
        if text.isdigit():
            found = [gpu for gpu in gpus if gpu["index"] == int(text)]
        elif text.startswith("GPU-"):
            found = [gpu for gpu in gpus if gpu["uuid"].lower() == text.lower()]
        else:
            raise GpuError("%r is neither a GPU index nor a GPU UUID (GPU-...)" % (item,))
        if not found:
            raise GpuError("%s has no GPU %s (it has %s)" % (where, text, have))
        if found[0] in chosen:
            raise GpuError("GPU %s is listed twice" % text)
        chosen.append(found[0])
    return sorted(chosen, key=lambda gpu: gpu["index"])


def is_gpu_node(device):
    """Whether a discovered device node (``{path, type, major, minor}``) is a GPU's (/dev/nvidia<minor>), not one of the
    driver's own (nvidiactl, nvidia-modeset) or another module's (nvidia-uvm, nvidia-caps)."""
    return device.get("type") == "c" and device.get("major") == NVIDIA_MAJOR and int(device.get("minor", -1)) < FIRST_CONTROL_MINOR


def select_devices(devices, node_gpus, request, where="the node"):
    """What a container gets of its node: ``{"gpus": the GPUs ``request`` names, "devices": the node's other nodes and
    those GPUs' nodes (by minor), in discovery order, "gpu_devices": the GPU nodes among them}``. Without the node's GPU
    list only ``all`` can be resolved: every node. GpuError as resolve()."""
    if not node_gpus:
        if request not in (None, ALL):
            raise GpuError("%s's GPU list is unknown, so only 'all' can be given, not %r" % (where, request))
        chosen, minors = [], None
    else:
        chosen = resolve(node_gpus, request, where)
        minors = set(gpu["minor"] for gpu in chosen)
    passed = [device for device in devices if minors is None or not is_gpu_node(device) or device["minor"] in minors]
    return {"gpus": chosen, "devices": passed, "gpu_devices": [device for device in passed if is_gpu_node(device)]}


def plan(servers, nodes):
    """The GPU assignment of every server container, and what is wrong with it.

    ``servers``: {host: {"node": node name or None, "gpus": request (see resolve), "shared": bool}};
    ``nodes``: {node: list of GPUs (index, uuid, minor, ...)}. Returns {"assignments": {host: [GPU, ...]},
    "errors": [message, ...], "co_tenants": {host: [other hosts on one of its GPUs]}}. A GPU given to two containers
    is an error unless both allow sharing; a container with no GPU is an error; a node whose GPUs are unknown is an
    error for every container on it."""
    assignments, errors, holders = {}, [], {}
    for host in sorted(servers):
        settings = servers[host] or {}
        node = settings.get("node")
        if node is None:
            continue
        if node not in nodes or nodes[node] is None:
            errors.append("%s: the GPUs of its node %s are unknown (nvidia-smi did not list them there)" % (host, node))
            continue
        try:
            gpus = resolve(nodes[node], settings.get("gpus"), where=node)
        except GpuError as error:
            errors.append("%s: %s" % (host, error))
            continue
        if not gpus:
            errors.append("%s: its node %s has no GPU (nvidia-smi lists none there), and a server container needs at least "
                          "one" % (host, node))
            continue
        assignments[host] = gpus
        for gpu in gpus:
            holders.setdefault((node, gpu["uuid"]), []).append(host)
    co_tenants = dict((host, []) for host in assignments)
    for (node, uuid), hosts in sorted(holders.items()):
        if len(hosts) < 2:
            continue
        gpu = next(gpu for gpu in nodes[node] if gpu["uuid"] == uuid)
        unshared = [host for host in hosts if not (servers[host] or {}).get("shared")]
        if unshared:
            errors.append("%s of %s is assigned to %s: a GPU serves one server unless every container that gets it sets "
                          "pve_container_gpus_shared (not set on %s); give each container its own GPUs with "
                          "pve_container_gpus" % (describe(gpu), node, " and ".join(hosts), ", ".join(unshared)))
        for host in hosts:
            co_tenants[host].extend(other for other in hosts if other != host and other not in co_tenants[host])
    return {"assignments": assignments, "errors": errors, "co_tenants": co_tenants}


def visibility_problems(expected, visible, driver_gpus):
    """One sentence per GPU of ``expected`` (UUIDs) that nvidia-smi does not list here (``visible``: its GPUs), with why as
    far as the container can tell (its node is not here, or is here but cannot be opened), and per visible GPU that is
    not expected. ``driver_gpus``: the kernel module's list (with ``device_node``, as nvidia_driver_facts returns it)."""
    listed = [gpu["uuid"] for gpu in visible]
    problems = []
    for uuid in expected:
        if uuid in listed:
            continue
        gpu = next((gpu for gpu in driver_gpus if gpu["uuid"] == uuid), None)
        if gpu is None:
            problems.append("%s is not a GPU of this host (the NVIDIA kernel module does not list it)" % uuid)
            continue
        state = gpu.get("device_node")
        problems.append("%s (the host's GPU %s, /dev/nvidia%s) is not usable here: %s" % (
            uuid, gpu["index"], gpu["minor"],
            "its device node is not in the container" if state == "missing" else
            "its device node is here but cannot be opened (the devices cgroup, or the node's owner and mode)"
            if state == "present" else "something else is at its device node's path"))
    for gpu in visible:
        if gpu["uuid"] not in expected:
            problems.append("%s (GPU %s here) is visible but not assigned to this container" % (gpu["uuid"], gpu["index"]))
    return problems


def held(minors, driver_gpus):
    """The GPUs behind the device minors a process holds open, in index order (minors the module does not list are left
    out)."""
    wanted = set(minors)
    return sorted((gpu for gpu in driver_gpus if gpu["minor"] in wanted), key=lambda gpu: gpu["index"])


# A host has a few GPUs; a directory with more entries than this, or a larger file, is not the driver's.
MAX_DRIVER_GPUS = 64
MAX_INFORMATION_BYTES = 8192


def read_driver_gpus(proc_driver_dir):
    """The GPUs the kernel module lists under ``<proc_driver_dir>/gpus/<bus>/information``, indexed in PCI order
    ([] without the directory). GpuError for what is not the driver's: too many entries, a file that is not regular
    or too large, an information file without the identities."""
    directory = os.path.join(proc_driver_dir, "gpus")
    try:
        entries = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    if len(entries) > MAX_DRIVER_GPUS:
        raise GpuError("%s lists %d entries: not the driver's GPU directory" % (directory, len(entries)))
    gpus = []
    for entry in entries:
        path = os.path.join(directory, entry, "information")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise GpuError("cannot read %s: %s" % (path, exc.strerror)) from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise GpuError("%s is not a regular file" % path)
            data = handle.read(MAX_INFORMATION_BYTES + 1)
        if len(data) > MAX_INFORMATION_BYTES:
            raise GpuError("%s is larger than %d bytes: not the driver's information file" % (path, MAX_INFORMATION_BYTES))
        try:
            gpus.append(parse_information(data.decode("utf-8", errors="replace")))
        except GpuError as exc:
            raise GpuError("%s: %s" % (path, exc)) from None
    return index_driver_gpus(gpus)


def device_node_state(path, minor):
    """``present`` when ``path`` is NVIDIA's character device (195) with ``minor``, ``missing``, or ``other``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == NVIDIA_MAJOR and os.minor(info.st_rdev) == minor:
        return "present"
    return "other"
