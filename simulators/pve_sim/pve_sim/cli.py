# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim command line: serve (foreground), start/stop/status (daemon), gpu-kit, template, pct."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pve_sim.auth import AuthStore

DEFAULT_TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
TEMPLATE_PACKAGES = "systemd,systemd-sysv,python3,dbus,procps,iproute2"
# Units that wait for hardware a container does not have.
MASKED_UNITS = ("systemd-firstboot.service", "getty.target", "console-getty.service", "systemd-udevd.service", "systemd-udev-trigger.service",
                "systemd-modules-load.service", "sys-kernel-debug.mount", "systemd-remount-fs.service")


def _listen(value):
    host, _sep, port = value.rpartition(":")
    return (host.strip("[]") or "127.0.0.1", int(port))


def _template_dir(state_dir):
    return os.path.join(state_dir, "var", "lib", "vz", "template", "cache")


def _seed_templates(state_dir, cache):
    """Link (or copy) the cached templates into the state dir's storage 'local'."""
    if not cache or not os.path.isdir(cache):
        return
    target = _template_dir(state_dir)
    os.makedirs(target, exist_ok=True)
    for entry in os.listdir(cache):
        if entry.endswith((".tar.zst", ".tar.gz", ".tar.xz")) and not os.path.exists(os.path.join(target, entry)):
            try:
                os.link(os.path.join(cache, entry), os.path.join(target, entry))
            except OSError:
                shutil.copy2(os.path.join(cache, entry), os.path.join(target, entry))


def cmd_serve(args):
    # Imported here so that gpu-kit and pct work on a machine without the server's dependencies.
    from pve_sim.node import Node  # pylint: disable=import-outside-toplevel
    from pve_sim.runtime import LxcRuntime, NullRuntime  # pylint: disable=import-outside-toplevel
    from pve_sim.server import ApiServer, ensure_certificate  # pylint: disable=import-outside-toplevel

    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    AuthStore.initialise(state_dir, args.root_password)
    _seed_templates(state_dir, args.template_cache or os.environ.get("PVE_SIM_TEMPLATE_CACHE"))
    if args.no_lxc:
        runtime = NullRuntime(state_dir)
    else:
        if not shutil.which("lxc-start"):
            sys.stderr.write("pve-sim: lxc-start not found; install lxc or run with --no-lxc\n")
            return 2
        runtime = LxcRuntime(state_dir)
    node = Node(state_dir, args.node, runtime)
    cert, key, fingerprint = ensure_certificate(state_dir, args.node)
    node.fingerprint = fingerprint
    server = ApiServer(_listen(args.listen), node, AuthStore(state_dir), cert, key, args.auth_failure_delay, args.access_log)
    host, port = server.server_address[:2]
    with open(os.path.join(state_dir, "endpoint.json"), "w", encoding="utf-8") as handle:
        json.dump({"host": host, "port": port, "node": args.node, "fingerprint": fingerprint, "runtime": runtime.name,
                   "pid": os.getpid()}, handle)
    print("pve-sim: node %s listening on https://%s:%d/api2/json (runtime: %s)" % (args.node, host, port, runtime.name), flush=True)
    print("pve-sim: certificate fingerprint (sha256): %s" % fingerprint, flush=True)
    print("pve-sim: root@pam password in %s; API token root@pam!ansible secret in %s" % (
        os.path.join(state_dir, "root-password"), os.path.join(state_dir, "token-root@pam!ansible")), flush=True)

    def stop(signum, frame):  # pylint: disable=unused-argument
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _pid_file(state_dir):
    return os.path.join(state_dir, "pve-sim.pid")


