# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Multi-node tensor parallelism in the SGLang simulator: two "nodes" as two simulator processes on 127.0.0.1.

What is held (SGLang 0.5.23, see simulators/sglang_sim/README.md "Multi-node"): the ranks meet at --dist-init-addr in
any order; rank 0 serves the API, rank 1 only the dummy health check server; a missing rank ends rank 0 after
--dist-timeout + 1 s with torch's TCPStore error; a rank that dies after init takes the others down (gloo error,
SIGQUIT, SIGKILL of the tree); rank 0's shutdown stops rank 1's schedulers.
"""
from __future__ import annotations

import re
import signal
import socket
import time

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import (
    READY_LINE, free_port, http, run_cli)

DUMMY_LINE = "Dummy health check server started in background thread at 127.0.0.1:%d"
GENERATE = {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 4}}


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def status_of(url):
    try:
        return http("GET", url, timeout=2)[0]
    except OSError:
        return None


@pytest.fixture
def nodes(start_sim, gpu_kit, make_gpu_kit):
    """nodes(node_rank, init_addr, *extra) -> SimProcess of one rank (tp 2 over 2 nodes); start_sim kills all at teardown.
    Each node is a machine of its own: its own GPU kit (both ranks use their node's GPU 0)."""
    kits = {0: gpu_kit, 1: make_gpu_kit()}

    def _start(node_rank, init_addr, *extra, **env):
        args = ["--tp-size", "2", "--nnodes", "2", "--node-rank", str(node_rank), "--dist-init-addr", init_addr] + list(extra)
        for key, value in kits[node_rank].env().items():
            env.setdefault(key, value)
        return start_sim(args, **env)

    return _start


def start_pair(nodes, rank1_first=False, *extra):
    init = "127.0.0.1:%d" % free_port()
    if rank1_first:
        rank1 = nodes(1, init, *extra)
        assert rank1.wait_for_log("TP1] Init parallel begin.")
        rank0 = nodes(0, init, *extra)
    else:
        rank0 = nodes(0, init, *extra)
        assert rank0.wait_for_log("TP0] Init parallel begin.")
        rank1 = nodes(1, init, *extra)
    rank0.wait_ready(timeout=20)
    assert rank1.wait_for_log(DUMMY_LINE % rank1.port, timeout=20), rank1.log()[-2000:]
    return rank0, rank1


@pytest.mark.parametrize("rank1_first", [False, True], ids=["rank0-first", "rank1-first"])
def test_two_ranks_serve_in_either_order(nodes, rank1_first):
    rank0, rank1 = start_pair(nodes, rank1_first)
    # Rank 0 serves the API for the whole model.
    assert http("GET", rank0.url + "/health")[0] == 200
    status, _headers, body = http("POST", rank0.url + "/generate", GENERATE)
    assert status == 200 and b'"text"' in body
    # Rank 1 serves only launch_dummy_health_check_server's paths: 200, empty body.
    for path in ("/health", "/health_generate", "/ping"):
        status, _headers, body = http("GET", rank1.url + path)
        assert (status, body) == (200, b""), path
    assert http("POST", rank1.url + "/generate", GENERATE)[0] == 404
    assert http("POST", rank1.url + "/v1/chat/completions", {"messages": []})[0] == 404
    for path in ("/server_info", "/v1/models", "/model_info", "/metrics"):
        assert http("GET", rank1.url + path)[0] == 404, path
    assert http("POST", rank1.url + "/health")[0] == 405
    # The log lines of each node.
    log0, log1 = rank0.log(), rank1.log()
    for log, tag in ((log0, "TP0"), (log1, "TP1")):
        assert "%s] Init parallel begin." % tag in log
        assert "%s] Init parallel ends. elapsed=" % tag in log
        assert "%s] Load weight end." % tag in log
    assert "TP1]" not in log0 and "TP0]" not in log1
    assert "max_total_num_tokens=" in log0 and "max_total_num_tokens=" not in log1
    assert READY_LINE not in log1 and "Uvicorn running" not in log1 and "INFO:     " not in log1
    assert DUMMY_LINE % rank1.port in log1 and "Dummy health check" not in log0
    # Children: this node's TP ranks (_calculate_rank_ranges); no detokenizer on a node_rank >= 1.
    assert sorted(cmd for _comm, cmd in rank0.children().values()) == ["sglang::detokenizer", "sglang::scheduler_TP0"]
    assert [cmd for _comm, cmd in rank1.children().values()] == ["sglang::scheduler_TP1"]


def test_rank0_alone_times_out_after_dist_timeout(nodes):
    rank0 = nodes(0, "127.0.0.1:%d" % free_port(), "--dist-timeout", "2")
    began = time.time()
    seen = set()
    while rank0.proc.poll() is None and time.time() - began < 20:
        seen.add(status_of(rank0.url + "/health"))
        time.sleep(0.1)
    assert rank0.proc.poll() == -signal.SIGKILL, rank0.log()[-2000:]
    # The API never answered while the rank waited: SGLang opens the port after the schedulers are ready.
    assert seen == {None}
    assert time.time() - began >= 3
    log = rank0.log()
    assert "torch.distributed.DistStoreError: Timed out after 3 seconds waiting for clients. 1/2 clients joined." in log
    assert "TP0] Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "Init parallel ends" not in log and READY_LINE not in log


def test_rank1_alone_times_out_connecting(nodes):
    port = free_port()
    rank1 = nodes(1, "127.0.0.1:%d" % port, "--dist-timeout", "1")
    wait_for(lambda: rank1.proc.poll() is not None, 15, "rank 1 to give up")
    assert rank1.proc.returncode == -signal.SIGKILL
    log = rank1.log()
    assert ("torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to connect "
            "to (127.0.0.1, %d)." % port) in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "Dummy health check" not in log


def test_rank1_killed_after_init_takes_rank0_down(nodes):
    rank0, rank1 = start_pair(nodes)
    rank1.proc.kill()
    rank1.proc.wait(timeout=10)
    wait_for(lambda: rank0.proc.poll() is not None, 15, "rank 0 to exit")
    assert rank0.proc.returncode == -signal.SIGKILL
    assert status_of(rank0.url + "/health") is None
    log = rank0.log()
    assert "TP0] Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:" in log
    assert "broadcast_pyobj" in log
    # Rank 0 served a request (the warm-up), so the tokenizer manager's running-phase handler logs.
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log


def test_rank0_killed_takes_rank1_down(nodes):
    rank0, rank1 = start_pair(nodes)
    rank0.proc.kill()
    rank0.proc.wait(timeout=10)
    wait_for(lambda: rank1.proc.poll() is not None, 15, "rank 1 to exit")
    assert rank1.proc.returncode == -signal.SIGKILL
    assert status_of(rank1.url + "/health") is None
    log = rank1.log()
    assert "TP1] Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "Connection closed by peer [127.0.0.1]:" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_sigterm_rank1_waits_and_rank0_shutdown_stops_it(nodes):
    rank0, rank1 = start_pair(nodes)
    rank1.proc.send_signal(signal.SIGTERM)
    assert rank1.wait_for_log("SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast to stop "
                              "the schedulers.")
    assert rank1.proc.poll() is None and http("GET", rank1.url + "/health")[0] == 200
    rank0.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: rank1.proc.poll() is not None, 15, "rank 1 to exit")
    assert rank1.proc.returncode == 0, rank1.log()[-2000:]
    log1 = rank1.log()
    assert re.search(r"\] Scheduler or DataParallelController \d+ terminated with 0$", log1, re.M), log1[-2000:]
    assert "Connection closed by peer" not in log1
    wait_for(lambda: rank0.proc.poll() is not None, 15, "rank 0 to exit")


