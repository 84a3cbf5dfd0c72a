# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a simulated container exists: only on paper (--no-lxc) or as a real LXC container.

Both runtimes do the checks PVE does when it extracts a template and starts a container (template
readable, device nodes present), so a broken container fails its task the same way in both.

An unprivileged container (``unprivileged: 1`` or a raw ``lxc.idmap`` line) runs as PVE runs it: in a user namespace
with the id map (container uid 0 = host uid 100000), its rootfs owned by the mapped ids (idmap.py), and the devices
cgroup turned into a deny list that allows everything. ``dev[n]`` nodes are passed in both kinds of container as PVE's
prestart and autodev hooks pass them: a copy of the host node made with the entry's mode, uid and gid, bind-mounted.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import time

from pve_sim import gpu_kit, guest, idmap, mounts, network, releases, schema
from pve_sim.tasks import TaskFailed

_MAGIC = {b"\x28\xb5\x2f\xfd": "zstd", b"\x1f\x8b": "gzip", b"\xfd7zXZ": "xz"}


def template_compression(path):
    """The compression of a vztmpl archive by its magic bytes, or TaskFailed like tar would fail."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    raise TaskFailed("command 'tar xpf - --totals --one-file-system -p --sparse --numeric-owner --acls --xattrs "
                     "--xattrs-include=user.* --xattrs-include=security.capability --warning=no-file-ignored --warning=no-xattr-write "
                     "-C /var/lib/lxc/rootfs --skip-old-files --anchored --exclude ./dev/*' failed: exit code 2")


def device_rdev(path):
    """PVE::LXC::Tools::get_device_mode_and_rdev: (type char, major, minor) or the message PVE dies with."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise TaskFailed("Device %s does not exist" % path) from None
    except OSError:
        raise TaskFailed("Error accessing device %s" % path) from None
    if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
        raise TaskFailed("%s is not a device" % path)
    return ("b" if stat.S_ISBLK(info.st_mode) else "c"), os.major(info.st_rdev), os.minor(info.st_rdev)


def host_cgroup_version():
    return 2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1


class NullRuntime:
    """--no-lxc: containers are configs and a rootfs directory; 'running' is a flag with a start time."""

    name = "none"

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.started = {}

    def extract(self, vmid, template, rootfs, task, id_map=()):
        """Unpack ``template`` into ``rootfs`` (here: only check it) owned by the ids of ``id_map`` (none: privileged)."""
        compression = template_compression(template)
        os.makedirs(rootfs, exist_ok=True)
        if os.geteuid() == 0:
            idmap.shift_rootfs(rootfs, id_map)
        task.log("extracting archive '%s'" % template)
        task.log("Total bytes read: %d (%s compressed archive, not unpacked: --no-lxc)" % (os.path.getsize(template), compression))
        task.log("Detected container architecture: amd64")

    def prepare(self, vmid, config, rootfs, task):
        """Checks of PVE's update_lxc_config and prestart hook at start (networks are not checked: --no-lxc has none)."""
        for device in config.devices():
            device_rdev(device.path)
        if not os.path.isdir(rootfs):
            raise TaskFailed("mount point 'rootfs' does not exist: %s" % rootfs)
        mounts.render_mount_lines(config)

    def start(self, vmid, config, rootfs, task):
        self.prepare(vmid, config, rootfs, task)
        self.started[int(vmid)] = time.time()

    def stop(self, vmid, task, timeout=None):
        self.started.pop(int(vmid), None)

    def is_running(self, vmid):
        return int(vmid) in self.started

    def uptime(self, vmid):
        started = self.started.get(int(vmid))
        return int(time.time() - started) if started else 0

    def destroy(self, vmid, rootfs, task):
        shutil.rmtree(rootfs, ignore_errors=True)

    def exec_argv(self, vmid, argv):
        raise RuntimeError("no container runtime (--no-lxc): cannot exec in CT %s" % vmid)


