"""Build a flat apt repository of stand-in packages carrying NVIDIA's real package names, with dpkg-deb, and index
it (Packages and Release, as dpkg-scanpackages and apt-ftparchive write them) with only the standard library.

Usage: python3 build-standin-repo.py REPO_DIR
"""

from __future__ import annotations

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

# name, version, architecture, depends, {path: (content, mode)}
PACKAGES = [
    ("cuda-keyring", "1.1-1", "all", None, {
        "/usr/share/keyrings/cuda-archive-keyring.gpg": ("stand-in signing key\n", 0o644),
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list": ("deb [trusted=yes] file:///srv/cuda-repo/ /\n", 0o644),
    }),
    ("cuda-toolkit-13-0", "13.0.2-1", "amd64", None, {
        "/usr/local/cuda-13.0/bin/nvcc": (NVCC.format(release="13.0"), 0o755),
    }),
    ("cuda-toolkit-12-8", "12.8.1-1", "amd64", None, {
        "/usr/local/cuda-12.8/bin/nvcc": (NVCC.format(release="12.8"), 0o755),
    }),
    ("cuda-drivers", "580.95.05-1", "amd64", None, {
        "/usr/share/doc/cuda-drivers/README.standin": ("stand-in driver metapackage\n", 0o644),
    }),
    ("cuda", "13.0.2-1", "amd64", "cuda-toolkit-13-0, cuda-drivers", {
        "/usr/share/doc/cuda/README.standin": ("stand-in metapackage\n", 0o644),
    }),
]


def build(repo, workdir, name, version, arch, depends, files):
    root = os.path.join(workdir, name)
    os.makedirs(os.path.join(root, "DEBIAN"))
    control = [f"Package: {name}", f"Version: {version}", f"Architecture: {arch}",
               "Maintainer: llmops.serving molecule <molecule@localhost>"]
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
    packages = os.path.join(repo, "Packages")
    with open(packages, "w", encoding="utf-8") as handle:
        handle.write("\n".join(stanza(repo, name) for name in sorted(debs)))
    size = os.path.getsize(packages)
    with open(os.path.join(repo, "Release"), "w", encoding="utf-8") as handle:
        handle.write(f"Origin: llmops-molecule\nLabel: cuda stand-in\nDate: {email.utils.formatdate(usegmt=True)}\n")
        handle.write(f"MD5Sum:\n {digest(packages, 'md5')} {size} Packages\n")
        handle.write(f"SHA256:\n {digest(packages, 'sha256')} {size} Packages\n")


def main(repo):
    os.makedirs(repo, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        debs = [build(repo, workdir, *package) for package in PACKAGES]
    index(repo, debs)
    print(f"built and indexed {len(debs)} packages in {repo}")


if __name__ == "__main__":
    main(sys.argv[1])