def _read_pid(state_dir):
    try:
        with open(_pid_file(state_dir), encoding="utf-8") as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def cmd_start(args):
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    if _read_pid(state_dir):
        print("pve-sim: already running (pid %d)" % _read_pid(state_dir))
        return 0
    command = [sys.executable, "-m", "pve_sim", "serve", "--state-dir", state_dir, "--listen", args.listen, "--node", args.node,
               "--auth-failure-delay", str(args.auth_failure_delay)]
    if args.no_lxc:
        command.append("--no-lxc")
    if args.template_cache:
        command += ["--template-cache", args.template_cache]
    if args.root_password:
        command += ["--root-password", args.root_password]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.pathsep + env.get("PYTHONPATH", "")
    endpoint = os.path.join(state_dir, "endpoint.json")
    if os.path.exists(endpoint):
        os.unlink(endpoint)
    with open(os.path.join(state_dir, "pve-sim.log"), "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,  # pylint: disable=consider-using-with
                                   start_new_session=True)
    with open(_pid_file(state_dir), "w", encoding="utf-8") as handle:
        handle.write("%d\n" % process.pid)
    host, port = _listen(args.listen)
    deadline = time.time() + args.wait
    while time.time() < deadline:
        if process.poll() is not None:
            sys.stderr.write("pve-sim: server exited (rc=%s); see %s\n" % (process.returncode, os.path.join(state_dir, "pve-sim.log")))
            return 1
        if os.path.exists(endpoint):
            try:
                with open(endpoint, encoding="utf-8") as handle:
                    port = json.load(handle)["port"]  # --listen HOST:0 picks a free port
                with socket.create_connection((host, port), timeout=1):
                    print("pve-sim: started (pid %d) on https://%s:%d; log %s" % (process.pid, host, port, os.path.join(state_dir, "pve-sim.log")))
                    return 0
            except (OSError, ValueError, KeyError):
                pass
        time.sleep(0.2)
    sys.stderr.write("pve-sim: not listening after %ds\n" % args.wait)
    return 1