class LxcRuntime(NullRuntime):
    """Real LXC containers (lxc-start/lxc-stop/lxc-attach) under STATE/lxc, configs translated from PVE's."""

    name = "lxc"

    def __init__(self, state_dir, gpu_kit_root=None, node_cgroup_version=2):
        super().__init__(state_dir)
        # The simulated node's cgroup version (releases.node_cgroup_version), which decides the raw settings LXC on
        # the node applies; self.cgroup_version is this host's, which the generated lines must use to work here.
        self.node_cgroup_version = node_cgroup_version
        # The node's GPU kit: its driver state is in every container, as a real node's /proc is.
        self.gpu_kit_root = gpu_kit_root
        self.lxcpath = os.path.join(state_dir, "lxc")
        os.makedirs(self.lxcpath, exist_ok=True)
        # Container names are global in the cgroup tree: make them unique per state dir.
        self.prefix = "pvesim%s-" % hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:6]
        self.cgroup_version = host_cgroup_version()

    def container_name(self, vmid):
        return "%s%d" % (self.prefix, int(vmid))

    def _lxc(self, command, vmid, *args, timeout=120):
        argv = [command, "-P", self.lxcpath, "-n", self.container_name(vmid)] + list(args)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def extract(self, vmid, template, rootfs, task, id_map=()):
        compression = template_compression(template)
        os.makedirs(rootfs, exist_ok=True)
        task.log("extracting archive '%s'" % template)
        flag = {"zstd": "--zstd", "gzip": "-z", "xz": "-J"}[compression]
        result = subprocess.run(["tar", "xpf", template, flag, "--totals", "--numeric-owner", "-C", rootfs, "--exclude", "./dev/*"],
                                capture_output=True, text=True, timeout=600, check=False)
        for line in (result.stdout + result.stderr).splitlines():
            task.log(line)
        if result.returncode != 0:
            raise TaskFailed("command 'tar xpf %s' failed: exit code %d" % (template, result.returncode))
        if id_map:
            # PVE's tar runs in the container's user namespace (restore_tar_archive_command): the same owners, afterwards.
            started = time.monotonic()
            count = idmap.shift_rootfs(rootfs, id_map)
            task.log("shifted the owners of %d files into the id map (%s) in %.1f s"
                     % (count, ", ".join("%s %d %d %d" % entry for entry in id_map), time.monotonic() - started))
        task.log("Detected container architecture: amd64")

    def setup_guest(self, vmid, config, rootfs):
        """What PVE::LXC::Setup does at start that matters here: hostname and /etc/hosts, the container root's files,
        never written through a symlink."""
        hostname = config.get("hostname") or "CT%d" % int(vmid)
        _id_map, root_uid, root_gid = idmap.config_id_maps(config)
        if os.path.isdir(guest.guest_path(rootfs, "/etc")):
            guest.write_guest_file(rootfs, "/etc/hostname", hostname + "\n", 0o644, (root_uid, root_gid))
            guest.write_guest_file(rootfs, "/etc/hosts", "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n"
                                   % hostname, 0o644, (root_uid, root_gid))

    def upgrade_rootfs(self, vmid, config, rootfs, task):
        """An unprivileged container made by a pve-sim that still ran every container privileged has a rootfs owned
        by host root, which its root (host uid 100000) could not use: shift it into the map now, once (a node never
        has such a rootfs; this keeps older state dirs working). An interrupted shift is taken up again at the next
        start: the rootfs directory itself changes owner last."""
        id_map, root_uid, root_gid = idmap.config_id_maps(config)
        if not id_map or (root_uid, root_gid) == (0, 0):
            return
        info = os.lstat(rootfs)
        if (info.st_uid, info.st_gid) != (0, 0):
            return
        task.log("the rootfs of CT %d belongs to host root (made by an older pve-sim): shifting it into the id map" % int(vmid))
        count = idmap.shift_rootfs(rootfs, id_map, resume=True)
        task.log("shifted the owners of %d files" % count)

    def passthrough_dir(self, vmid):
        """Where the copies of the dev[n] nodes are made (PVE: /var/lib/lxc/<vmid>/passthrough)."""
        return os.path.join(self.lxcpath, self.container_name(vmid), "passthrough")

    def make_passthrough_nodes(self, vmid, config):
        """PVE's prestart hook: a fresh passthrough directory (PVE mounts a new tmpfs there at each start) with a copy
        of each dev[n] node; returns their paths."""
        base = self.passthrough_dir(vmid)
        shutil.rmtree(base, ignore_errors=True)
        id_map = idmap.config_id_maps(config)[0]
        return [create_passthrough_node(base, device, id_map) for device in config.devices()]

    def check_reachable(self, vmid, config, rootfs, copies):
        """An unprivileged container's root must be able to reach what LXC mounts for it (see idmap.unreachable):
        the rootfs, the device copies and the bind mount points' host directories. On a node these live in
        /var/lib and PVE mounts the mount points as host root, so PVE has no such message."""
        if not idmap.is_unprivileged(config):
            return
        _id_map, root_uid, root_gid = idmap.config_id_maps(config)
        paths = [rootfs] + list(copies)
        paths += [mounts.parse(key, config.get(key))["volume"] for key in mounts.mount_point_keys(config.keys())]
        blocked = idmap.unreachable(paths, root_uid, root_gid)
        for path in paths:
            if path in blocked:
                raise TaskFailed("unprivileged CT %d: its root (host uid %d) cannot reach %s: %s is not searchable for it (LXC "
                                 "mounts it from inside the container's user namespace); give that directory o+x or use another "
                                 "place" % (int(vmid), root_uid, path, blocked[path]))

    def lxc_config(self, vmid, config, rootfs):
        """The LXC config a PVE node would generate (update_lxc_config), for this host's cgroup version."""
        return render_lxc_config(vmid, config, rootfs, self.cgroup_version, cpu_load=self.cpu_load(vmid),
                                 passthrough_dir=self.passthrough_dir(vmid), driver_mounts=gpu_kit.driver_mounts(self.gpu_kit_root),
                                 node_cgroup_version=self.node_cgroup_version)

    def cpu_load(self, vmid):
        """How many of the other running containers of this node use each CPU (from their configs' cpuset)."""
        load = [0] * (os.cpu_count() or 1)
        for name in sorted(os.listdir(self.lxcpath)):
            other = name[len(self.prefix):]
            if not name.startswith(self.prefix) or not other.isdigit() or int(other) == int(vmid) or not self.is_running(other):
                continue
            try:
                with open(os.path.join(self.lxcpath, name, "config"), encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for line in lines:
                key, _sep, value = line.partition("=")
                if key.strip().endswith("cpuset.cpus"):
                    for cpu in parse_cpuset(value):
                        if cpu < len(load):
                            load[cpu] += 1
        return load

    def prepare(self, vmid, config, rootfs, task):
        super().prepare(vmid, config, rootfs, task)
        network.render_net_lines(vmid, config)
        network.wait_veths_gone(vmid, config)
        for key in network.net_keys(config):
            bridge = schema.parse_net(config.get(key)).get("bridge")
            # ip_forward=1 written later (Docker does) resets every interface's forwarding: seal again.
            if bridge and network.created_here(self.state_dir, bridge):
                network.seal(bridge)

    def start(self, vmid, config, rootfs, task):
        self.prepare(vmid, config, rootfs, task)
        directory = os.path.join(self.lxcpath, self.container_name(vmid))
        os.makedirs(directory, exist_ok=True)
        text = self.lxc_config(vmid, config, rootfs)
        with open(os.path.join(directory, "config"), "w", encoding="utf-8") as handle:
            handle.write(text)
        self.upgrade_rootfs(vmid, config, rootfs, task)
        self.setup_guest(vmid, config, rootfs)
        copies = self.make_passthrough_nodes(vmid, config)
        self.check_reachable(vmid, config, rootfs, copies)
        log_file = os.path.join(directory, "start.log")
        if self.node_cgroup_version == 2 and ignored_on_node(config, 2):
            # What LXC on a pure cgroup v2 node logs at this start (lxc-start appends to the same file).
            with open(log_file, "a", encoding="utf-8") as handle:
                handle.write("lxc %d %s WARN     cgfsng - cgroups/cgfsng.c:cgfsng_setup_limits_legacy:2767 - %s\n"
                             % (int(vmid), time.strftime("%Y%m%d%H%M%S.000"), releases.LEGACY_LIMITS_IGNORED))
        result = self._lxc("lxc-start", vmid, "-d", "-l", "INFO", "-o", log_file)
        if result.returncode != 0 or not self._wait_state(vmid, "RUNNING", 30):
            tail = _tail_file(log_file, 12) + (result.stderr or "").splitlines()[-5:]
            for line in tail:
                task.log(line)
            raise TaskFailed("startup for container '%d' failed" % int(vmid))
        self.started[int(vmid)] = time.time()

    def _wait_state(self, vmid, state, timeout):
        result = self._lxc("lxc-wait", vmid, "-s", state, "-t", str(int(timeout)), timeout=timeout + 10)
        return result.returncode == 0

    def stop(self, vmid, task, timeout=None):
        if timeout is None:
            result = self._lxc("lxc-stop", vmid, "-k")
        else:
            result = self._lxc("lxc-stop", vmid, "-t", str(int(timeout)), timeout=int(timeout) + 30)
        if result.returncode != 0 and self.is_running(vmid):
            raise TaskFailed("command 'lxc-stop -n %d' failed: %s" % (int(vmid), (result.stderr or "").strip()))
        self.started.pop(int(vmid), None)

    def is_running(self, vmid):
        result = self._lxc("lxc-info", vmid, "-s", timeout=30)
        return result.returncode == 0 and "RUNNING" in result.stdout

    def uptime(self, vmid):
        started = self.started.get(int(vmid))
        return int(time.time() - started) if started else 0

    def destroy(self, vmid, rootfs, task):
        directory = os.path.join(self.lxcpath, self.container_name(vmid))
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(rootfs, ignore_errors=True)

    def exec_argv(self, vmid, argv):
        return ["lxc-attach", "-P", self.lxcpath, "-n", self.container_name(vmid), "--clear-env",
                "--set-var", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--"] + list(argv)


def _tail_file(path, count):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in handle.readlines()[-count:]]
    except OSError:
        return []


# cgroup v2 keys PVE configs use -> the v1 key and a value converter (this machine is cgroup v1).
_V2_TO_V1 = {
    "lxc.cgroup2.devices.allow": ("lxc.cgroup.devices.allow", None),
    "lxc.cgroup2.devices.deny": ("lxc.cgroup.devices.deny", None),
    "lxc.cgroup2.cpuset.cpus": ("lxc.cgroup.cpuset.cpus", None),
    "lxc.cgroup2.memory.max": ("lxc.cgroup.memory.limit_in_bytes", None),
}


def is_cgroup_setting(key):
    """2 for an ``lxc.cgroup2.*`` controller setting, 1 for an ``lxc.cgroup.*`` one, None for any other key (LXC's own
    ``lxc.cgroup.relative``/``lxc.cgroup.dir*`` keys are not settings)."""
    if key.startswith("lxc.cgroup2."):
        return 2
    if key.startswith("lxc.cgroup.") and key != "lxc.cgroup.relative" and not key.startswith("lxc.cgroup.dir"):
        return 1
    return None


def ignored_on_node(config, node_cgroup_version):
    """The raw cgroup settings of ``config`` that LXC on the node does not apply: v1 ones on a pure cgroup v2 node
    (all of them, releases.LEGACY_LIMITS_IGNORED), v2 ones on a hybrid node (its devices, memory and cpuset controllers
    are v1)."""
    return [entry for entry in config.lxc_entries() if is_cgroup_setting(entry.key) not in (None, node_cgroup_version)]


def translate_raw(key, value, cgroup_version):
    """A raw lxc line of the PVE config as this host needs it, or None to drop it (with the reason)."""
    if cgroup_version == 1 and key.startswith("lxc.cgroup2."):
        if key in _V2_TO_V1:
            return _V2_TO_V1[key][0], value
        return None
    if cgroup_version == 2 and is_cgroup_setting(key) == 1:
        v2 = dict((v1, v2key) for v2key, (v1, _conv) in _V2_TO_V1.items())
        return (v2[key], value) if key in v2 else None
    return key, value


def parse_cpuset(text):
    """CPU numbers of a cpuset list such as ``0-2,5``; an unreadable part is left out."""
    cpus = set()
    for part in (text or "").strip().split(","):
        first, _dash, last = part.strip().partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _cpuset(cores, cpu_load=None):
    """``cores`` CPUs, the least used by the other running containers first (ties: the lowest number).

    Real PVE starts a container on every CPU; within seconds pvestatd (rebalance_lxc_containers in pve-manager's
    PVE/Service/pvestatd.pm) narrows it to ``cores`` CPUs and moves it to CPUs that fewer containers use. This is that
    end state, at start: four one-core containers on two CPUs get CPU 0, 1, 0, 1, not all CPU 0.
    """
    total = os.cpu_count() or 1
    count = max(1, min(int(cores), total))
    load = list(cpu_load or []) + [0] * total
    chosen = sorted(sorted(range(total), key=lambda cpu: (load[cpu], cpu))[:count])
    ranges, start = [], None
    for index, cpu in enumerate(chosen):
        if start is None:
            start = cpu
        if index + 1 == len(chosen) or chosen[index + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else "%d-%d" % (start, cpu))
            start = None
    return ",".join(ranges)


def passthrough_copy(base, path):
    """Where the copy of device ``path`` is made below the passthrough directory ``base`` (PVE: $passthrough_dir . $path)."""
    return os.path.join(base, path.lstrip("/"))


def create_passthrough_node(base, device, id_map):
    """PVE::LXC::create_passthrough_device_node: mknod a node of the same type and major:minor as the host's, chmod to
    the entry's ``mode`` (default 0660), chown to its ``uid``/``gid`` (default 0) mapped through the id map."""
    if re.search(r"/\.\.?(?:/|$)", device.path) or not device.path.startswith("/dev/"):
        raise TaskFailed("%s: %s is not a valid device path" % (device.key, device.path))
    try:
        info = os.stat(device.path)
    except OSError:
        raise TaskFailed("Could not get mode or device ID of %s" % device.path) from None
    target = passthrough_copy(base, device.path)
    # The directories down to it: searchable by everyone, so that an unprivileged container's root reaches the copy.
    current = os.path.dirname(base)
    for part in os.path.relpath(os.path.dirname(target), current).split(os.sep):
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)
            os.chmod(current, 0o755)
    try:
        os.mknod(target, stat.S_IFMT(info.st_mode) | 0o600, info.st_rdev)
    except OSError as error:
        raise TaskFailed("failed to mknod %s: %s" % (target, error.strerror)) from None
    # chmod: umask could mess with the mode mknod got (as PVE says).
    os.chmod(target, int(device.mode, 8) if device.mode else 0o660)
    os.chown(target, idmap.map_to_host(device.uid or 0, id_map, "u"), idmap.map_to_host(device.gid or 0, id_map, "g"))
    return target


