# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""procfs: parsers on kernel-format text, readers on fake /proc trees and on this machine's real /proc."""

from __future__ import annotations

import datetime
import os
import socket
import stat

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.tests.unit.fakes import (
    HEX_V4_ANY, HEX_V4_LOOPBACK, HEX_V6_ANY, HEX_V6_LOOPBACK, HEX_V6_MAPPED_LOOPBACK, TCP6_HEADER, TCP_HEADER, FakeProc, stat_line,
    tcp_row, vanish_mid_scan)

# Verbatim example entry (an ESTABLISHED socket, state 01) from the kernel's documentation,
# https://www.kernel.org/doc/Documentation/networking/proc_net_tcp.rst (the three parts of the example, joined).
KERNEL_DOC_ESTABLISHED = ("   46: 010310AC:9C4C 030310AC:1770 01 00000150:00000000 01:00000019 00000000  1000        0 54165785 "
                          "4 cd1e6040 25 4 27 3 -1")


@pytest.fixture
def fake_proc(tmp_path):
    return FakeProc(tmp_path / "proc")


# --------------------------------------------------------------------------- addresses and /proc/net/tcp

@pytest.mark.parametrize("hex_address, expected", [
    (HEX_V4_ANY, "0.0.0.0"),
    (HEX_V4_LOOPBACK, "127.0.0.1"),
    ("0500000A", "10.0.0.5"),
    (HEX_V6_ANY, "::"),
    (HEX_V6_LOOPBACK, "::1"),
    (HEX_V6_MAPPED_LOOPBACK, "::ffff:127.0.0.1"),
    ("000080FE000000000000000001000000", "fe80::1"),
])
def test_decode_address_is_little_endian_per_word(hex_address, expected):
    assert procfs.address_text(procfs.decode_address(hex_address)) == expected


@pytest.mark.parametrize("bad", ["", "0100007", "ZZ00007F", "0100007F00"])
def test_decode_address_refuses_malformed(bad):
    with pytest.raises(ValueError):
        procfs.decode_address(bad)


def test_parse_endpoint_port_is_big_hex():
    address, port = procfs.parse_endpoint("0100007F:7530")
    assert (str(address), port) == ("127.0.0.1", 30000)
    with pytest.raises(ValueError):
        procfs.parse_endpoint("0100007F")


def test_parse_proc_net_tcp_reads_the_kernel_doc_example_and_skips_header():
    sockets = procfs.parse_proc_net_tcp(TCP_HEADER + "\n" + KERNEL_DOC_ESTABLISHED + "\n")
    assert sockets == [{
        "address": "172.16.3.1", "port": 0x9C4C, "state": "01", "uid": 1000, "inode": 54165785,
        "family": "ipv4", "ipv4_mapped": None,
    }]


def test_parse_proc_net_tcp6_listeners_including_v4_mapped():
    text = "\n".join([
        TCP6_HEADER,
        tcp_row(0, HEX_V6_ANY, 30000, 7001),
        tcp_row(1, HEX_V6_MAPPED_LOOPBACK, 30001, 7002, uid=1000),
        tcp_row(2, HEX_V6_LOOPBACK, 30002, 7003, state="01", remote_hex=HEX_V6_LOOPBACK, remote_port=40000),
        "   3: garbage line that is not a socket",
    ])
    sockets = procfs.parse_proc_net_tcp(text)
    assert [(s["address"], s["port"], s["state"], s["inode"], s["family"], s["ipv4_mapped"]) for s in sockets] == [
        ("::", 30000, "0A", 7001, "ipv6", None),
        ("::ffff:127.0.0.1", 30001, "0A", 7002, "ipv6", "127.0.0.1"),
        ("::1", 30002, "01", 7003, "ipv6", None),
    ]
    assert sockets[1]["uid"] == 1000


