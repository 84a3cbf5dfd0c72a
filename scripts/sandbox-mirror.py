#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the sandbox's local mirror: what a real lab serves from an NFS/HTTP mirror, made of the stand-ins.

Usage: scripts/sandbox-mirror.py OUTDIR [--driver-version 580.95.05] [--cuda-version 13.0]
       [--proc-version-path /proc/driver/nvidia/version] [--ledger-dir /srv/host-gpu-memory-ledger]
       [--mount-point /srv/llmops-mirror]
       [--router-wheels DIR] [--hub-wheels DIR]

OUTDIR/nvidia/NVIDIA-Linux-x86_64-<driver>.run   stand-in installer (simulators/standins/nvidia_installer)
OUTDIR/cuda/                                     flat apt repository (simulators/standins/cuda_repo), unsigned
OUTDIR/wheels/                                   sglang-sim and the stand-in sglang wheels (pip wheel --no-deps):
  sglang_sim-0.1.0-py3-none-any.whl                the SGLang simulator (simulators/sglang_sim)
  sglang-0.5.23+standin-py3-none-any.whl           the stand-in sglang (simulators/standins/sglang_standin)
  sglang-0.5.23.post1+standin-py3-none-any.whl     the same source as a release that cannot start (STANDIN_FAULT
                                                   "oom"), for the package-rollback test; sglang==0.5.23 does not
                                                   match it (PEP 440), so a pinned install never gets it
  with --hub-wheels: the real huggingface_hub       the stand-in sglang depends on it as the real one does (its `hf`
  and its dependencies, copied from DIR            downloads the model); scripts/hub-wheels.sh downloads them from PyPI
OUTDIR/models/Qwen3.6-27B/                       pre-staged model directory (simulators/standins/models)
OUTDIR/router-wheels/                            with --router-wheels: the real router (smg) and its dependencies,
                                                 copied from DIR (scripts/router-wheels.sh downloads them from PyPI)
OUTDIR/MANIFEST.json                             every file's sha256 and size, the options and the inputs' digest

The containers see OUTDIR read-only at --mount-point, which is baked into the cuda-keyring's sources list, and the
installer's nvidia-smi reads the kernel module version (and the GPUs beside it) from --proc-version-path and the
node's GPU memory from --ledger-dir. Runs on the controller (Debian 12:
dpkg-deb) with the project's .venv first on PATH, or as .venv/bin/python scripts/sandbox-mirror.py: pip is the running
interpreter's and builds with isolation (setuptools comes from the package index). A run whose inputs (the stand-in
sources, this script, the options) have the digest recorded in an intact OUTDIR/MANIFEST.json does nothing and says so.
Otherwise the mirror is built in OUTDIR.tmp and renamed into place (rebuild it while no container has it mounted); a
failure leaves OUTDIR as it was and names the step.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDINS = os.path.join("simulators", "standins")
INSTALLER_GENERATOR = os.path.join(STANDINS, "nvidia_installer", "make-installer.py")
# The driver stand-in the installer puts into the containers.
DRIVER_STANDIN = os.path.join(STANDINS, "nvidia_driver", "nvidia_standin.py")
REPO_BUILDER = os.path.join(STANDINS, "cuda_repo", "build-standin-repo.py")
SGLANG_STANDIN = os.path.join(STANDINS, "sglang_standin")
WHEEL_SOURCES = [os.path.join("simulators", "sglang_sim"), SGLANG_STANDIN]
# Further releases of the stand-in sglang: copies of its source with another version and description and a fault of
# the simulator in STANDIN_FAULT (sglang-sim applies it when SGLANG_SIM_FAULT is unset).
FAULTY_SGLANG_RELEASES = [
    {"version": "0.5.23.post1+standin", "fault": "oom",
     "description": "stand-in of a release that cannot start on the sandbox's GPUs (the simulator's startup OOM); "
                    "for the package-rollback test"},
]
MODEL = "Qwen3.6-27B"
MODEL_SOURCE = os.path.join(STANDINS, "models", MODEL)
# Everything whose change changes the mirror (this script is added by input_files()).
INPUT_PATHS = [INSTALLER_GENERATOR, DRIVER_STANDIN, REPO_BUILDER, MODEL_SOURCE] + WHEEL_SOURCES
# Build outputs pip/setuptools leave in source trees; they are not inputs.
IGNORED_DIRS = {"build", "dist", "__pycache__"}
IGNORED_SUFFIXES = (".pyc", ".egg-info")
MANIFEST = "MANIFEST.json"
# NVIDIA's other toolkit releases the stand-in repository offers next to the requested one (as NVIDIA's does).
OTHER_TOOLKITS = ["13.0", "12.8"]
# Fixed file times in the .debs and wheels, and Release's Date: the same inputs give the same bytes.
SOURCE_DATE_EPOCH = "1764000000"


