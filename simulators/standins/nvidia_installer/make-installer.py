#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a STAND-IN for NVIDIA's NVIDIA-Linux-x86_64-<version>.run installer (a POSIX sh script), for tests only.

Usage: make-installer.py --version 580.95.05 --out FILE [--gpus 2] [--proc-version-path /proc/driver/nvidia/version]

The installer records its flags in /var/log/nvidia-standin/installer-runs.log, refuses what the real one refuses in a
container (a run without --no-kernel-module, an interactive run without --silent), and, like the real one, removes the
previous libnvidia-ml.so.<version> before installing libnvidia-ml.so.<version> (empty) and a stand-in nvidia-smi. That
nvidia-smi behaves like NVML: it answers only while the kernel module file (--proc-version-path, read at every call)
reports the same version, and otherwise fails with "Driver/library version mismatch" (exit 18). It answers
`--query-gpu=driver_version` and `-L` for --gpus GPUs, nothing else.
"""
import argparse
import os
import re
import sys

VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
# The path is pasted into shell code: only characters that need no quoting.
PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+$")
MAX_GPUS = 16

TEMPLATE = r"""#!/bin/sh
# Stand-in for NVIDIA's NVIDIA-Linux-x86_64-@VERSION@.run (llmops.serving tests, simulators/standins): records its
# flags, refuses what the real installer refuses in a container (a run without --no-kernel-module, an interactive
# run), and installs a stand-in nvidia-smi and libnvidia-ml.so.@VERSION@ after removing the previous version, as the
# real one does. NOT NVIDIA's installer: no driver is installed.
set -eu
mkdir -p /var/log/nvidia-standin
echo "@VERSION@ $*" >> /var/log/nvidia-standin/installer-runs.log
silent=no
no_kernel_module=no
for arg in "$@"; do
  case "$arg" in
    --silent|-s) silent=yes ;;
    --no-kernel-module|--no-kernel-modules) no_kernel_module=yes ;;
  esac
done
if [ "$silent" = no ]; then
  echo "ERROR: stand-in installer: without --silent the installer waits for answers on a terminal" >&2
  exit 1
fi
if [ "$no_kernel_module" = no ]; then
  echo "ERROR: An NVIDIA kernel module 'nvidia-uvm' appears to already be loaded in your kernel." >&2
  exit 1
fi
libdir=/usr/lib/x86_64-linux-gnu
rm -f "$libdir"/libnvidia-ml.so.[0-9]*.*
: > "$libdir/libnvidia-ml.so.@VERSION@"
ln -sf "libnvidia-ml.so.@VERSION@" "$libdir/libnvidia-ml.so.1"
cat > /usr/bin/nvidia-smi <<'SMI'
#!/bin/sh
# Stand-in nvidia-smi @VERSION@: like NVML, it answers only when the kernel module has the same version.
kernel=$(sed -n 's/^NVRM version: NVIDIA UNIX [A-Za-z0-9_ ]*Kernel Module[a-z0-9_ ]*  \([0-9][0-9.]*\)  .*/\1/p' @PROC_VERSION_PATH@)
if [ "$kernel" != "@VERSION@" ]; then
  echo "Failed to initialize NVML: Driver/library version mismatch"
  echo "NVML library version: @NVML_VERSION@"
  exit 18
fi
case "${1:-}" in
  --query-gpu=driver_version)
    i=0; while [ "$i" -lt @GPUS@ ]; do echo "@VERSION@"; i=$((i + 1)); done ;;
  -L)
    i=0; while [ "$i" -lt @GPUS@ ]; do echo "GPU $i: NVIDIA RTX A6000 (UUID: GPU-standin-$i)"; i=$((i + 1)); done ;;
  *) echo "stand-in nvidia-smi: unsupported arguments: $*" >&2; exit 2 ;;
esac
SMI
chmod 0755 /usr/bin/nvidia-smi
"""


def render_installer(version, gpus=2, proc_version_path="/proc/driver/nvidia/version"):
    """The installer's text; ValueError for a version, GPU count or path that would not make a sane script."""
    if not VERSION_RE.match(version):
        raise ValueError(f"driver version {version!r} is not like 580.95.05")
    if not 0 <= gpus <= MAX_GPUS:
        raise ValueError(f"GPU count {gpus} is outside 0..{MAX_GPUS}")
    if not PATH_RE.match(proc_version_path):
        raise ValueError(f"kernel module version path {proc_version_path!r} must be absolute, without spaces or quotes")
    return (TEMPLATE.replace("@VERSION@", version)
            .replace("@NVML_VERSION@", ".".join(version.split(".")[:2]))
            .replace("@GPUS@", str(gpus))
            .replace("@PROC_VERSION_PATH@", proc_version_path))


def installer_name(version):
    """The file name NVIDIA publishes the installer under (x86_64)."""
    return f"NVIDIA-Linux-x86_64-{version}.run"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="make-installer", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--version", required=True, help="driver version the installer installs, e.g. 580.95.05")
    parser.add_argument("--out", required=True, help="installer file to write (conventionally NVIDIA-Linux-x86_64-<version>.run)")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs the installed nvidia-smi lists (default 2)")
    parser.add_argument("--proc-version-path", default="/proc/driver/nvidia/version",
                        help="kernel module version file the installed nvidia-smi compares itself with")
    args = parser.parse_args(argv)
    try:
        text = render_installer(args.version, args.gpus, args.proc_version_path)
    except ValueError as error:
        parser.error(str(error))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    partial = args.out + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(partial, 0o755)
    os.replace(partial, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