def test_listening_sockets_reads_both_families_filters_state_and_port(fake_proc):
    fake_proc.set_net(
        [tcp_row(0, HEX_V4_ANY, 30000, 5001), tcp_row(1, HEX_V4_LOOPBACK, 22, 5002), KERNEL_DOC_ESTABLISHED,
         tcp_row(3, HEX_V4_LOOPBACK, 30000, 0)],  # inode 0: a socket in TIME_WAIT-like teardown has no owner
        [tcp_row(0, HEX_V6_LOOPBACK, 30000, 6001), tcp_row(1, HEX_V6_MAPPED_LOOPBACK, 30000, 6002, state="06")])
    found = procfs.listening_sockets(str(fake_proc.root), port=30000)
    assert [(s["address"], s["inode"]) for s in found] == [("0.0.0.0", 5001), ("::1", 6001)]
    assert len(procfs.listening_sockets(str(fake_proc.root))) == 3


def test_listening_sockets_without_ipv6(fake_proc):
    fake_proc.set_net([tcp_row(0, HEX_V4_ANY, 8080, 5001)])
    assert not (fake_proc.root / "net" / "tcp6").exists()
    assert [s["port"] for s in procfs.listening_sockets(str(fake_proc.root))] == [8080]


def test_proc_root_default_is_looked_up_at_call_time(fake_proc, monkeypatch):
    fake_proc.set_net([tcp_row(0, HEX_V4_ANY, 8080, 5001)], [])
    monkeypatch.setattr(procfs, "PROC_ROOT", str(fake_proc.root))
    assert [s["inode"] for s in procfs.listening_sockets()] == [5001]


# --------------------------------------------------------------------------- stat, btime, start time

@pytest.mark.parametrize("comm", ["python3", "sglang::schedul", "a b) (c", "x) S 1 2 (y", ")", "(("])
def test_parse_stat_comm_with_spaces_and_parens(comm):
    parsed = procfs.parse_stat(stat_line(4242, comm, 987654, ppid=17))
    assert parsed == {"pid": 4242, "comm": comm, "state": "S", "ppid": 17, "starttime": 987654}


@pytest.mark.parametrize("bad", ["", "4242 python3 S 1", "4242 (python3) S 1 2 3"])
def test_parse_stat_refuses_malformed(bad):
    with pytest.raises(ValueError):
        procfs.parse_stat(bad)


def test_btime_and_start_time(fake_proc):
    assert procfs.parse_btime("cpu 1 2\nbtime 1795980364\n") == 1795980364
    with pytest.raises(ValueError):
        procfs.parse_btime("cpu 1 2\n")
    assert procfs.start_epoch(250, 1795980000, 100) == 1795980002.5
    assert procfs.iso_utc(1795980002.5) == "2026-11-29T19:20:02Z"
    fake_proc.add_process(77, ["/usr/bin/python3", "-m", "http.server"], starttime=4000)
    assert procfs.process_start_epoch(77, str(fake_proc.root), ticks_per_second=100) == 1795980040.0
    assert procfs.process_start_epoch(78, str(fake_proc.root)) is None


# --------------------------------------------------------------------------- cmdline, cgroup, environ

def test_parse_cmdline():
    assert procfs.parse_cmdline(b"python3\0-m\0http.server\x0030000\0") == ["python3", "-m", "http.server", "30000"]
    assert procfs.parse_cmdline(b"") == []
    # setproctitle rewrites argv to one string without a trailing NUL (e.g. sglang::scheduler_TP0).
    assert procfs.parse_cmdline(b"sglang::scheduler_TP0") == ["sglang::scheduler_TP0"]
    assert procfs.parse_cmdline(b"a\0\0b\0") == ["a", "", "b"]


def test_parse_cgroup_v1_hybrid_and_v2_lines():
    entries = procfs.parse_cgroup(
        "12:cpu,cpuacct:/system.slice/sglang-qwen36.service\n"
        "1:name=systemd:/system.slice/sglang-qwen36.service\n"
        "0::/system.slice/sglang-qwen36.service\n"
        "3:name=odd:/path:with:colons\n"
        "not a cgroup line\n")
    assert entries == [
        {"hierarchy": 12, "controllers": ["cpu", "cpuacct"], "path": "/system.slice/sglang-qwen36.service"},
        {"hierarchy": 1, "controllers": ["name=systemd"], "path": "/system.slice/sglang-qwen36.service"},
        {"hierarchy": 0, "controllers": [], "path": "/system.slice/sglang-qwen36.service"},
        {"hierarchy": 3, "controllers": ["name=odd"], "path": "/path:with:colons"},
    ]


