# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build a flat apt repository of STAND-IN packages carrying NVIDIA's real package names, with dpkg-deb, and index
it (Packages and Release, as dpkg-scanpackages and apt-ftparchive write them) with only the standard library.

Usage: python3 build-standin-repo.py REPO_DIR [--repo-url URL] [--toolkit 13.0 [--toolkit 12.8 ...]] [--driver-version V]

Packages: cuda-keyring (a stand-in key file and the sources list NVIDIA's keyring ships, pointing at --repo-url,
default file://<REPO_DIR>/), cuda-toolkit-<X-Y> for every --toolkit X.Y (default 13.0 and 12.8; /usr/local/cuda-X.Y/bin/nvcc
prints the real `nvcc --version` format), and the packages a container must never get: cuda-drivers (--driver-version)
and the `cuda` metapackage depending on the first toolkit and cuda-drivers. The repository is unsigned: use it with
`[trusted=yes]`. With SOURCE_DATE_EPOCH set, Release's Date and the packages' file times come from it (reproducible).
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import os
import subprocess
import sys
import tempfile

NVCC = """#!/bin/sh
# Stand-in nvcc: prints the format of the real `nvcc --version`.
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Copyright (c) 2005-2025 NVIDIA Corporation"
echo "Built on Mon_Jan_01_00:00:00_PST_2025"
echo "Cuda compilation tools, release {release}, V{release}.88"
echo "Build cuda_{release}.r{release}/compiler.00000000_0"
"""

# Package versions of releases NVIDIA's repository has; other releases get <release>.0-1.
TOOLKIT_PACKAGE_VERSIONS = {"13.0": "13.0.2-1", "12.8": "12.8.1-1"}
DEFAULT_TOOLKITS = ["13.0", "12.8"]
DEFAULT_DRIVER_VERSION = "580.95.05"


def toolkit_package(release):
    """(name, package version) of the toolkit package of a MAJOR.MINOR release, named like NVIDIA's."""
    return f"cuda-toolkit-{release.replace('.', '-')}", TOOLKIT_PACKAGE_VERSIONS.get(release, f"{release}.0-1")


def packages(repo_url, toolkits, driver_version):
    """name, version, architecture, depends, {path: (content, mode)} of every package in the repository."""
    result = [
        ("cuda-keyring", "1.1-1", "all", None, {
            "/usr/share/keyrings/cuda-archive-keyring.gpg": ("stand-in signing key\n", 0o644),
            "/etc/apt/sources.list.d/cuda-debian12-x86_64.list": (f"deb [trusted=yes] {repo_url} /\n", 0o644),
        }),
    ]
    for release in toolkits:
        name, version = toolkit_package(release)
        result.append((name, version, "amd64", None, {f"/usr/local/cuda-{release}/bin/nvcc": (NVCC.format(release=release), 0o755)}))
    first_name, first_version = toolkit_package(toolkits[0])
    result += [
        ("cuda-drivers", f"{driver_version}-1", "amd64", None, {
            "/usr/share/doc/cuda-drivers/README.standin": ("stand-in driver metapackage\n", 0o644),
        }),
        ("cuda", first_version, "amd64", f"{first_name}, cuda-drivers", {
            "/usr/share/doc/cuda/README.standin": ("stand-in metapackage\n", 0o644),
        }),
    ]
    return result


def build(repo, workdir, name, version, arch, depends, files):
    root = os.path.join(workdir, name)
    os.makedirs(os.path.join(root, "DEBIAN"))
    control = [f"Package: {name}", f"Version: {version}", f"Architecture: {arch}",
               "Maintainer: llmops.serving tests <molecule@localhost>"]
    if depends:
        control.append(f"Depends: {depends}")
    control.append(f"Description: stand-in for NVIDIA's {name} package")
    with open(os.path.join(root, "DEBIAN", "control"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(control) + "\n")
    for path, (content, mode) in files.items():
        target = root + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(target, mode)
    deb = f"{name}_{version}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", root, os.path.join(repo, deb)],
                   check=True, capture_output=True)
    return deb


def digest(path, name):
    with open(path, "rb") as handle:
        return hashlib.new(name, handle.read()).hexdigest()


def stanza(repo, filename):
    path = os.path.join(repo, filename)
    control = subprocess.run(["dpkg-deb", "--field", path], check=True, capture_output=True, text=True).stdout.rstrip("\n")
    return "\n".join([control, f"Filename: ./{filename}", f"Size: {os.path.getsize(path)}",
                      f"MD5sum: {digest(path, 'md5')}", f"SHA256: {digest(path, 'sha256')}"]) + "\n"


def index(repo, debs):
    packages_file = os.path.join(repo, "Packages")
    with open(packages_file, "w", encoding="utf-8") as handle:
        handle.write("\n".join(stanza(repo, name) for name in sorted(debs)))
    size = os.path.getsize(packages_file)
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    date = email.utils.formatdate(float(epoch) if epoch else None, usegmt=True)
    with open(os.path.join(repo, "Release"), "w", encoding="utf-8") as handle:
        handle.write(f"Origin: llmops-standin\nLabel: cuda stand-in\nDate: {date}\n")
        handle.write(f"MD5Sum:\n {digest(packages_file, 'md5')} {size} Packages\n")
        handle.write(f"SHA256:\n {digest(packages_file, 'sha256')} {size} Packages\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="build-standin-repo.py", description=__doc__.split("\n", 1)[0])
    parser.add_argument("repo", metavar="REPO_DIR")
    parser.add_argument("--repo-url", help="URL the cuda-keyring's sources list names (default file://<REPO_DIR>/)")
    parser.add_argument("--toolkit", action="append", metavar="MAJOR.MINOR", help="toolkit release to offer (repeatable)")
    parser.add_argument("--driver-version", default=DEFAULT_DRIVER_VERSION, help="version of the cuda-drivers package")
    args = parser.parse_args(argv)
    repo = os.path.abspath(args.repo)
    repo_url = args.repo_url or f"file://{repo}/"
    toolkits = list(dict.fromkeys(args.toolkit or DEFAULT_TOOLKITS))
    os.makedirs(repo, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        debs = [build(repo, workdir, *package) for package in packages(repo_url, toolkits, args.driver_version)]
    index(repo, debs)
    print(f"built and indexed {len(debs)} packages in {repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
