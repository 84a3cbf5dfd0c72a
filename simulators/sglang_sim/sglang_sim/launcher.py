# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The launcher process: parses SGLang's command line, forks the titled children, serves HTTP, handles signals.

Startup order follows SGLang: `server_args=` line, schedulers and detokenizer start, each scheduler loads and
reports ready, uvicorn starts (the port opens here), a warm-up request runs, then `The server is fired up and
ready to roll!` is printed as /health turns 200.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

from sglang_sim import cli, cuda as cuda_mod, knobs as knobs_mod, logfmt, multinode, procs, sampling, startup
from sglang_sim.http_api import ServerState, make_dummy_health_server, make_server
from sglang_sim.scheduler import Scheduler

GRACEFUL_DRAIN_SECONDS = 60


class Launcher:
    def __init__(self, args: dict, knobs, launch_command: str, cuda=None):
        self.args = args
        self.knobs = knobs
        self.launch_command = launch_command
        # What torch sees (sglang_sim/cuda.py); each rank takes its GPU in its own process, after the fork.
        self.cuda = cuda
        # {scheduler pid: (GPU GiB, GiB held by others)}: the memory its pools were sized from, as it reported it.
        self.rank_memory = {}
        self.children = {}
        self.sigterm = threading.Event()
        self.ready_children = set()
        self.scheduler_pids = []
        self.exit_status = {}
        # tokenizer_manager.py: auto_create_handle_loop replaces the launch-phase SIGQUIT handler at the first request.
        self.running_phase = False

    # ---- signals ------------------------------------------------------------------------------------------------
    def _on_sigquit(self, signum, frame):
        if self.running_phase:
            # tokenizer_manager.py: SignalHandler.running_phase_sigquit_handler (an asyncio signal handler: no args).
            logfmt.log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        else:
            # entrypoints/engine.py: _set_envs_and_config, launch_phase_sigquit_handler.
            logfmt.log("Received sigquit from a child process. It usually means the child failed.")
        self.kill_process_tree(include_parent=True)

    def _on_sigchld(self, signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            title = self.children.pop(pid, None)
            self.exit_status[pid] = status
            if status != 0:
                logfmt.log("Child process unexpectedly failed with an exit code %d. pid=%d" % (status, pid))
            if title and title.startswith("sglang::scheduler") and pid in self.ready_children and hasattr(self, "state"):
                self.state.status = "UnHealthy"

    def _on_sigterm(self, signum, frame):
        if not self.sigterm.is_set():
            logfmt.log("SIGTERM received. signum=%s frame=%s. Draining requests and shutting down..." % (signum, frame))
        self.sigterm.set()

    def kill_process_tree(self, include_parent: bool):
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if include_parent:
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    # ---- phases -------------------------------------------------------------------------------------------------
    def spawn_children(self, start: float):
        ready_fds = []
        # entrypoints/engine.py: _calculate_rank_ranges - this node's TP ranks (all of them with one node).
        for rank in multinode.tp_rank_range(self.args):
            read_fd, write_fd = os.pipe()

            def body(parent_pid, rank=rank, write_fd=write_fd, read_fd=read_fd):
                os.close(read_fd)
                holder = {}
                code = startup.run_scheduler_rank(rank, self.args, self.knobs, write_fd, start, parent_pid, holder, self.cuda)
                if code:
                    return code
                if holder.get("comm") is not None:
                    return startup.scheduler_loop(rank, self.args, parent_pid, holder["comm"])
                return procs.idle_until_parent_dies(parent_pid)

            title = "sglang::scheduler_TP%d" % rank
            pid = procs.spawn(title, body, self.knobs.has("ignore-sigterm"))
            os.close(write_fd)
            self.children[pid] = title
            self.scheduler_pids.append(pid)
            ready_fds.append((read_fd, pid))
        if self.args.get("node_rank", 0) >= 1:
            # engine.py: _launch_subprocesses - nodes with node_rank >= 1 run no detokenizer or tokenizer manager.
            return ready_fds
        pid = procs.spawn("sglang::detokenizer", procs.idle_until_parent_dies, self.knobs.has("ignore-sigterm"))
        self.children[pid] = "sglang::detokenizer"
        return ready_fds

    def wait_for_schedulers(self, ready_fds) -> bool:
        pending = dict(ready_fds)
        while pending:
            if self.sigterm.is_set():
                return False
            try:
                readable = select.select(list(pending), [], [], 0.2)[0]
            except InterruptedError:
                continue
            for fd in readable:
                data = os.read(fd, 256)
                os.close(fd)
                pid = pending.pop(fd)
                if not data.startswith(b"ready"):
                    # The rank died before it was ready; SGLang's launcher reports it this way.
                    logfmt.log("Rank %d scheduler is dead. Please check if there are relevant logs." % len(self.ready_children))
                    return False
                self.ready_children.add(pid)
                gpu_gb, others_gb = (float(value) for value in data.split()[1:3])
                self.rank_memory[pid] = (gpu_gb, others_gb)
        return True

    def serve(self, max_total_num_tokens: int) -> int:
        scheduler = Scheduler(self.args, self.knobs, max_total_num_tokens)
        self.state = ServerState(self.args, self.knobs, scheduler, self.launch_command, max_total_num_tokens)
        try:
            server = make_server(self.state)
        except OSError as error:
            logfmt.log("Failed to bind %s:%d: %s" % (self.args["host"], self.args["port"], error))
            self.kill_process_tree(include_parent=False)
            return 1
        scheduler.start()
        if not self.knobs.has("ignore-sigterm"):
            signal.signal(signal.SIGTERM, self._on_sigterm)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="sim-http", daemon=True).start()
        logfmt.log_uvicorn("Started server process [%d]" % os.getpid())
        logfmt.log_uvicorn("Waiting for application startup.")
        chat_defaults = sampling.model_default_sampling(self.args["sampling_defaults"], self.knobs.generation_config)
        if chat_defaults:
            # entrypoints/openai/serving_chat.py: OpenAIServingChat.__init__ logs the defaults it took.
            logfmt.log("Using default chat sampling params from model generation config: %r" % (chat_defaults,))
        logfmt.log_uvicorn("Application startup complete.")
        logfmt.log_uvicorn("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (self.args["host"], self.args["port"]))
        if not self.knobs.has("never-ready"):
            self.warm_up(scheduler)
        while not self.sigterm.wait(0.2):
            pass
        return self.shutdown(server, scheduler)

    def warm_up(self, scheduler):
        client = "127.0.0.1:%d" % (40000 + os.getpid() % 20000)
        logfmt.log_access(client, "GET /model_info HTTP/1.1", 200, "OK")
        request = scheduler.build_request({"messages": [{"role": "user", "content": "The capital city of France is"}],
                                           "chat_template_kwargs": {"enable_thinking": False}}, 8, False)
        # http_server.py: _execute_server_warmup posts this body to /generate (no image understanding), so with
        # --log-requests the warm-up is the first request logged.
        self.state.request_log.log_generate({"text": "The capital city of France is",
                                             "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
        self.running_phase = True
        scheduler.submit(request)
        remaining = self.knobs.startup_seconds * (1 - startup.PHASES["ready"])
        deadline = time.time() + max(0.0, remaining)
        while not request.done.wait(0.05):
            if self.sigterm.is_set():
                return
        delay = deadline - time.time()
        if delay > 0 and not self.sigterm.wait(delay):
            pass
        if self.sigterm.is_set():
            return
        logfmt.log_access(client, "POST /generate HTTP/1.1", 200, "OK")
        self.state.status = "Up"
        logfmt.log("The server is fired up and ready to roll!")

    def shutdown(self, server, scheduler) -> int:
        self.state.gracefully_exit = True
        deadline = time.time() + GRACEFUL_DRAIN_SECONDS
        while (scheduler.running or scheduler.waiting) and time.time() < deadline:
            time.sleep(0.05)
        logfmt.log("Gracefully exiting... Remaining number of requests %d." % (len(scheduler.running) + len(scheduler.waiting)))
        scheduler.stop()
        self.stop_remote_ranks()
        server.shutdown()
        server.server_close()
        # SGLang ends with kill_process_tree(include_parent=True): the launcher dies of its own SIGKILL (status 137).
        self.kill_process_tree(include_parent=self.knobs.sigterm_exit == "sigkill")
        return 0

    def stop_remote_ranks(self) -> None:
        """tokenizer_manager.py: sigterm_watchdog sends ShutdownReq, which TP rank 0's scheduler broadcasts to every
        rank (the other nodes' schedulers exit 0); here SIGUSR1 asks the TP0 child to send it."""
        if not multinode.is_multinode(self.args) or not self.scheduler_pids:
            return
        pid = self.scheduler_pids[0]
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            return
        deadline = time.time() + 5
        while pid in self.children and time.time() < deadline:
            time.sleep(0.05)

    def _on_follower_sigterm(self, signum, frame):
        logfmt.log("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the "
                   "schedulers." % self.args["node_rank"])

    def serve_follower(self) -> int:
        """engine.py: _launch_subprocesses for node_rank >= 1: after the schedulers are ready, a SIGTERM handler that
        only logs, the dummy health check server on --host:--port, then block_until_scheduler_exits; launch_server
        returns and the process ends."""
        if not self.knobs.has("ignore-sigterm"):
            signal.signal(signal.SIGTERM, self._on_follower_sigterm)
        host, port = self.args["host"], self.args["port"]
        where = "%s:%d" % (multinode.wrap_host(host), port)
        try:
            server = make_dummy_health_server(host, port, self.args.get("enable_metrics"))
        except OSError as error:
            # utils/common.py: launch_dummy_health_check_server - uvicorn's bind error ends the thread, not the node.
            server = None
            logfmt.log("[Errno %d] error while attempting to bind on address %r: %s"
                       % (error.errno or 0, (host, port), (error.strerror or "").lower()))
        if server is not None:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="health-check-server",
                             daemon=True).start()
        logfmt.log("Dummy health check server started in background thread at %s" % where)
        if server is None:
            logfmt.log("Dummy health check server stopped at %s" % where)
        for pid in self.scheduler_pids:
            while pid in self.children:
                time.sleep(0.1)
            status = self.exit_status.get(pid, 0)
            exitcode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            logfmt.log("Scheduler or DataParallelController %d terminated with %d" % (pid, exitcode))
        if server is not None:
            server.shutdown()
            server.server_close()
        return 0

    def run(self) -> int:
        signal.signal(signal.SIGQUIT, self._on_sigquit)
        signal.signal(signal.SIGCHLD, self._on_sigchld)
        # Until the HTTP server runs, SIGTERM has its default action (SGLang installs its draining handler with the
        # tokenizer manager's event loop); the children then die of PR_SET_PDEATHSIG.
        signal.signal(signal.SIGTERM, signal.SIG_IGN if self.knobs.has("ignore-sigterm") else signal.SIG_DFL)
        start = time.time()
        logfmt.log("server_args=%r" % (dict(self.args),))
        ready_fds = self.spawn_children(start)
        if not self.wait_for_schedulers(ready_fds):
            self.kill_process_tree(include_parent=False)
            return 1
        if self.args.get("node_rank", 0) >= 1:
            return self.serve_follower()
        # TP rank 0's pools (the ranks agreed on the smallest free memory).
        plan = startup.memory_plan(self.args, *self.rank_memory[self.scheduler_pids[0]])
        # The scheduler serves what the pools allow: SGLang caps max_running_requests by the state pool.
        self.args["max_running_requests"] = plan["max_running_requests"]
        self.args["max_mamba_cache_size"] = plan["mamba_size"]
        return self.serve(plan["kv_tokens"])


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    sglang_argv, sim_argv = knobs_mod.split_sim_argv(argv)
    knobs = knobs_mod.load_knobs(sim_argv)
    namespace, launch_command = cli.prepare_server_args(sglang_argv)
    logfmt.route_logger("sglang_sim", namespace.log_level)
    # torch loads libcuda (the driver stand-in) once; no driver or no GPU: no CUDA device.
    cuda = cuda_mod.Cuda.load()
    # A combination SGLang refuses at start raises SGLang's exception here (traceback, exit status 1, as SGLang),
    # no CUDA device included (get_device's "No accelerator ...").
    args = cli.resolve_server_args(namespace, cuda)
    knobs.generation_config = sampling.load_generation_config(args["model_path"], knobs.generation_config)
    launcher = Launcher(args, knobs, launch_command, cuda)
    sys.exit(launcher.run())


if __name__ == "__main__":
    main()
