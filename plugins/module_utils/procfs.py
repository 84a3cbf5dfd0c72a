# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read process, socket and file-descriptor facts straight from /proc.

Parsers are pure functions of the text the kernel prints. Readers take ``proc_root`` (None means the
module-level ``PROC_ROOT``, looked up at call time so tests can point it at a fake tree) and treat a PID
that vanishes or cannot be read while they scan it as absent: a scan never fails because of one process.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat

from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import DEPLOYMENT_ID_VARIABLE

PROC_ROOT = "/proc"

# include/net/tcp_states.h: TCP_LISTEN = 10, printed as %02X.
TCP_STATE_LISTEN = "0A"

# Errors that mean "this process (or fd) went away, or is not ours to read": skip it.
GONE_ERRORS = (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError)

O_ACCMODE = 0o3
O_WRONLY = 0o1
O_RDWR = 0o2

DELETED_SUFFIX = " (deleted)"


def _root(proc_root):
    return PROC_ROOT if proc_root is None else proc_root


def _pid_path(proc_root, pid, *parts):
    """/proc/<pid>/<parts...> under the proc tree in use."""
    return os.path.join(_root(proc_root), str(pid), *[str(part) for part in parts])


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def _read_text(path):
    return _read_bytes(path).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- /proc/net/tcp{,6}

def decode_address(hex_address):
    """Decode the kernel's hex address ("0100007F" or 32 hex digits) into an ipaddress object.

    The kernel prints each 32-bit word of the address with %08X in host byte order, so on a little-endian
    machine every 4-byte group appears byte-reversed (tcp4_seq_show / tcp6_seq_show).
    """
    if len(hex_address) not in (8, 32):
        raise ValueError("not an IPv4 or IPv6 address from /proc/net/tcp: %r" % hex_address)
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[index:index + 4][::-1] for index in range(0, len(raw), 4))
    if len(words) == 4:
        return ipaddress.IPv4Address(words)
    return ipaddress.IPv6Address(words)


def parse_endpoint(text):
    """Parse "ADDR:PORT" as printed in /proc/net/tcp into (ipaddress, port)."""
    hex_address, separator, hex_port = text.partition(":")
    if not separator or len(hex_port) != 4:
        raise ValueError("not an address:port pair from /proc/net/tcp: %r" % text)
    return decode_address(hex_address), int(hex_port, 16)


def address_text(address):
    """Text of an address; v4-mapped IPv6 as ::ffff:a.b.c.d on every Python (3.11 would print ::ffff:7f00:1)."""
    if address.version == 6 and address.ipv4_mapped is not None:
        return "::ffff:%s" % address.ipv4_mapped
    return str(address)


def parse_proc_net_tcp(text):
    """Parse the whole text of /proc/net/tcp or /proc/net/tcp6 into a list of socket dicts.

    Each dict: ``address`` (text), ``port``, ``state`` (two hex digits), ``uid``, ``inode``, ``family``
    (``ipv4``/``ipv6``) and ``ipv4_mapped`` (the IPv4 address behind ::ffff:a.b.c.d, else None).
    The header line and malformed lines are skipped.
    """
    sockets = []
    for line in text.splitlines():
        fields = line.split()
        # sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        if len(fields) < 10 or not fields[0].endswith(":") or not fields[0][:-1].isdigit():
            continue
        try:
            address, port = parse_endpoint(fields[1])
            entry = {
                "address": address_text(address),
                "port": port,
                "state": fields[3].upper(),
                "uid": int(fields[7]),
                "inode": int(fields[9]),
                "family": "ipv4" if address.version == 4 else "ipv6",
                "ipv4_mapped": None,
            }
        except ValueError:
            continue
        if address.version == 6 and address.ipv4_mapped is not None:
            entry["ipv4_mapped"] = str(address.ipv4_mapped)
        sockets.append(entry)
    return sockets


