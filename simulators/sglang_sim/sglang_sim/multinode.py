# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Multi-node tensor parallelism (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`) as SGLang 0.5.23 does it.

What SGLang does (file: function, in the 0.5.23 wheel):

- entrypoints/engine.py: _calculate_rank_ranges - a node runs the TP ranks
  range(tp_size // nnodes * node_rank, tp_size // nnodes * (node_rank + 1)) (pp_size 1); _launch_scheduler_processes
  starts one scheduler per rank in it.
- distributed/bootstrap.py: init_parallel_runtime logs `Init parallel begin.`, resolves the init method
  (_resolve_dist_init_method: NetworkAddress.parse(dist_init_addr).to_tcp(), else tcp://host:nccl_port of this node)
  and calls parallel_state.py: init_distributed_environment -> torch.distributed.init_process_group(world_size=tp_size,
  rank=tp_rank, timeout=dist_timeout). torch's tcp:// rendezvous makes global rank 0 the TCPStore server on that
  port; it waits for every rank (`Timed out after T+1 seconds waiting for clients. k/N clients joined.`), the others
  connect, retrying, until the timeout (`The client socket has timed out after Tms while trying to connect to (host,
  port).`). dist_timeout None is torch's NCCL default, 600 s. Then `Init parallel ends. elapsed=... s`.
- utils/network.py: NetworkAddress.parse - `host:port`, `[v6addr]:port`; anything else a ValueError, raised in the
  scheduler after `Init parallel begin.`.
- managers/scheduler.py: run_scheduler_process - an exception logs `Scheduler hit an exception: <traceback>` and sends
  SIGQUIT to the launcher, whose handler (engine.py: _set_envs_and_config launch_phase_sigquit_handler, or
  tokenizer_manager.py: SignalHandler.running_phase_sigquit_handler once rank 0 served a request) kills the process
  tree, itself included (SIGKILL: exit status 137).
- Once running, every scheduler loop iteration broadcasts the received requests from TP rank 0 over the gloo CPU
  group (scheduler_components/request_receiver.py: _broadcast_reqs_across_ranks -> utils/common.py: broadcast_pyobj),
  so a rank that dies makes the others fail within the iteration: `RuntimeError: [.../gloo/transport/tcp/pair.cc:N]
  Connection closed by peer [addr]:port`, then the SIGQUIT path above, on every node.

The simulator: global rank 0's scheduler listens on the init address (bound to that address only, where torch binds
every interface), the other ranks connect and send their rank, rank 0 answers `go` when all N have joined; the
connections stay open as the communicator, so a rank's death closes them and every other rank fails as above. Rank 0's
graceful shutdown sends `shutdown` (SGLang's ShutdownReq broadcast) and the other ranks' schedulers exit 0.
Standard library only.
"""
from __future__ import annotations

import ipaddress
import os
import select
import socket
import time

DEFAULT_DIST_TIMEOUT = 600  # torch.distributed default_pg_nccl_timeout (10 min), used when --dist-timeout is unset
SITE = "/usr/local/lib/python3.12/dist-packages"
GLOO_PAIR = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547]"


class DistError(Exception):
    """A torch.distributed failure: `exc_type` is the qualified exception name printed in the traceback."""

    def __init__(self, exc_type: str, message: str, frames=None, c10d_log=None):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.frames = frames or []
        self.c10d_log = c10d_log


class PeerLost(Exception):
    """A communicator connection closed: the peer's address."""

    def __init__(self, peer: str):
        super().__init__(peer)
        self.peer = peer


# ---- utils/network.py: NetworkAddress.parse ------------------------------------------------------------------------
def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
        return True
    except ValueError:
        return False


def _parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"Invalid port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Port out of range (0-65535): {port}")
    return port


# (line in utils/network.py of the raise, for the traceback)
_PARSE_LINES = {"Empty": 616, "Missing closing": 622, "Invalid IPv6": 625, "Expected": 628, "Missing port": 635,
                "Empty host": 638, "Bare": 641, "Invalid port": 535, "Port out": 537}


def parse_network_address(addr: str):
    """(host, port) as NetworkAddress.parse returns them (brackets stripped), or SGLang's ValueError."""
    if not addr:
        raise ValueError("Empty address string")
    if addr.startswith("["):
        close = addr.find("]")
        if close == -1:
            raise ValueError(f"Missing closing bracket in IPv6 address: {addr!r}")
        host = addr[1:close]
        if not _is_ipv6(host):
            raise ValueError(f"Invalid IPv6 address inside brackets: {host!r}")
        rest = addr[close + 1:]
        if not rest.startswith(":") or len(rest) < 2:
            raise ValueError(f"Expected ':port' after closing bracket, got: {rest!r}")
        return host, _parse_port(rest[1:])
    if ":" not in addr:
        raise ValueError(f"Missing port in address (expected host:port): {addr!r}")
    host, port_str = addr.rsplit(":", 1)
    if not host:
        raise ValueError(f"Empty host in address: {addr!r}")
    if ":" in host and _is_ipv6(host):
        raise ValueError(f"Bare IPv6 address without brackets is ambiguous: {addr!r}. Use [{host}]:{port_str} instead.")
    return host, _parse_port(port_str)


def wrap_host(host: str) -> str:
    """utils/network.py: _wrap - brackets around an IPv6 address."""
    return "[%s]" % host if _is_ipv6(host) else host


def parse_error_line(message: str) -> int:
    for prefix, line in _PARSE_LINES.items():
        if message.startswith(prefix):
            return line
    return 600


# ---- entrypoints/engine.py: _calculate_rank_ranges -----------------------------------------------------------------
def tp_rank_range(args: dict) -> range:
    nnodes = max(1, args.get("nnodes") or 1)
    node_rank = args.get("node_rank") or 0
    pp_size = max(1, args.get("pp_size") or 1)
    nnodes_per_tp_group = max(nnodes // pp_size, 1)
    tp_size_per_node = args["tp_size"] // nnodes_per_tp_group
    start = tp_size_per_node * (node_rank % nnodes_per_tp_group)
    return range(start, start + tp_size_per_node)


def gpu_id(args: dict, tp_rank: int) -> int:
    """engine.py: _launch_scheduler_processes - the CUDA ordinal a TP rank uses on its node (pp 1):
    base_gpu_id + (tp_rank % tp_size_per_node) * gpu_id_step."""
    base = args.get("base_gpu_id")
    step = args.get("gpu_id_step")
    return (0 if base is None else base) + (tp_rank % len(tp_rank_range(args))) * (1 if step is None else step)


def is_multinode(args: dict) -> bool:
    return (args.get("nnodes") or 1) > 1


def dist_timeout(args: dict) -> int:
    return args.get("dist_timeout") or DEFAULT_DIST_TIMEOUT


def init_address(args: dict):
    """distributed/bootstrap.py: _resolve_dist_init_method - the init address, else this node's host:nccl_port."""
    if args.get("dist_init_addr"):
        return parse_network_address(args["dist_init_addr"])
    port = args.get("nccl_port")
    if port is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    return args.get("host") or "127.0.0.1", port


# ---- frames of the tracebacks (sglang lines are the 0.5.23 wheel's; torch's are illustrative) ---------------------
def _sg(path, line, function, code):
    return ("%s/sglang/srt/%s" % (SITE, path), line, function, code)


def _torch(path, line, function, code):
    return ("%s/torch/%s" % (SITE, path), line, function, code)


INIT_FRAMES = [
    _sg("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    _sg("managers/scheduler.py", 536, "__init__", "bootstrap.init_parallel_runtime("),
]
PARSE_FRAMES = INIT_FRAMES + [
    _sg("distributed/bootstrap.py", 127, "init_parallel_runtime", "dist_init_method = _resolve_dist_init_method(dist_port=dist_port)"),
    _sg("distributed/bootstrap.py", 242, "_resolve_dist_init_method", "na = NetworkAddress.parse(get_parallel().dist_init_addr)"),
]
RENDEZVOUS_FRAMES = INIT_FRAMES + [
    _sg("distributed/bootstrap.py", 152, "init_parallel_runtime", "_init_parallel_groups("),
    _sg("distributed/bootstrap.py", 322, "_init_parallel_groups", "init_distributed_environment("),
    _sg("distributed/parallel_state.py", 2517, "init_distributed_environment", "torch.distributed.init_process_group("),
    _torch("distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
    _torch("distributed/c10d_logger.py", 95, "wrapper", "func_return = func(*args, **kwargs)"),
    _torch("distributed/distributed_c10d.py", 1735, "init_process_group", "store, rank, world_size = next(rendezvous_iterator)"),
    _torch("distributed/rendezvous.py", 279, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
    _torch("distributed/rendezvous.py", 198, "_create_c10d_store", "return TCPStore("),
]


def loop_frames(args: dict, tp_rank: int):
    """The running scheduler's broadcast of received requests (rank 0 sends, the others receive)."""
    overlap = not args.get("disable_overlap_schedule")
    loop = ("event_loop_overlap", 6231, 2078) if overlap else ("event_loop_normal", 6233, 2033)
    return [
        _sg("managers/scheduler.py", 6368, "run_scheduler_process", "scheduler.run_event_loop()"),
        _sg("managers/scheduler.py", 2010, "run_event_loop", "dispatch_event_loop(self)"),
        _sg("managers/scheduler.py", 6215, "dispatch_event_loop", "return _dispatch_event_loop_once(scheduler)"),
        _sg("managers/scheduler.py", loop[1], "_dispatch_event_loop_once", "scheduler.%s()" % loop[0]),
        _sg("managers/scheduler.py", loop[2], loop[0], "self.ingest_requests()"),
        _sg("managers/scheduler.py", 2205, "ingest_requests", "self.request_receiver.recv_requests(local_reqs=local_reqs)"),
        _sg("managers/scheduler_components/request_receiver.py", 101, "recv_requests",
            "recv_reqs = self._broadcast_reqs_across_ranks(recv_reqs, local_reqs)"),
        _sg("managers/scheduler_components/request_receiver.py", 206, "_broadcast_reqs_across_ranks", "recv_reqs = broadcast_pyobj("),
        _sg("utils/common.py", 2715 if tp_rank == 0 else 2730, "broadcast_pyobj", "dist.broadcast(tensor_size, src=src, group=dist_group)"),
        _torch("distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
        _torch("distributed/distributed_c10d.py", 2974, "broadcast", "work.wait()"),
    ]


def format_traceback(frames, exc_line: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines.append('  File "%s", line %d, in %s' % (path, line, function))
        lines.append("    " + code)
    lines.append(exc_line)
    return "\n".join(lines) + "\n"


def c10d_line(level: str, source: str, message: str) -> str:
    """A c10 log line as torch writes it to stderr: `[E1202 13:05:01.123456789 socket.cpp:1028] [c10d] message`."""
    now = time.time()
    return "[%s%s.%09d %s] [c10d] %s" % (level, time.strftime("%m%d %H:%M:%S", time.localtime(now)),
                                         int((now % 1) * 1e9), source, message)


# ---- the communicator ----------------------------------------------------------------------------------------------
def _peer_text(sock) -> str:
    try:
        address = sock.getpeername()
        return "[%s]:%d" % (address[0], address[1])
    except OSError:
        return "[unknown]:0"


def _family(host: str):
    return socket.AF_INET6 if _is_ipv6(host) else socket.AF_INET


def _resolve(host: str):
    if _is_ipv6(host):
        return host
    try:
        ipaddress.IPv4Address(host)
        return host
    except ValueError:
        return socket.gethostbyname(host)


class Communicator:
    """The TP group's connections: global rank 0 holds one to every other rank, each other rank one to rank 0."""

    def __init__(self, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        self.peers = []  # (socket, "[addr]:port")

    # -- rendezvous --
    def rendezvous(self, host: str, port: int, timeout: int) -> None:
        if self.rank == 0:
            self._serve_store(host, port, timeout)
        else:
            self._join_store(host, port, timeout)

    def _serve_store(self, host, port, timeout):
        ip = _resolve(host)
        listener = socket.socket(_family(ip), socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((ip, port))
            listener.listen(64)
        except OSError as error:
            listener.close()
            code_name = "EADDRINUSE" if error.errno == 98 else "EADDRNOTAVAIL"
            reason = (error.strerror or "address already in use").lower()
            message = ("The server socket has failed to listen on any local network address. port: %d, useIpv6: %s, "
                       "code: -%d, name: %s, message: %s"
                       % (port, "true" if _is_ipv6(ip) else "false", error.errno or 98, code_name, reason))
            raise DistError("torch.distributed.DistNetworkError", message, RENDEZVOUS_FRAMES) from None
        # TCPStore::waitForWorkers: elapsed whole seconds > timeout, so it gives up after timeout + 1 s.
        deadline = time.time() + timeout + 1
        pending = []
        try:
            while len(self.peers) < self.world_size - 1:
                remaining = deadline - time.time()
                if remaining <= 0:
                    raise DistError("torch.distributed.DistStoreError",
                                    "Timed out after %d seconds waiting for clients. %d/%d clients joined."
                                    % (timeout + 1, 1 + len(self.peers), self.world_size), RENDEZVOUS_FRAMES)
                readable = select.select([listener] + pending, [], [], min(remaining, 0.2))[0]
                for sock in readable:
                    if sock is listener:
                        conn, _addr = listener.accept()
                        pending.append(conn)
                        continue
                    data = b""
                    try:
                        data = sock.recv(64)
                    except OSError:
                        pass
                    pending.remove(sock)
                    if data.startswith(b"rank "):
                        self.peers.append((sock, _peer_text(sock)))
                    else:
                        sock.close()
        finally:
            listener.close()
            for sock in pending:
                sock.close()
        for sock, _peer in self.peers:
            try:
                sock.sendall(b"go\n")
            except OSError:
                pass

    def _join_store(self, host, port, timeout):
        deadline = time.time() + timeout
        sock = None
        while sock is None:
            try:
                sock = socket.create_connection((host, port), timeout=1.0)
            except OSError:
                if time.time() >= deadline:
                    message = "The client socket has timed out after %dms while trying to connect to (%s, %d)." % (
                        timeout * 1000, host, port)
                    raise DistError("torch.distributed.DistNetworkError", message, RENDEZVOUS_FRAMES,
                                    c10d_log=c10d_line("E", "socket.cpp:1028", message)) from None
                time.sleep(0.1)
        sock.settimeout(None)
        sock.sendall(b"rank %d\n" % self.rank)
        peer = _peer_text(sock)
        # The store's other ranks are waited for in the store (get with the same timeout): rank 0 answers `go`.
        end = time.time() + timeout + 2
        data = b""
        while not data.startswith(b"go"):
            remaining = end - time.time()
            if remaining <= 0:
                raise DistError("torch.distributed.DistStoreError", "Socket Timeout", RENDEZVOUS_FRAMES)
            if select.select([sock], [], [], min(remaining, 0.2))[0]:
                try:
                    chunk = sock.recv(64)
                except OSError:
                    chunk = b""
                if not chunk:
                    message = ("Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server "
                               "shutdown or crash?")
                    raise DistError("torch.distributed.DistNetworkError", message, RENDEZVOUS_FRAMES)
                data += chunk
        self.peers.append((sock, peer))

    # -- after init --
    def wait(self, until: float, parent_pid: int = None):
        """Wait until `until` (a time.time()); raise PeerLost when a connection closes; return "shutdown" when rank 0
        broadcasts its ShutdownReq, "parent" when the launcher is gone, else None."""
        while True:
            remaining = until - time.time()
            if remaining <= 0:
                return None
            if parent_pid is not None and os.getppid() != parent_pid:
                return "parent"
            socks = [sock for sock, _peer in self.peers]
            try:
                readable = select.select(socks, [], [], min(remaining, 0.2))[0] if socks else []
            except InterruptedError:
                continue
            if not socks:
                time.sleep(min(remaining, 0.2))
            for sock in readable:
                try:
                    data = sock.recv(64)
                except OSError:
                    data = b""
                peer = dict((id(s), p) for s, p in self.peers)[id(sock)]
                if not data:
                    raise PeerLost(peer)
                if b"shutdown" in data:
                    return "shutdown"

    def broadcast_shutdown(self) -> None:
        for sock, _peer in self.peers:
            try:
                sock.sendall(b"shutdown\n")
            except OSError:
                pass

    def close(self) -> None:
        for sock, _peer in self.peers:
            try:
                sock.close()
            except OSError:
                pass
        self.peers = []