def test_environ_returns_only_the_asked_key(fake_proc):
    fake_proc.add_process(10, ["x"], environ={"SGLANG_API_KEY": "sk-secret", "LLMOPS_DEPLOYMENT_ID": "ab" * 32,
                                              "LLMOPS_DEPLOYMENT_ID_OLD": "nope"})
    assert procfs.read_deployment_id(10, str(fake_proc.root)) == "ab" * 32
    assert procfs.read_environ_value(10, "MISSING", str(fake_proc.root)) is None
    assert procfs.read_deployment_id(11, str(fake_proc.root)) is None
    assert procfs.parse_environ_value(b"A=1=2\0B=3\0", "A") == "1=2"


def test_describe_process(fake_proc):
    fake_proc.add_process(4242, ["python3", "-m", "http.server", "30000"], starttime=1234)
    fake_proc.add_process(2, [], comm="kthreadd")
    fake_proc.add_process(99, ["x" * 400])
    root = str(fake_proc.root)
    assert procfs.describe_process(4242, root) == {
        "pid": 4242, "cmdline": "python3 -m http.server 30000", "comm": "python3", "started_at": fake_proc.start_iso(1234)}
    assert procfs.describe_process(2, root)["cmdline"] == "[kthreadd]"
    assert len(procfs.describe_process(99, root)["cmdline"]) == 300
    assert procfs.describe_process(5, root) == {"pid": 5, "cmdline": None, "comm": None, "started_at": None}


def test_describe_process_masks_secrets_before_shortening(fake_proc):
    # A key at the end of a long command line: shortening first would still show its start.
    key = "sk-0123456789abcdef"
    fake_proc.add_process(4243, ["sglang", "serve", "--model-path", "/m/" + "x" * 270, "--api-key", key])
    fake_proc.add_process(4244, ["sglang", "serve", "--api-key", key, "--port", "30000"])
    root = str(fake_proc.root)
    long_line = procfs.describe_process(4243, root)["cmdline"]
    assert len(long_line) == 300 and "sk-0" not in long_line
    assert procfs.describe_process(4244, root)["cmdline"] == "sglang serve --api-key ******** --port 30000"


# --------------------------------------------------------------------------- fds, sockets, fdinfo

def test_parse_fdinfo_flags_and_write_modes():
    assert procfs.parse_fdinfo_flags("pos:\t0\nflags:\t0100001\nmnt_id:\t24\n") == 0o100001
    assert procfs.parse_fdinfo_flags("pos:\t0\n") is None
    assert procfs.flags_open_for_write(0o100001)       # O_WRONLY | O_LARGEFILE
    assert procfs.flags_open_for_write(0o102002)       # O_RDWR | O_APPEND | O_LARGEFILE
    assert procfs.flags_open_for_write(0o2001)         # O_WRONLY | O_APPEND
    assert not procfs.flags_open_for_write(0o100000)   # O_RDONLY | O_LARGEFILE
    assert not procfs.flags_open_for_write(0o2100000)  # O_RDONLY | O_CLOEXEC | O_LARGEFILE


def test_socket_owners_maps_inodes_to_all_holders(fake_proc):
    fake_proc.add_process(100, ["server"], fds={0: "/dev/null", 3: "socket:[5001]", 4: "pipe:[77]"})
    fake_proc.add_process(101, ["forked-worker"], fds={3: "socket:[5001]", 5: "socket:[6001]"})
    fake_proc.add_process(102, ["other"], fds={3: "socket:[9999]", 4: "anon_inode:[eventfd]"})
    owners = procfs.socket_owners([5001, 6001, 7001], str(fake_proc.root))
    assert owners == {5001: [100, 101], 6001: [101], 7001: []}
    assert procfs.socket_owners([], str(fake_proc.root)) == {}
    assert procfs.parse_socket_link("socket:[12]") == 12
    assert procfs.parse_socket_link("socket:[x]") is None
    assert procfs.parse_socket_link("/tmp/socket:[12]") is None