def listening_sockets(proc_root=None, port=None):
    """LISTEN sockets of this network namespace from net/tcp and net/tcp6 (either may be absent)."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            text = _read_text(os.path.join(_root(proc_root), "net", name))
        except (FileNotFoundError, PermissionError):
            continue
        for entry in parse_proc_net_tcp(text):
            if entry["state"] != TCP_STATE_LISTEN or entry["inode"] == 0:
                continue
            if port is not None and entry["port"] != port:
                continue
            found.append(entry)
    return found


# --------------------------------------------------------------------------- pids and fds

def list_pids(proc_root=None):
    """PIDs present in the proc tree now, ascending."""
    try:
        names = os.listdir(_root(proc_root))
    except FileNotFoundError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def parse_socket_link(target):
    """Inode of a ``socket:[N]`` fd link, else None."""
    if target.startswith("socket:[") and target.endswith("]"):
        inner = target[len("socket:["):-1]
        if inner.isdigit():
            return int(inner)
    return None


def fd_links(pid, proc_root=None):
    """{fd number: link target} of a process; {} when it vanished or cannot be read.

    An fd closed between listing and readlink is left out.
    """
    fd_dir = _pid_path(proc_root, pid, "fd")
    try:
        names = os.listdir(fd_dir)
    except GONE_ERRORS:
        return {}
    links = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            links[int(name)] = os.readlink(os.path.join(fd_dir, name))
        except GONE_ERRORS:
            continue
    return links


def fd_link(pid, fd, proc_root=None):
    """Link target of one fd (e.g. "/var/log/x.log (deleted)", "socket:[42]"), or None when gone."""
    try:
        return os.readlink(_pid_path(proc_root, pid, "fd", fd))
    except GONE_ERRORS:
        return None


def socket_owners(inodes, proc_root=None, pids=None):
    """Map each socket inode in ``inodes`` to the sorted PIDs holding an fd on it (several after fork)."""
    wanted = set(inodes)
    owners = dict((inode, []) for inode in wanted)
    if not wanted:
        return owners
    for pid in list_pids(proc_root) if pids is None else pids:
        for target in fd_links(pid, proc_root).values():
            inode = parse_socket_link(target)
            if inode in wanted and pid not in owners[inode]:
                owners[inode].append(pid)
    return owners


def port_listeners(port, proc_root=None, pids=None):
    """LISTEN sockets on ``port`` (see listening_sockets), each with ``pids``: the processes holding it (see
    socket_owners; empty when none is visible)."""
    sockets = listening_sockets(proc_root, port=port)
    owners = socket_owners([entry["inode"] for entry in sockets], proc_root, pids)
    return [dict(entry, pids=owners[entry["inode"]]) for entry in sockets]


def fd_stat(pid, fd, proc_root=None):
    """os.stat of what fd ``fd`` of ``pid`` points at (works for deleted files), or None when gone."""
    try:
        return os.stat(_pid_path(proc_root, pid, "fd", fd))
    except GONE_ERRORS:
        return None


def parse_fdinfo_flags(text):
    """The open flags (int) from the octal ``flags:`` line of /proc/<pid>/fdinfo/<fd>, or None."""
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator and key.strip() == "flags":
            return int(value.strip(), 8)
    return None


def flags_open_for_write(flags):
    """True when open flags allow writing (O_WRONLY or O_RDWR)."""
    return (flags & O_ACCMODE) in (O_WRONLY, O_RDWR)


def fd_flags(pid, fd, proc_root=None):
    """Open flags of one fd, or None when the fd or process is gone."""
    try:
        return parse_fdinfo_flags(_read_text(_pid_path(proc_root, pid, "fdinfo", fd)))
    except GONE_ERRORS:
        return None


def file_identity(stat_result):
    """What identifies the object behind a path or fd: the device number for character/block devices (several
    nodes can name one device), else (st_dev, st_ino)."""
    if stat.S_ISCHR(stat_result.st_mode) or stat.S_ISBLK(stat_result.st_mode):
        return ("device", stat_result.st_rdev)
    return ("file", stat_result.st_dev, stat_result.st_ino)


def processes_holding(identities, proc_root=None, pids=None, link_targets=()):
    """Find every fd, in every process, whose target has one of ``identities`` (see file_identity) or whose
    link text is one of ``link_targets`` (e.g. "/var/log/x.log (deleted)").

    Returns a list of dicts ``pid``, ``fd``, ``target`` (the readlink text, " (deleted)" included),
    ``identity`` (None when the fd vanished before stat). Only fds whose link names a path are stat'ed
    (not sockets, pipes or anon inodes).
    """
    wanted = set(identities)
    wanted_links = set(link_targets)
    holders = []
    if not wanted and not wanted_links:
        return holders
    for pid in list_pids(proc_root) if pids is None else pids:
        for fd, target in sorted(fd_links(pid, proc_root).items()):
            if not target.startswith("/"):
                continue
            result = fd_stat(pid, fd, proc_root)
            identity = file_identity(result) if result is not None else None
            if (identity is not None and identity in wanted) or target in wanted_links:
                holders.append({"pid": pid, "fd": fd, "target": target, "identity": identity})
    return holders


def writers_of(identity, proc_root=None, pids=None, link_targets=()):
    """Processes that hold the file ``identity`` (or a link text in ``link_targets``) open for writing:
    list of dicts pid, fd, target, identity, flags."""
    writers = []
    for holder in processes_holding([identity] if identity else [], proc_root, pids, link_targets):
        flags = fd_flags(holder["pid"], holder["fd"], proc_root)
        if flags is not None and flags_open_for_write(flags):
            holder = dict(holder, flags=flags)
            writers.append(holder)
    return writers


# --------------------------------------------------------------------------- cmdline, stat, start time

def parse_cmdline(raw):
    """argv list from the NUL-separated bytes of /proc/<pid>/cmdline (empty for kernel threads)."""
    text = raw.decode("utf-8", errors="replace")
    if text.endswith("\0"):
        text = text[:-1]
    return text.split("\0") if text else []


def read_cmdline(pid, proc_root=None):
    """argv of a process, or None when it is gone."""
    try:
        return parse_cmdline(_read_bytes(_pid_path(proc_root, pid, "cmdline")))
    except GONE_ERRORS:
        return None


def parse_stat(text):
    """Parse /proc/<pid>/stat: dict with ``pid``, ``comm``, ``state``, ``ppid``, ``starttime`` (clock ticks after boot).

    comm may hold spaces and parentheses, so it spans from the first '(' to the LAST ')'.
    """
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError("not a /proc/<pid>/stat line: %r" % text[:80])
    rest = text[close_paren + 1:].split()
    # rest[0] is field 3 (state); field 22 (starttime) is rest[19].
    if len(rest) < 20:
        raise ValueError("/proc/<pid>/stat line too short: %r" % text[:80])
    return {
        "pid": int(text[:open_paren].strip()),
        "comm": text[open_paren + 1:close_paren],
        "state": rest[0],
        "ppid": int(rest[1]),
        "starttime": int(rest[19]),
    }


def parse_btime(text):
    """Boot time (epoch seconds) from the ``btime`` line of /proc/stat."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "btime":
            return int(fields[1])
    raise ValueError("no btime line in /proc/stat")