class StepFailed(Exception):
    """A build step failed: `step` names it, str() says why."""

    def __init__(self, step, detail):
        super().__init__(detail)
        self.step = step


def ignored(name):
    return name in IGNORED_DIRS or name.endswith(IGNORED_SUFFIXES)


def input_files(root, paths, script):
    """(relative path, absolute path) of every input file, sorted; build outputs under the paths are left out."""
    found = {os.path.basename(script): script}
    for path in paths:
        absolute = os.path.join(root, path)
        if os.path.isfile(absolute):
            found[path] = absolute
            continue
        if not os.path.isdir(absolute):
            raise FileNotFoundError(f"input {path} does not exist under {root}")
        for directory, dirs, files in os.walk(absolute):
            dirs[:] = sorted(d for d in dirs if not ignored(d))
            for name in files:
                if not ignored(name):
                    full = os.path.join(directory, name)
                    found[os.path.relpath(full, root)] = full
    return sorted(found.items())


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_digest(files, options):
    """sha256 over the inputs' names and contents and the options: equal digests build equal mirrors."""
    digest = hashlib.sha256()
    digest.update(json.dumps(options, sort_keys=True).encode())
    for relative, absolute in files:
        digest.update(f"\0{relative}\0{sha256_file(absolute)}".encode())
    return digest.hexdigest()


def build_manifest(outdir, digest, options):
    """The manifest of a built mirror: every file but the manifest, with its sha256 and size."""
    files = {}
    for directory, dirs, names in os.walk(outdir):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, outdir)
            if relative != MANIFEST:
                files[relative] = {"sha256": sha256_file(path), "size": os.path.getsize(path)}
    return {"input_digest": digest, "options": options, "files": files}