def test_port_listeners_names_the_holders_of_each_socket(fake_proc):
    fake_proc.set_net([tcp_row(0, HEX_V4_ANY, 30000, 5001), tcp_row(1, HEX_V4_LOOPBACK, 22, 5002)],
                      [tcp_row(0, HEX_V6_ANY, 30000, 6001)])
    fake_proc.add_process(100, ["server"], fds={3: "socket:[5001]"})
    fake_proc.add_process(101, ["forked-worker"], fds={3: "socket:[5001]"})
    fake_proc.add_process(102, ["sshd"], fds={3: "socket:[5002]"})
    found = procfs.port_listeners(30000, str(fake_proc.root))
    # The IPv6 socket's holder is not visible (another PID namespace): no PIDs, still listed.
    assert [(s["address"], s["inode"], s["pids"]) for s in found] == [("0.0.0.0", 5001, [100, 101]), ("::", 6001, [])]
    assert [s["pids"] for s in procfs.port_listeners(30000, str(fake_proc.root), pids=[101, 102])] == [[101], []]
    assert procfs.port_listeners(8080, str(fake_proc.root)) == []


def test_pid_removed_between_listing_and_reading_is_skipped(fake_proc):
    fake_proc.add_process(100, ["server"], fds={3: "socket:[5001]"})
    # PIDs 200 and 300 were listed, then exited before their fds were read.
    assert procfs.socket_owners([5001], str(fake_proc.root), pids=[200, 100, 300]) == {5001: [100]}
    assert procfs.fd_links(200, str(fake_proc.root)) == {}
    assert procfs.read_cmdline(200, str(fake_proc.root)) is None
    assert procfs.read_cgroup(200, str(fake_proc.root)) is None
    assert procfs.fd_flags(200, 1, str(fake_proc.root)) is None
    assert procfs.fd_link(200, 1, str(fake_proc.root)) is None


def test_vanishing_pid_and_fd_during_scan(fake_proc, monkeypatch):
    fake_proc.add_process(100, ["server"], fds={3: "socket:[5001]"})
    fake_proc.add_process(101, ["exiting"], fds={3: "socket:[5001]", 4: "socket:[5002]"})
    fake_proc.add_process(102, ["closing-an-fd"], fds={3: "socket:[5001]", 4: "socket:[5002]"})
    fake_proc.add_process(103, ["not-ours"], fds={3: "socket:[5002]"})
    vanish_mid_scan(monkeypatch, listdir={"/101/fd": FileNotFoundError, "/103/fd": PermissionError},
                    readlink={"/102/fd/4": FileNotFoundError, "/102/fd/3": ProcessLookupError})
    assert procfs.socket_owners([5001, 5002], str(fake_proc.root)) == {5001: [100], 5002: []}


def test_list_pids(fake_proc):
    fake_proc.add_process(30, ["a"])
    fake_proc.add_process(4, ["b"])
    (fake_proc.root / "self").mkdir()
    assert procfs.list_pids(str(fake_proc.root)) == [4, 30]
    assert procfs.list_pids(str(fake_proc.root / "missing")) == []