def render_lxc_config(vmid, config, rootfs, cgroup_version, bridge_mtu=network.read_bridge_mtu, is_directory=os.path.isdir,
                      cpu_load=None, passthrough_dir=None, driver_mounts=(), node_cgroup_version=2):
    """PVE's update_lxc_config, reduced to what this host can run: privileged or unprivileged (user namespace with
    PVE's id map, deny-list devices cgroup); netN on the node's bridges (or loopback only without netN); bind mount
    points; dev[n] as bind mounts of the copies below ``passthrough_dir`` (default PVE's /var/lib/lxc/<vmid>/passthrough).
    ``bridge_mtu``/``is_directory`` look at the host (tests pass their own).
    ``cpu_load``: how many other running containers use each CPU (index = CPU number), for the cpuset of ``cores``.
    ``driver_mounts``: (host dir, path inside, read-only) of the GPU kit's driver state, which every container of a node
    sees whatever its config says (gpu_kit.driver_mounts).
    ``cgroup_version`` is this host's (what the lines must say to work here), ``node_cgroup_version`` the simulated
    node's: raw settings of the other version are left out, as LXC on the node ignores them (ignored_on_node)."""
    prefix = "lxc.cgroup2." if cgroup_version == 2 else "lxc.cgroup."
    passthrough_dir = passthrough_dir or "/var/lib/lxc/%d/passthrough" % int(vmid)
    unprivileged = idmap.is_unprivileged(config)
    lines = [
        "# generated by pve-sim from the PVE config of CT %d; do not edit" % int(vmid),
        "lxc.include = /usr/share/lxc/config/common.conf",
    ]
    if unprivileged:
        # LXC's userns.conf, then what it includes on a node from userns.conf.d: PVE's 01-pve.conf (src/lxc-pve-userns.conf)
        # resets the devices cgroup and makes it a deny list that allows everything. What a container may open is then
        # decided by the nodes it has and their owners and modes.
        lines += [
            "lxc.include = /usr/share/lxc/config/userns.conf",
            "%sdevices.deny =" % prefix,
            "%sdevices.allow =" % prefix,
            "%sdevices.allow = a" % prefix,
        ]
    lines += [
        "lxc.arch = %s" % (config.get("arch") or "amd64"),
        "lxc.apparmor.profile = unconfined",
        "lxc.mount.auto = proc:mixed sys:mixed cgroup:mixed",
    ]
    if unprivileged:
        # update_lxc_config: userns.conf says sys:rw, which does not play well with systemd.
        lines.append("lxc.mount.auto = sys:mixed")
    lines += [
        "lxc.rootfs.path = dir:%s" % rootfs,
        "lxc.uts.name = %s" % (config.get("hostname") or "CT%d" % int(vmid)),
        "lxc.tty.max = %s" % (config.get("tty") or "2"),
        "lxc.environment = TERM=linux",
    ]
    # Without netN: loopback only. With them: veths on the node's bridges (which pve-sim keeps off the outside world).
    lines.extend(network.render_net_lines(vmid, config, bridge_mtu))
    memory = int(config.get("memory") or 512)
    if cgroup_version == 2:
        lines.append("lxc.cgroup2.memory.max = %d" % (memory * 1024 * 1024))
    else:
        lines.append("lxc.cgroup.memory.limit_in_bytes = %d" % (memory * 1024 * 1024))
    cpulimit = config.get("cpulimit")
    if cpulimit and float(cpulimit) > 0:
        if cgroup_version == 2:
            lines.append("lxc.cgroup2.cpu.max = %d 100000" % int(100000 * float(cpulimit)))
        else:
            lines.append("lxc.cgroup.cpu.cfs_period_us = 100000")
            lines.append("lxc.cgroup.cpu.cfs_quota_us = %d" % int(100000 * float(cpulimit)))
    had_cpuset = False
    lines.extend(mounts.render_mount_lines(config, is_directory))
    for source, target, read_only in driver_mounts:
        lines.append("lxc.mount.entry = %s %s none bind,create=dir%s 0 0"
                     % (mounts.fstab_escape(source), mounts.fstab_escape(target.lstrip("/")), ",ro" if read_only else ""))
    for device in config.devices():
        kind, major, minor = device_rdev(device.path)
        lines.append("%sdevices.allow = %s %d:%d %s" % (prefix, kind, major, minor, "r" if device.deny_write else "rw"))
        if device.deny_write:
            lines.append("%sdevices.deny = %s %d:%d w" % (prefix, kind, major, minor))
        # PVE's autodev hook bind-mounts the prestart hook's copy (create_passthrough_node) at the same path inside.
        copy = passthrough_copy(passthrough_dir, device.path)
        lines.append("lxc.mount.entry = %s %s none bind,create=file 0 0" % (mounts.fstab_escape(copy), mounts.fstab_escape(device.path.lstrip("/"))))
    if unprivileged and not idmap.has_custom_id_map(config):
        lines += ["lxc.idmap = %s %d %d %d" % entry for entry in idmap.DEFAULT_ID_MAP]
    if not schema.parse_boolean(config.get("console") or "1"):
        # has_dev_console: no /dev/console for the container.
        lines += ["lxc.console.path = none", "%sdevices.deny = c 5:1 rwm" % prefix]
    ignored = ignored_on_node(config, node_cgroup_version)
    for entry in config.lxc_entries():
        if entry in ignored:
            lines.append("# ignored (not applied on the node's cgroup v%d): %s = %s" % (node_cgroup_version, entry.key, entry.value))
            continue
        translated = translate_raw(entry.key, entry.value, cgroup_version)
        if translated is None:
            lines.append("# dropped (no equivalent on cgroup v%d): %s = %s" % (cgroup_version, entry.key, entry.value))
            continue
        key, value = translated
        had_cpuset = had_cpuset or key.endswith("cpuset.cpus")
        lines.append("%s = %s" % (key, value))
    cores = config.get("cores")
    if cores and not had_cpuset:
        lines.append("%scpuset.cpus = %s" % (prefix, _cpuset(cores, cpu_load)))
    return "\n".join(lines) + "\n"
