# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim command line: serve (foreground), start/stop/status (daemon), gpu-kit, template, pct, fault."""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pve_sim import faults, releases
from pve_sim.auth import AuthStore

DEFAULT_TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
TEMPLATE_SUITE = "bookworm"
# The Debian release a template is built from, by the name PVE's template index gives it (aplinfo: debian-12-standard,
# debian-13-standard): a tarball's name says what is inside it, as on a node.
SUITES = {"12": "bookworm", "13": "trixie"}
_TEMPLATE_NAME = re.compile(r"^debian-(?P<release>\d+)-standard_[0-9][0-9.]*-\d+_amd64\.tar\.zst$")
TEMPLATE_PACKAGES = "systemd,systemd-sysv,python3,python3-apt,python3-venv,dbus,procps,iproute2,openssh-server"
# Units that wait for hardware a container does not have.
MASKED_UNITS = ("systemd-firstboot.service", "getty.target", "console-getty.service", "systemd-udevd.service", "systemd-udev-trigger.service",
                "systemd-modules-load.service", "sys-kernel-debug.mount", "systemd-remount-fs.service")
# Units started at boot (enabled here even if a package's postinst did not).
ENABLED_UNITS = (("ssh.service", "multi-user.target.wants"),)
# Removed from the rootfs before packing: apt lists and downloaded packages (half the size), and host keys (a template
# must not ship them; create makes new ones).
REMOVED_PATHS = ("var/lib/apt/lists/*_*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "etc/ssh/ssh_host_*")
# The containers reach nothing beyond this machine, so the template names no Debian mirror: an apt update would only
# fail on it. Sites give their own sources (for example a repository on a bind mount).
SOURCES_LIST = ("# pve-sim: containers reach only this machine (the node's bridge address), so no Debian mirror is listed.\n"
                "# Add a repository this machine serves, or a file: repository on a mount point, in sources.list.d/.\n")
# What makes a template: a tarball built from another recipe is stale. Bump RECIPE_REVISION when build_template
# changes what it produces in a way these fields do not show.
RECIPE_REVISION = 3


def suite_of_template(tarball):
    """The Debian suite of a template by its file name (debian-13-standard_13.1-2_amd64.tar.zst: trixie)."""
    match = _TEMPLATE_NAME.match(os.path.basename(tarball))
    if not match or match.group("release") not in SUITES:
        raise ValueError("%s: pve-sim builds templates named debian-<release>-standard_<version>_amd64.tar.zst for Debian %s"
                         % (os.path.basename(tarball), " and ".join(sorted(SUITES))))
    return SUITES[match.group("release")]


def template_recipe(suite=TEMPLATE_SUITE):
    return {"revision": RECIPE_REVISION, "suite": suite, "variant": "minbase", "include": TEMPLATE_PACKAGES.split(","),
            "sources_list": SOURCES_LIST, "masked": list(MASKED_UNITS), "enabled": [unit for unit, _target in ENABLED_UNITS], "removed": list(REMOVED_PATHS),
            "format": "tar.zst"}


def recipe_digest(recipe=None):
    """sha256 of the recipe (canonical JSON): written next to a built tarball as <tarball>.recipe."""
    return hashlib.sha256(json.dumps(recipe or template_recipe(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def recipe_path(tarball):
    return tarball + ".recipe"


def template_is_current(tarball):
    """(True, why) when the tarball exists and its .recipe names the current recipe's digest; (False, why) otherwise."""
    if not os.path.isfile(tarball):
        return False, "%s does not exist" % tarball
    try:
        with open(recipe_path(tarball), encoding="utf-8") as handle:
            recorded = json.load(handle).get("digest")
    except FileNotFoundError:
        return False, "%s has no recipe file (%s): built before recipes were recorded, or packed from a rootfs" % (
            tarball, recipe_path(tarball))
    except (OSError, ValueError, AttributeError) as error:
        return False, "%s: unreadable recipe file: %s" % (tarball, error)
    try:
        current = recipe_digest(template_recipe(suite_of_template(tarball)))
    except ValueError as error:
        return False, str(error)
    if recorded != current:
        return False, "%s was built from recipe %s, the current one is %s" % (tarball, (recorded or "?")[:12], current[:12])
    return True, "%s matches the current recipe %s" % (tarball, current[:12])


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
    from pve_sim import network  # pylint: disable=import-outside-toplevel
    from pve_sim.node import Node  # pylint: disable=import-outside-toplevel
    from pve_sim.runtime import LxcRuntime, NullRuntime  # pylint: disable=import-outside-toplevel
    from pve_sim.server import ApiServer, ensure_certificate  # pylint: disable=import-outside-toplevel

    state_dir = os.path.abspath(args.state_dir)
    if not args.no_lxc and not shutil.which("lxc-start"):
        sys.stderr.write("pve-sim: lxc-start not found; install lxc or run with --no-lxc\n")
        return 2
    try:
        bridges = network.validate_bridge_args(args.bridge, state_dir)
    except network.BridgeError as error:
        sys.stderr.write("pve-sim: %s (nothing created)\n" % error)
        return 2
    os.makedirs(state_dir, exist_ok=True)
    if bridges:
        try:
            network.ensure_bridges(state_dir, bridges, log=lambda text: print(text, flush=True))
        except (network.BridgeError, OSError) as error:
            sys.stderr.write("pve-sim: %s\n" % error)
            return 2
    AuthStore.initialise(state_dir, args.root_password)
    faults.clear(state_dir)  # fault rules live as long as the server that reads them
    _seed_templates(state_dir, args.template_cache or os.environ.get("PVE_SIM_TEMPLATE_CACHE"))
    try:
        release = releases.release(args.release)
        layout = releases.check_layout(release, args.cgroup_layout)
    except releases.ReleaseError as error:
        sys.stderr.write("pve-sim: %s\n" % error)
        return 2
    runtime = NullRuntime(state_dir) if args.no_lxc else LxcRuntime(state_dir, args.gpu_kit and os.path.abspath(args.gpu_kit),
                                                                    releases.node_cgroup_version(layout))
    node = Node(state_dir, args.node, runtime, release)
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
    from pve_sim import network  # pylint: disable=import-outside-toplevel

    try:
        releases.check_layout(releases.release(args.release), args.cgroup_layout)
    except releases.ReleaseError as error:
        sys.stderr.write("pve-sim: %s (nothing started)\n" % error)
        return 2
    state_dir = os.path.abspath(args.state_dir)
    if _read_pid(state_dir):
        print("pve-sim: already running (pid %d)" % _read_pid(state_dir))
        return 0
    try:
        network.validate_bridge_args(args.bridge, state_dir)  # refuse here, before a server is started
    except network.BridgeError as error:
        sys.stderr.write("pve-sim: %s (nothing created)\n" % error)
        return 2
    os.makedirs(state_dir, exist_ok=True)
    command = [sys.executable, "-m", "pve_sim", "serve", "--state-dir", state_dir, "--listen", args.listen, "--node", args.node,
               "--release", args.release, "--cgroup-layout", args.cgroup_layout, "--auth-failure-delay", str(args.auth_failure_delay)]
    if args.no_lxc:
        command.append("--no-lxc")
    if args.template_cache:
        command += ["--template-cache", args.template_cache]
    if args.root_password:
        command += ["--root-password", args.root_password]
    for bridge in args.bridge or ():
        command += ["--bridge", bridge]
    if args.gpu_kit:
        command += ["--gpu-kit", os.path.abspath(args.gpu_kit)]
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
    from pve_sim import network  # pylint: disable=import-outside-toplevel

    state_dir = os.path.abspath(args.state_dir)
    status = _stop_server(state_dir, args.wait)
    # After the server (even one that is not running): only the bridges this state dir's pve-sim created.
    try:
        network.remove_created_bridges(state_dir)
    except network.BridgeError as error:
        sys.stderr.write("pve-sim: %s\n" % error)
        return 1
    return status


def _stop_server(state_dir, wait):
    pid = _read_pid(state_dir)
    if not pid:
        print("pve-sim: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + wait
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
    from pve_sim.gpu_kit import create_kit, remove_kit, write_node_programs  # pylint: disable=import-outside-toplevel

    if args.remove:
        print(json.dumps({"removed": remove_kit(os.path.abspath(args.root))}, indent=2))
        return 0

    dev_dir = args.dev_dir
    if args.real_dev and not dev_dir:
        dev_dir = "/dev"
    real = dev_dir and (os.path.realpath(dev_dir) + "/").startswith("/dev/")
    if real and not args.real_dev:
        sys.stderr.write("pve-sim: refusing to create nodes in the real /dev without --real-dev\n")
        return 2
    if real and os.path.realpath(dev_dir) == "/dev" and os.path.exists("/proc/driver/nvidia/version"):
        # The kit replaces /dev/nvidia* (and removes surplus ones): never on a machine with a real NVIDIA driver.
        sys.stderr.write("pve-sim: this machine has an NVIDIA driver loaded (/proc/driver/nvidia/version); the GPU kit would "
                         "replace its /dev/nvidia* nodes: give the kit a --dev-dir of its own below /dev\n")
        return 2
    if args.uvm_major is None:
        sys.stderr.write("pve-sim: gpu-kit needs --uvm-major\n")
        return 2
    from pve_sim.gpu_host import CLEARED_BY_MODPROBE, GpuFaultError  # pylint: disable=import-outside-toplevel
    from pve_sim.gpu_kit import read_record  # pylint: disable=import-outside-toplevel
    hardware = {"topology": args.topology, "iommu": args.iommu, "kernel": args.kernel, "faults": args.fault or []}
    if args.modprobe:
        # What nvidia-modprobe -u -c0 does to a node: the same hardware and faults, nvidia-uvm loaded and its nodes made.
        record = read_record(os.path.abspath(args.root))
        hardware.update((key, value) for key, value in (record.get("description") or {}).items()
                        if key in ("topology", "iommu", "kernel"))
        hardware["faults"] = [fault for fault in record.get("faults") or [] if fault["name"] not in CLEARED_BY_MODPROBE]
    try:
        result = create_kit(os.path.abspath(args.root), args.uvm_major, args.gpus, args.driver_version,
                            dev_dir and os.path.abspath(dev_dir), **hardware)
    except (GpuFaultError, ValueError) as error:
        sys.stderr.write("pve-sim: gpu-kit: %s\n" % error)
        return 2
    if args.node_root:
        result["node_programs"] = write_node_programs(os.path.abspath(args.node_root), result["root"], args.uvm_major, args.gpus,
                                                      args.driver_version, result["dev_dir"], args.real_dev)
    print(json.dumps(result, indent=2))
    return 0


def cmd_gpu_fault(args):
    from pve_sim import gpu_kit  # pylint: disable=import-outside-toplevel
    from pve_sim.gpu_host import GpuFaultError  # pylint: disable=import-outside-toplevel

    root = os.path.abspath(args.root)
    if not gpu_kit.read_record(root).get("description"):
        sys.stderr.write("pve-sim: gpu-fault: no GPU kit at %s (pve-sim gpu-kit --root %s ... first)\n" % (root, root))
        return 2
    try:
        if args.action == "add":
            if not args.faults:
                sys.stderr.write("pve-sim: gpu-fault add needs at least one fault (NAME or NAME=VALUE)\n")
                return 2
            gpu_kit.add_faults(root, args.faults)
        elif args.action == "clear":
            gpu_kit.clear_faults(root, [name.partition("=")[0] for name in args.faults])
    except GpuFaultError as error:
        sys.stderr.write("pve-sim: gpu-fault: %s\n" % error)
        return 2
    print(json.dumps({"faults": gpu_kit.read_record(root).get("faults") or []}, indent=2))
    return 0


def finish_rootfs(rootfs):
    """The recipe's steps after debootstrap: mask hardware units, enable sshd, remove apt lists and host keys."""
    with open(os.path.join(rootfs, "etc", "apt", "sources.list"), "w", encoding="utf-8") as handle:
        handle.write(SOURCES_LIST)
    for unit in MASKED_UNITS:
        link = os.path.join(rootfs, "etc", "systemd", "system", unit)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink("/dev/null", link)
    for unit, target in ENABLED_UNITS:
        wants = os.path.join(rootfs, "etc", "systemd", "system", target)
        os.makedirs(wants, exist_ok=True)
        if not os.path.lexists(os.path.join(wants, unit)):
            os.symlink("/lib/systemd/system/" + unit, os.path.join(wants, unit))
    for pattern in REMOVED_PATHS:
        for path in glob.glob(os.path.join(rootfs, pattern)):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


def build_template(output, from_rootfs=None, mirror="http://deb.debian.org/debian", timeout=900):
    """debootstrap --variant=minbase (systemd, python3, sshd) packed as a zstd tarball, PVE's vztmpl format, with the
    recipe's digest in <output>.recipe. A tarball packed --from-rootfs gets no recipe file (it is not the recipe's)."""
    recipe = template_recipe(suite_of_template(output))
    # The root file system is made in the temporary directory, never beside the output: debootstrap mounts /proc in it
    # while it runs, and the output's directory is often inside a checkout (.build/pve-sim-cache), whose tree other
    # programs walk meanwhile (ansible-galaxy collection build failed on rootfs/proc/<pid>/net, EINVAL). Only the
    # packed tarball goes there, under a temporary name, then replaces the output in one rename.
    work = tempfile.mkdtemp(prefix="pve-sim-template.")
    handle, temporary = tempfile.mkstemp(prefix=".pve-sim-template.", suffix=".partial", dir=os.path.dirname(os.path.abspath(output)))
    os.close(handle)
    try:
        rootfs = from_rootfs
        if rootfs is None:
            rootfs = os.path.join(work, "rootfs")
            subprocess.run(["debootstrap", "--variant=minbase", "--include=" + TEMPLATE_PACKAGES, recipe["suite"], rootfs, mirror],
                           check=True, capture_output=True, timeout=timeout)
            finish_rootfs(rootfs)
        with subprocess.Popen(["tar", "-C", rootfs, "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE) as tar:
            subprocess.run(["zstd", "-q", "-f", "-T0", "-o", temporary], stdin=tar.stdout, check=True, timeout=timeout)
        if os.path.lexists(recipe_path(output)):
            os.unlink(recipe_path(output))
        os.replace(temporary, output)
        if from_rootfs is None:
            with open(recipe_path(output) + ".tmp", "w", encoding="utf-8") as handle:
                json.dump({"digest": recipe_digest(recipe), "recipe": recipe}, handle, indent=1, sort_keys=True)
            os.replace(recipe_path(output) + ".tmp", recipe_path(output))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.lexists(temporary):
            os.unlink(temporary)
    return output


def cmd_template(args):
    output = os.path.abspath(args.output or os.path.join(_template_dir(os.path.abspath(args.state_dir)), DEFAULT_TEMPLATE))
    try:
        suite_of_template(output)
    except ValueError as error:
        print("pve-sim: %s" % error, file=sys.stderr)
        return 2
    current, why = template_is_current(output)
    if args.action == "check":
        print("pve-sim: template %s: %s" % ("current" if current else "stale", why))
        return 0 if current else 1
    if not args.force and not args.from_rootfs and current:
        print(output)
        return 0
    if not args.from_rootfs and os.path.exists(output):
        print("pve-sim: rebuilding: %s" % why, file=sys.stderr)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    print(build_template(output, args.from_rootfs, args.mirror))
    return 0


def cmd_release(args):
    chosen = releases.release(args.name)
    print(getattr(chosen, args.field) if args.field else json.dumps(chosen._asdict(), sort_keys=True))
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


def cmd_fault(args):
    state_dir = os.path.abspath(args.state_dir)
    if args.action == "clear":
        faults.clear(state_dir)
        return 0
    if args.action == "list":
        print(json.dumps(faults.rules(state_dir), indent=1, sort_keys=True))
        return 0
    rule = {"count": args.count}
    if args.task:
        rule.update(task=args.task, hang=args.hang, vmid=args.vmid)
        if args.log:
            rule["log"] = args.log
    else:
        rule.update(path=args.path, method=args.method, status=args.status, message=args.message, reset=args.reset)
    try:
        rule = faults.add(state_dir, dict((key, value) for key, value in rule.items() if value is not None))
    except faults.FaultError as error:
        sys.stderr.write("pve-sim fault: %s\n" % error)
        return 2
    print(json.dumps(rule, sort_keys=True))
    return 0


def gpu_host_choices(name):
    from pve_sim import gpu_host  # pylint: disable=import-outside-toplevel
    return getattr(gpu_host, name)


def build_parser():
    parser = argparse.ArgumentParser(prog="pve-sim", description="A Proxmox VE node simulator for tests and sandboxes.")
    sub = parser.add_subparsers(dest="command", required=True)

    def server_options(command):
        command.add_argument("--state-dir", required=True, help="directory of the node's state (configs, templates, users, tasks)")
        command.add_argument("--listen", default="127.0.0.1:8006", help="HOST:PORT (default 127.0.0.1:8006; port 0 picks a free one)")
        command.add_argument("--node", default="pve", help="node name (default pve)")
        command.add_argument("--release", default=releases.DEFAULT_RELEASE, choices=sorted(releases.RELEASES),
                             help="the Proxmox VE major release the node runs (default %s): its version, kernel, create defaults "
                                  "and cgroup layouts" % releases.DEFAULT_RELEASE)
        command.add_argument("--cgroup-layout", default="unified", choices=["unified", "hybrid"],
                             help="how the node mounts its cgroups (default unified, pure v2; hybrid only on release 8): LXC on "
                                  "the node ignores the containers' raw settings of the other version")
        command.add_argument("--no-lxc", action="store_true", help="keep containers on paper: no LXC (fast unit tests)")
        command.add_argument("--template-cache", help="directory of vztmpl tarballs to link into storage 'local' (or PVE_SIM_TEMPLATE_CACHE)")
        command.add_argument("--root-password", help="password of root@pam on first start (default: generated into STATE/root-password)")
        command.add_argument("--auth-failure-delay", type=float, default=0.0, help="seconds to delay 401 answers (a real node waits 3)")
        command.add_argument("--bridge", action="append", metavar="NAME=GATEWAY/PREFIX",
                             help="the node's bridge (a vmbr), e.g. llmsbx0=10.213.0.1/24: created with that address unless it exists, "
                                  "removed by 'stop' if pve-sim created it; private networks only, no forwarding, no NAT (repeatable)")
        command.add_argument("--gpu-kit", metavar="DIR",
                             help="the node's GPU kit (gpu-kit --root DIR): every container started sees its driver state, as a "
                                  "real container sees the host's /proc/driver/nvidia (kit proc files read-only at %s, its GPU "
                                  "memory at %s)" % ("/srv/host-proc-driver-nvidia", "/srv/host-gpu-memory-ledger"))

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
    kit.add_argument("--uvm-major", type=int, help="major of nvidia-uvm/-tools (dynamic on real hosts); required unless --remove")
    kit.add_argument("--remove", action="store_true", help="remove the nodes this kit made (those still the same devices) and the kit")
    kit.add_argument("--gpus", type=int, default=2)
    kit.add_argument("--driver-version", default="580.95.05")
    kit.add_argument("--dev-dir", help="directory of the nodes (default ROOT/dev)")
    kit.add_argument("--real-dev", action="store_true",
                     help="allow nodes in the real /dev: /dev itself (throwaway machines only) or a --dev-dir below it (dev[n] paths must be under /dev)")
    kit.add_argument("--node-root",
                     help="also write stand-ins for the node's nvidia-modprobe (recreates these nodes; uvm major in NODE_ROOT/uvm-major) "
                          "and udevadm under NODE_ROOT/usr/bin, logging their calls to NODE_ROOT/<program>.log")
    kit.add_argument("--topology", choices=gpu_host_choices("TOPOLOGIES"), default="switch",
                     help="how the GPUs are connected: switch (one PCIe switch, PIX), root-ports (a root port each, PHB), "
                          "host-bridges (a host bridge each, NODE), sockets (half on each of two sockets, SYS across), "
                          "nvlink (root ports, and an NVLink bridge: NV4); default switch")
    kit.add_argument("--iommu", choices=gpu_host_choices("IOMMU_MODES"), default="passthrough",
                     help="IOMMU default domain: passthrough (iommu=pt, groups of type identity), translated (DMA-FQ), "
                          "off (no groups); default passthrough")
    kit.add_argument("--kernel", default="6.14.8-2-pve", help="the running kernel (the NVIDIA module is built for it)")
    kit.add_argument("--fault", action="append", metavar="NAME[=VALUE]",
                     help="a GPU fault switch (repeatable; see pve-sim gpu-fault and simulators/pve_sim/README.md)")
    kit.add_argument("--modprobe", action="store_true",
                     help="what nvidia-modprobe -u -c0 does: keep the kit's hardware and faults, load nvidia-uvm and make "
                          "its nodes (clears the rebooted and uvm-nodes-missing faults)")
    kit.set_defaults(func=cmd_gpu_kit)

    gpu_fault = sub.add_parser("gpu-fault", help="GPU fault switches of a GPU kit (kept in ROOT/kit.json; the kit's files "
                                                 "are made again at once)")
    gpu_fault.add_argument("action", choices=["add", "list", "clear"])
    gpu_fault.add_argument("faults", nargs="*", metavar="NAME[=VALUE]",
                           help="add: the faults to switch on; clear: the names to switch off (all without names)")
    gpu_fault.add_argument("--root", required=True, help="the kit's root (gpu-kit --root)")
    gpu_fault.set_defaults(func=cmd_gpu_fault)

    template = sub.add_parser("template", help="build the local debootstrap template (reused while its recipe is current), or check it")
    template.add_argument("action", choices=["build", "check"],
                          help="build: unless the tarball exists and matches the current recipe (or --force); "
                               "check: exit 0 when it does, 1 otherwise")
    template.add_argument("--state-dir", default=".")
    template.add_argument("--output", help="tarball path (default STATE/var/lib/vz/template/cache/%s)" % DEFAULT_TEMPLATE)
    template.add_argument("--from-rootfs", help="pack this existing rootfs instead of running debootstrap")
    template.add_argument("--mirror", default="http://deb.debian.org/debian")
    template.add_argument("--force", action="store_true", help="build even when the tarball is current")
    template.set_defaults(func=cmd_template)

    release = sub.add_parser("release", help="what a node of a Proxmox VE release prints (JSON, or one --field): its version, "
                                             "kernel and defaults, for scripts that set up the node's other stand-ins")
    release.add_argument("name", choices=sorted(releases.RELEASES))
    release.add_argument("--field", choices=sorted(releases.Release._fields))
    release.set_defaults(func=cmd_release)

    pct = sub.add_parser("pct", help="pct-like access to realised containers: exec, enter, status")
    pct.add_argument("pct_command", choices=["exec", "enter", "status"])
    pct.add_argument("vmid", type=int)
    pct.add_argument("command", nargs=argparse.REMAINDER)
    pct.add_argument("--state-dir", default=os.environ.get("PVE_SIM_STATE_DIR", "."))
    pct.set_defaults(func=cmd_pct)

    fault = sub.add_parser("fault", help="fault switches for tests: 5xx answers, reset connections, tasks that never finish "
                                         "(rules in STATE/%s, read by the running server)" % faults.FILE_NAME)
    fault.add_argument("action", choices=["add", "list", "clear"])
    fault.add_argument("--state-dir", default=os.environ.get("PVE_SIM_STATE_DIR", "."))
    fault.add_argument("--count", type=int, default=1, help="how many matching requests or tasks the rule acts on (default 1)")
    fault.add_argument("--path", help="regular expression for the whole path below /api2/json, e.g. /nodes/pve/lxc/120/config")
    fault.add_argument("--method", help="GET, POST, PUT or DELETE (default: any)")
    fault.add_argument("--status", type=int, help="answer with this status (500-599; 595-599 without a body, as pveproxy sends them)")
    fault.add_argument("--message", help="the status line's text (PVE's message; default: the status's reason)")
    fault.add_argument("--reset", choices=["before", "after"], help="reset the connection before or after the request is handled")
    fault.add_argument("--task", choices=faults.TASK_TYPES, help="a task rule: new tasks of this type")
    fault.add_argument("--vmid", type=int, help="with --task: only tasks of this container")
    fault.add_argument("--hang", action="store_true", help="with --task: the task never finishes")
    fault.add_argument("--log", action="append", help="with --task: a log line of the task that never finishes (repeatable)")
    fault.set_defaults(func=cmd_fault)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)