def test_writers_of_a_file_by_inode_and_flags(fake_proc, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("x\n")
    other = tmp_path / "other.log"
    other.write_text("y\n")
    fake_proc.add_process(100, ["server"], fds={1: (str(log), "0102001"), 2: (str(log), "0102001")})
    fake_proc.add_process(101, ["tail", "-f"], fds={3: (str(log), "0100000")})
    fake_proc.add_process(102, ["other"], fds={1: (str(other), "0102001")})
    identity = procfs.file_identity(os.stat(str(log)))
    writers = procfs.writers_of(identity, str(fake_proc.root))
    assert [(w["pid"], w["fd"], w["target"], w["flags"]) for w in writers] == [
        (100, 1, str(log), 0o102001), (100, 2, str(log), 0o102001)]
    holders = procfs.processes_holding([identity], str(fake_proc.root))
    assert [(h["pid"], h["fd"]) for h in holders] == [(100, 1), (100, 2), (101, 3)]


def test_writers_of_a_deleted_file_by_link_text(fake_proc, tmp_path):
    # The kernel shows a deleted file's fd link as "<path> (deleted)"; a file of that name stands in for the inode.
    deleted = tmp_path / "server.log (deleted)"
    deleted.write_text("old run\n")
    fake_proc.add_process(100, ["old-server"], fds={1: (str(deleted), "0102001")})
    writers = procfs.writers_of(None, str(fake_proc.root), link_targets=[str(tmp_path / "server.log") + procfs.DELETED_SUFFIX])
    assert [(w["pid"], w["target"]) for w in writers] == [(100, str(deleted))]


def test_device_nodes_are_matched_by_device_number(fake_proc, tmp_path):
    null_identity = procfs.file_identity(os.stat("/dev/null"))
    assert null_identity == ("device", os.stat("/dev/null").st_rdev)
    second_node = tmp_path / "null-twin"
    try:
        os.mknod(str(second_node), 0o600 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
    except (PermissionError, OSError):
        second_node = None
    fds = {0: "/dev/null"}
    if second_node is not None:
        fds[5] = str(second_node)
    fake_proc.add_process(100, ["gpu-user"], fds=fds)
    holders = procfs.processes_holding([null_identity], str(fake_proc.root))
    assert [(h["pid"], h["fd"]) for h in holders] == sorted((100, fd) for fd in fds)


# --------------------------------------------------------------------------- this machine's real /proc

def test_real_proc_finds_our_ipv4_listener():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        found = procfs.listening_sockets(port=port)
        assert [(s["address"], s["family"]) for s in found] == [("127.0.0.1", "ipv4")]
        owners = procfs.socket_owners([found[0]["inode"]])
        assert owners[found[0]["inode"]] == [os.getpid()]
    assert procfs.listening_sockets(port=port) == []


def test_real_proc_finds_our_ipv6_listener():
    if not socket.has_ipv6 or not os.path.exists("/proc/net/tcp6"):
        pytest.skip("no IPv6 on this machine")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as server:
        try:
            server.bind(("::1", 0))
        except OSError:
            pytest.skip("::1 is not configured")
        server.listen(1)
        port = server.getsockname()[1]
        found = procfs.listening_sockets(port=port)
        assert [(s["address"], s["family"]) for s in found] == [("::1", "ipv6")]
        assert procfs.socket_owners([found[0]["inode"]])[found[0]["inode"]] == [os.getpid()]


def test_real_proc_finds_a_file_we_write_and_its_deleted_twin(tmp_path):
    path = tmp_path / "held.log"
    with open(str(path), "a") as handle:
        identity = procfs.file_identity(os.stat(str(path)))
        writers = procfs.writers_of(identity, pids=[os.getpid()])
        assert (os.getpid(), handle.fileno()) in [(w["pid"], w["fd"]) for w in writers]
        with open(str(path)) as reader:
            assert reader.fileno() not in [w["fd"] for w in procfs.writers_of(identity, pids=[os.getpid()])]
        os.unlink(str(path))
        target = procfs.fd_link(os.getpid(), handle.fileno())
        assert target == str(path) + procfs.DELETED_SUFFIX
        assert procfs.fd_stat(os.getpid(), handle.fileno()).st_ino == identity[2]
        twin = procfs.writers_of(None, pids=[os.getpid()], link_targets=[target])
        assert [w["fd"] for w in twin] == [handle.fileno()]


def test_real_proc_describes_ourselves():
    me = procfs.describe_process(os.getpid())
    assert me["pid"] == os.getpid()
    assert "pytest" in me["cmdline"] or "python" in me["cmdline"]
    started = datetime.datetime.strptime(me["started_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    age = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    assert -2 <= age < 24 * 3600
    assert procfs.read_cgroup(os.getpid())
    assert procfs.read_stat(os.getpid())["ppid"] == os.getppid()