def cmd_stop(args):
    state_dir = os.path.abspath(args.state_dir)
    pid = _read_pid(state_dir)
    if not pid:
        print("pve-sim: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + args.wait
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    os.unlink(_pid_file(state_dir))
    print("pve-sim: stopped (pid %d)" % pid)
    return 0


def cmd_status(args):
    pid = _read_pid(os.path.abspath(args.state_dir))
    print("pve-sim: running (pid %d)" % pid if pid else "pve-sim: not running")
    return 0 if pid else 3


def cmd_gpu_kit(args):
    from pve_sim.gpu_kit import create_kit  # pylint: disable=import-outside-toplevel

    dev_dir = args.dev_dir
    if args.real_dev and not dev_dir:
        dev_dir = "/dev"
    real = dev_dir and (os.path.realpath(dev_dir) + "/").startswith("/dev/")
    if real and not args.real_dev:
        sys.stderr.write("pve-sim: refusing to create nodes in the real /dev without --real-dev\n")
        return 2
    result = create_kit(os.path.abspath(args.root), args.uvm_major, args.gpus, args.driver_version, dev_dir and os.path.abspath(dev_dir))
    print(json.dumps(result, indent=2))
    return 0


def build_template(output, from_rootfs=None, mirror="http://deb.debian.org/debian", suite="bookworm", timeout=900):
    """debootstrap --variant=minbase (systemd, python3) packed as a zstd tarball, PVE's vztmpl format."""
    work = tempfile.mkdtemp(prefix="pve-sim-template.", dir=os.path.dirname(os.path.abspath(output)))
    try:
        rootfs = from_rootfs
        if rootfs is None:
            rootfs = os.path.join(work, "rootfs")
            subprocess.run(["debootstrap", "--variant=minbase", "--include=" + TEMPLATE_PACKAGES, suite, rootfs, mirror],
                           check=True, capture_output=True, timeout=timeout)
            for unit in MASKED_UNITS:
                link = os.path.join(rootfs, "etc", "systemd", "system", unit)
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink("/dev/null", link)
            shutil.rmtree(os.path.join(rootfs, "var", "lib", "apt", "lists"), ignore_errors=True)
        temporary = os.path.join(work, "template.tar.zst")
        with subprocess.Popen(["tar", "-C", rootfs, "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE) as tar:
            subprocess.run(["zstd", "-q", "-T0", "-o", temporary], stdin=tar.stdout, check=True, timeout=timeout)
        os.replace(temporary, output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return output


def cmd_template(args):
    output = args.output or os.path.join(_template_dir(os.path.abspath(args.state_dir)), DEFAULT_TEMPLATE)
    if os.path.exists(output) and not args.force:
        print(output)
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    print(build_template(output, args.from_rootfs, args.mirror))
    return 0


def cmd_pct(args):
    from pve_sim.runtime import LxcRuntime  # pylint: disable=import-outside-toplevel

    runtime = LxcRuntime(os.path.abspath(args.state_dir))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.pct_command == "exec":
        if not command:
            sys.stderr.write("pve-sim pct exec: no command given\n")
            return 2
        return subprocess.run(runtime.exec_argv(args.vmid, command), check=False).returncode
    if args.pct_command == "enter":
        return subprocess.run(runtime.exec_argv(args.vmid, ["/bin/bash", "-l"]), check=False).returncode
    print("status: %s" % ("running" if runtime.is_running(args.vmid) else "stopped"))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="pve-sim", description="A Proxmox VE node simulator for tests and sandboxes.")
    sub = parser.add_subparsers(dest="command", required=True)

    def server_options(command):
        command.add_argument("--state-dir", required=True, help="directory of the node's state (configs, templates, users, tasks)")
        command.add_argument("--listen", default="127.0.0.1:8006", help="HOST:PORT (default 127.0.0.1:8006; port 0 picks a free one)")
        command.add_argument("--node", default="pve", help="node name (default pve)")
        command.add_argument("--no-lxc", action="store_true", help="keep containers on paper: no LXC (fast unit tests)")
        command.add_argument("--template-cache", help="directory of vztmpl tarballs to link into storage 'local' (or PVE_SIM_TEMPLATE_CACHE)")
        command.add_argument("--root-password", help="password of root@pam on first start (default: generated into STATE/root-password)")
        command.add_argument("--auth-failure-delay", type=float, default=0.0, help="seconds to delay 401 answers (a real node waits 3)")

    serve = sub.add_parser("serve", help="run the API server in the foreground")
    server_options(serve)
    serve.add_argument("--access-log", action="store_true", help="log each request to stderr")
    serve.set_defaults(func=cmd_serve)
    start = sub.add_parser("start", help="start the API server in the background (pid file and log in the state dir)")
    server_options(start)
    start.add_argument("--wait", type=int, default=30, help="seconds to wait for the port")
    start.set_defaults(func=cmd_start)
    stop = sub.add_parser("stop", help="stop the background server")
    stop.add_argument("--state-dir", required=True)
    stop.add_argument("--wait", type=int, default=20)
    stop.set_defaults(func=cmd_stop)
    status = sub.add_parser("status", help="is the background server running")
    status.add_argument("--state-dir", required=True)
    status.set_defaults(func=cmd_status)

    kit = sub.add_parser("gpu-kit", help="create NVIDIA device nodes, a /proc/driver/nvidia/version stand-in and nvidia-smi")
    kit.add_argument("--root", required=True, help="root of the kit (ROOT/dev, ROOT/proc/driver/nvidia/version, ROOT/usr/bin/nvidia-smi)")
    kit.add_argument("--uvm-major", type=int, required=True, help="major of nvidia-uvm/-tools (dynamic on real hosts)")
    kit.add_argument("--gpus", type=int, default=2)
    kit.add_argument("--driver-version", default="580.95.05")
    kit.add_argument("--dev-dir", help="directory of the nodes (default ROOT/dev)")
    kit.add_argument("--real-dev", action="store_true",
                     help="allow nodes in the real /dev: /dev itself (throwaway machines only) or a --dev-dir below it (dev[n] paths must be under /dev)")
    kit.set_defaults(func=cmd_gpu_kit)

    template = sub.add_parser("template", help="build the local debootstrap template (once; reused)")
    template.add_argument("action", choices=["build"])
    template.add_argument("--state-dir", default=".")
    template.add_argument("--output", help="tarball path (default STATE/var/lib/vz/template/cache/%s)" % DEFAULT_TEMPLATE)
    template.add_argument("--from-rootfs", help="pack this existing rootfs instead of running debootstrap")
    template.add_argument("--mirror", default="http://deb.debian.org/debian")
    template.add_argument("--force", action="store_true")
    template.set_defaults(func=cmd_template)

    pct = sub.add_parser("pct", help="pct-like access to realised containers: exec, enter, status")
    pct.add_argument("pct_command", choices=["exec", "enter", "status"])
    pct.add_argument("vmid", type=int)
    pct.add_argument("command", nargs=argparse.REMAINDER)
    pct.add_argument("--state-dir", default=os.environ.get("PVE_SIM_STATE_DIR", "."))
    pct.set_defaults(func=cmd_pct)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)