def _has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_bracketed_ipv6_init_address(nodes):
    init = "[::1]:%d" % free_port()
    rank0 = nodes(0, init)
    rank1 = nodes(1, init)
    rank0.wait_ready(timeout=20)
    assert rank1.wait_for_log(DUMMY_LINE % rank1.port, timeout=20)
    assert http("GET", rank0.url + "/health")[0] == 200


@pytest.mark.parametrize("addr, message", [
    ("127.0.0.1", "ValueError: Missing port in address (expected host:port): '127.0.0.1'"),
    ("::1:5000", "ValueError: Bare IPv6 address without brackets is ambiguous: '::1:5000'. Use [::1]:5000 instead."),
    ("[::1:5000", "ValueError: Missing closing bracket in IPv6 address: '[::1:5000'"),
    ("127.0.0.1:http", "ValueError: Invalid port number: 'http'"),
])
def test_malformed_init_address_fails_in_the_scheduler(addr, message):
    result = run_cli(["--model-path", "Qwen/Qwen3.6-27B", "--port", str(free_port()), "--tp-size", "2", "--nnodes", "2",
                      "--node-rank", "0", "--dist-init-addr", addr], SGLANG_SIM_STARTUP_SECONDS="0.3")
    assert result.returncode == -signal.SIGKILL
    assert "TP0] Init parallel begin." in result.stderr
    assert message in result.stderr
    assert "NetworkAddress.parse(get_parallel().dist_init_addr)" in result.stderr
    assert "Received sigquit from a child process. It usually means the child failed." in result.stderr


def test_tp_size_not_divisible_by_nnodes_is_refused():
    result = run_cli(["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "3", "--nnodes", "2", "--node-rank", "0",
                      "--dist-init-addr", "127.0.0.1:%d" % free_port()])
    assert result.returncode == 1
    assert "AssertionError: tp_size must be divisible by number of nodes" in result.stderr
    assert "server_args=" not in result.stderr


def test_tp_rank_range_follows_calculate_rank_ranges():
    from sglang_sim import multinode  # pylint: disable=import-outside-toplevel
    assert list(multinode.tp_rank_range({"tp_size": 2, "nnodes": 1, "node_rank": 0, "pp_size": 1})) == [0, 1]
    assert list(multinode.tp_rank_range({"tp_size": 2, "nnodes": 2, "node_rank": 1, "pp_size": 1})) == [1]
    assert list(multinode.tp_rank_range({"tp_size": 8, "nnodes": 2, "node_rank": 1, "pp_size": 1})) == [4, 5, 6, 7]
    assert multinode.parse_network_address("[fd00::1]:5000") == ("fd00::1", 5000)
    assert multinode.parse_network_address("node-a:25000") == ("node-a", 25000)