def read_manifest(outdir):
    """The mirror's manifest, or None when there is none or it does not parse."""
    try:
        with open(os.path.join(outdir, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def up_to_date(outdir, digest):
    """Why OUTDIR must be (re)built, or None when its manifest records `digest` and every file matches it."""
    manifest = read_manifest(outdir)
    if manifest is None:
        return f"no readable {MANIFEST}"
    if manifest.get("input_digest") != digest:
        return "the inputs changed"
    recorded = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    current = build_manifest(outdir, digest, manifest.get("options"))["files"]
    differing = sorted(name for name in set(current) | set(recorded) if current.get(name) != recorded.get(name))
    if differing:
        return "files differ from the manifest: " + ", ".join(differing[:5]) + (" ..." if len(differing) > 5 else "")
    return None


def expected_layout(options):
    """Paths (shell globs in the file name) that a complete mirror holds."""
    cuda_package = f"cuda-toolkit-{options['cuda_version'].replace('.', '-')}"
    return [
        f"nvidia/NVIDIA-Linux-x86_64-{options['driver_version']}.run",
        "cuda/Packages",
        "cuda/Release",
        "cuda/cuda-keyring_1.1-1_all.deb",
        f"cuda/{cuda_package}_*_amd64.deb",
        "wheels/sglang_sim-0.1.0-py3-none-any.whl",
        "wheels/sglang-0.5.23+standin-py3-none-any.whl",
    ] + [f"wheels/sglang-{release['version']}-py3-none-any.whl" for release in FAULTY_SGLANG_RELEASES] + [
        f"models/{MODEL}/config.json",
        f"models/{MODEL}/.cache/huggingface/download/config.json.metadata",
    ] + (["router-wheels/*.whl"] if options.get("router_wheels") else []) + (
        ["wheels/huggingface_hub-*.whl"] if options.get("hub_wheels") else [])


def missing_from_layout(outdir, options):
    missing = []
    for path in expected_layout(options):
        directory, pattern = os.path.split(os.path.join(outdir, path))
        names = os.listdir(directory) if os.path.isdir(directory) else []
        if not any(fnmatch.fnmatchcase(name, pattern) and os.path.isfile(os.path.join(directory, name)) for name in names):
            missing.append(path)
    return missing


def run(step, argv, env=None):
    """Run a command of a step; its failure is the step's, with the command's last words."""
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, env=env, cwd=ROOT)
    except OSError as error:
        raise StepFailed(step, f"{argv[0]}: {error}") from error
    except subprocess.CalledProcessError as error:
        tail = (error.stderr or error.stdout or "").strip().splitlines()[-15:]
        raise StepFailed(step, f"{' '.join(argv[:5])} ... exited {error.returncode}: " + " | ".join(tail)) from error


def build_installer(tmp, options, env):
    out = os.path.join(tmp, "nvidia", f"NVIDIA-Linux-x86_64-{options['driver_version']}.run")
    run("build the NVIDIA installer stand-in",
        [sys.executable, os.path.join(ROOT, INSTALLER_GENERATOR), "--version", options["driver_version"], "--out", out,
         "--proc-version-path", options["proc_version_path"], "--ledger-dir", options["ledger_dir"]], env)


def build_cuda_repo(tmp, options, env):
    toolkits = [options["cuda_version"]] + [release for release in OTHER_TOOLKITS if release != options["cuda_version"]]
    argv = [sys.executable, os.path.join(ROOT, REPO_BUILDER), os.path.join(tmp, "cuda"),
            "--repo-url", "file://" + options["mount_point"].rstrip("/") + "/cuda/", "--driver-version", options["driver_version"]]
    for release in toolkits:
        argv += ["--toolkit", release]
    run("build the CUDA apt repository stand-in", argv, env)


def rewrite_line(path, pattern, line):
    """Replace the one line of the file that matches `pattern` (a ValueError when not exactly one does)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    text, count = re.subn(pattern, lambda _match: line, text, flags=re.M)
    if count != 1:
        raise ValueError(f"{path}: expected one line matching {pattern!r}, found {count}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def make_release_source(standin, release):
    """Turn a copy of the stand-in sglang's source into `release`: its version, description and STANDIN_FAULT."""
    pyproject = os.path.join(standin, "pyproject.toml")
    package = os.path.join(standin, "sglang", "__init__.py")
    rewrite_line(pyproject, r'^version = ".*"$', f'version = "{release["version"]}"')
    rewrite_line(pyproject, r'^description = ".*"$', f'description = "{release["description"]}"')
    rewrite_line(package, r'^__version__ = ".*"$', f'__version__ = "{release["version"]}"')
    rewrite_line(package, r'^STANDIN_FAULT = ".*"$', f'STANDIN_FAULT = "{release["fault"]}"')


def copy_source(source, copy):
    shutil.copytree(os.path.join(ROOT, source), copy, ignore=lambda _dir, names: [n for n in names if ignored(n)])
    return copy


def build_wheels(tmp, env):
    # Build from copies: setuptools writes build/ and *.egg-info into the tree it builds.
    with tempfile.TemporaryDirectory(prefix="sandbox-mirror-src.") as sources:
        copies = [copy_source(source, os.path.join(sources, os.path.basename(source))) for source in WHEEL_SOURCES]
        # One pip run per release of the stand-in sglang: pip refuses two versions of one project in one run.
        batches = [copies]
        for release in FAULTY_SGLANG_RELEASES:
            copy = copy_source(SGLANG_STANDIN, os.path.join(sources, f"sglang-{release['version']}"))
            make_release_source(copy, release)
            batches.append([copy])
        for batch in batches:
            run("build the wheels", [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                                     "--no-deps", "--wheel-dir", os.path.join(tmp, "wheels")] + batch, env)


def copy_wheels(tmp, source, subdir):
    """Downloaded wheels into OUTDIR/subdir (only *.whl files: the download directory's bookkeeping stays behind)."""
    os.makedirs(os.path.join(tmp, subdir), exist_ok=True)
    for name in sorted(os.listdir(source)):
        if name.endswith(".whl"):
            shutil.copyfile(os.path.join(source, name), os.path.join(tmp, subdir, name))


def wheel_inputs(source, subdir):
    """(name in the digest, path) of downloaded wheels served from OUTDIR/subdir, for the input digest."""
    if not source:
        return []
    return [(f"{subdir}/{name}", os.path.join(source, name)) for name in sorted(os.listdir(source)) if name.endswith(".whl")]


def stage_model(tmp):
    shutil.copytree(os.path.join(ROOT, MODEL_SOURCE), os.path.join(tmp, "models", MODEL))


def make_world_readable(tmp):
    """Directories and executables 0755, other files 0644: the containers read the mirror as any user."""
    for directory, _dirs, names in os.walk(tmp):
        os.chmod(directory, 0o755)
        for name in names:
            path = os.path.join(directory, name)
            os.chmod(path, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def replace_dir(tmp, outdir):
    """Put the built tree in place of OUTDIR: two renames, the old tree is removed only after the new one is there."""
    old = outdir + ".old"
    remove(old)
    if os.path.lexists(outdir):
        os.rename(outdir, old)
    os.rename(tmp, outdir)
    remove(old)


def build(outdir, options, digest, router_wheels=None, hub_wheels=None):
    """Build the mirror in OUTDIR.tmp and rename it to OUTDIR; StepFailed names the step that failed."""
    tmp = outdir + ".tmp"
    env = dict(os.environ, SOURCE_DATE_EPOCH=os.environ.get("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH), PIP_NO_INPUT="1")
    steps = [
        ("prepare the build directory", lambda: (remove(tmp), os.makedirs(tmp))),
        ("build the NVIDIA installer stand-in", lambda: build_installer(tmp, options, env)),
        ("build the CUDA apt repository stand-in", lambda: build_cuda_repo(tmp, options, env)),
        ("build the wheels", lambda: build_wheels(tmp, env)),
        ("stage the model directory", lambda: stage_model(tmp)),
        ("copy the huggingface_hub wheels", lambda: copy_wheels(tmp, hub_wheels, "wheels") if hub_wheels else None),
        ("copy the router wheels", lambda: copy_wheels(tmp, router_wheels, "router-wheels") if router_wheels else None),
        ("check the layout", lambda: check_layout(tmp, options)),
        ("make the mirror world-readable", lambda: make_world_readable(tmp)),
        ("write the manifest", lambda: write_manifest(tmp, digest, options)),
        ("put the mirror in place", lambda: replace_dir(tmp, outdir)),
    ]
    for name, action in steps:
        try:
            action()
        except StepFailed:
            raise
        except (OSError, ValueError) as error:
            raise StepFailed(name, f"{type(error).__name__}: {error}") from error


def check_layout(tmp, options):
    missing = missing_from_layout(tmp, options)
    if missing:
        raise StepFailed("check the layout", "missing " + ", ".join(missing))


def write_manifest(tmp, digest, options):
    manifest = build_manifest(tmp, digest, options)
    path = os.path.join(tmp, MANIFEST)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.chmod(path, 0o644)


@contextlib.contextmanager
def locked(directory):
    """One build at a time per parent directory (a second run waits, then finds the mirror up to date)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="sandbox-mirror.py", description=__doc__.split("\n", 1)[0])
    parser.add_argument("outdir", metavar="OUTDIR")
    parser.add_argument("--driver-version", default="580.95.05", help="host kernel module version the installer matches")
    parser.add_argument("--cuda-version", default="13.0", help="toolkit release (MAJOR.MINOR) the repository must offer")
    parser.add_argument("--proc-version-path", default="/proc/driver/nvidia/version",
                        help="kernel module version file inside the containers (nvidia_userspace_proc_version_path)")
    parser.add_argument("--ledger-dir", default="/srv/host-gpu-memory-ledger",
                        help="the node's GPU memory ledger inside the containers (where pve-sim shows the GPU kit's)")
    parser.add_argument("--mount-point", default="/srv/llmops-mirror", help="where the containers see OUTDIR")
    parser.add_argument("--router-wheels", metavar="DIR", help="directory of the router's wheels to serve")
    parser.add_argument("--hub-wheels", metavar="DIR",
                        help="directory of the huggingface_hub wheels (and its dependencies) to serve beside sglang's")
    args = parser.parse_args(argv)
    if not re.match(r"^[0-9]+\.[0-9]+$", args.cuda_version):
        parser.error(f"--cuda-version must be MAJOR.MINOR like 13.0, got {args.cuda_version!r}")
    if not os.path.isabs(args.mount_point):
        parser.error(f"--mount-point must be absolute, got {args.mount_point!r}")
    for option, value in (("--router-wheels", args.router_wheels), ("--hub-wheels", args.hub_wheels)):
        if value and not os.path.isdir(value):
            parser.error(f"{option} must be a directory, got {value!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    outdir = os.path.abspath(args.outdir)
    options = {"driver_version": args.driver_version, "cuda_version": args.cuda_version,
               "proc_version_path": args.proc_version_path, "ledger_dir": args.ledger_dir, "mount_point": args.mount_point,
               "router_wheels": bool(args.router_wheels), "hub_wheels": bool(args.hub_wheels)}
    try:
        digest = input_digest(input_files(ROOT, INPUT_PATHS, os.path.abspath(__file__))
                              + wheel_inputs(args.router_wheels, "router-wheels") + wheel_inputs(args.hub_wheels, "wheels"),
                              options)
    except OSError as error:
        print(f"sandbox-mirror: step 'read the inputs' failed: {error}", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(outdir), exist_ok=True)
    with locked(os.path.dirname(outdir)):
        reason = up_to_date(outdir, digest)
        if reason is None:
            print(f"sandbox-mirror: {outdir} is up to date (inputs {digest[:12]}); nothing to do")
            return 0
        print(f"sandbox-mirror: building {outdir} ({reason})")
        try:
            build(outdir, options, digest, args.router_wheels, args.hub_wheels)
        except StepFailed as error:
            print(f"sandbox-mirror: step '{error.step}' failed: {error}\n"
                  f"sandbox-mirror: {outdir} was left as it was; the partial build is in {outdir}.tmp", file=sys.stderr)
            return 1
    print(f"sandbox-mirror: built {outdir} (inputs {digest[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