def read_btime(proc_root=None):
    return parse_btime(_read_text(os.path.join(_root(proc_root), "stat")))


def clock_ticks_per_second():
    return os.sysconf("SC_CLK_TCK")


def start_epoch(starttime_ticks, btime, ticks_per_second):
    """Epoch seconds at which a process started."""
    return btime + float(starttime_ticks) / ticks_per_second


def iso_utc(epoch):
    """ISO 8601 UTC with a Z, to the second: 2026-11-29T19:40:02Z."""
    moment = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def read_stat(pid, proc_root=None):
    """Parsed /proc/<pid>/stat, or None when the process is gone."""
    try:
        return parse_stat(_read_text(_pid_path(proc_root, pid, "stat")))
    except GONE_ERRORS:
        return None


def process_start_epoch(pid, proc_root=None, btime=None, ticks_per_second=None):
    """Epoch seconds at which ``pid`` started, or None when it is gone."""
    parsed = read_stat(pid, proc_root)
    if parsed is None:
        return None
    if btime is None:
        btime = read_btime(proc_root)
    if ticks_per_second is None:
        ticks_per_second = clock_ticks_per_second()
    return start_epoch(parsed["starttime"], btime, ticks_per_second)


# --------------------------------------------------------------------------- cgroup, environ

def parse_cgroup(text):
    """Parse /proc/<pid>/cgroup into a list of dicts ``hierarchy`` (int), ``controllers`` (list), ``path``.

    v1 lines look like ``4:memory:/x`` or ``1:name=systemd:/system.slice/a.service``; the v2 (unified) line is
    ``0::/path``. The path may itself contain ':' so only the first two separate fields.
    """
    entries = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        entries.append({
            "hierarchy": int(parts[0]),
            "controllers": parts[1].split(",") if parts[1] else [],
            "path": parts[2],
        })
    return entries


def read_cgroup(pid, proc_root=None):
    """Parsed /proc/<pid>/cgroup, or None when the process is gone."""
    try:
        return parse_cgroup(_read_text(_pid_path(proc_root, pid, "cgroup")))
    except GONE_ERRORS:
        return None


def parse_environ_value(raw, key):
    """Value of ``key`` in NUL-separated environ bytes, else None. Nothing else is decoded or kept:
    the environment also holds secrets."""
    prefix = key.encode("ascii") + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", errors="replace")
    return None


def read_environ_value(pid, key, proc_root=None):
    """One variable from /proc/<pid>/environ, or None when absent or the process is gone."""
    try:
        raw = _read_bytes(_pid_path(proc_root, pid, "environ"))
    except GONE_ERRORS:
        return None
    return parse_environ_value(raw, key)


def read_deployment_id(pid, proc_root=None):
    """LLMOPS_DEPLOYMENT_ID of a running process (the only environ key this collection reads)."""
    return read_environ_value(pid, DEPLOYMENT_ID_VARIABLE, proc_root)


# --------------------------------------------------------------------------- one process, described

def describe_process(pid, proc_root=None, btime=None, ticks_per_second=None, cmdline_limit=300):
    """Facts an operator needs to recognise a process: pid, cmdline (secrets masked by redact.command_line(), then
    shortened), comm, started_at (ISO UTC).

    Fields of a process that vanished are None. Every command line a check shows comes from here: a server started with
    ``--api-key KEY`` shows ``--api-key ********``.
    """
    argv = read_cmdline(pid, proc_root)
    parsed = read_stat(pid, proc_root)
    started_at = None
    if parsed is not None:
        if btime is None:
            btime = read_btime(proc_root)
        if ticks_per_second is None:
            ticks_per_second = clock_ticks_per_second()
        started_at = iso_utc(start_epoch(parsed["starttime"], btime, ticks_per_second))
    comm = redact.redact_text(parsed["comm"]) if parsed else None
    cmdline = None
    if argv is not None:
        cmdline = redact.shortened(redact.command_line(argv) if argv else "[%s]" % (comm or "?"), cmdline_limit,
                                   ellipsis="...")
    return {
        "pid": pid,
        "cmdline": cmdline,
        "comm": comm,
        "started_at": started_at,
    }
