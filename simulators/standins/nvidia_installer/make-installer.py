#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a STAND-IN for NVIDIA's NVIDIA-Linux-x86_64-<version>.run installer (a POSIX sh script), for tests only.

Usage: make-installer.py --version 580.95.05 --out FILE [--proc-version-path /proc/driver/nvidia/version]
                         [--ledger-dir DIR]

The installer records its flags in /var/log/nvidia-standin/installer-runs.log, refuses what the real one refuses in a
container (a run without --no-kernel-module, an interactive run without --silent), and, like the real one, removes the
previous userspace driver before installing this version's: an empty libnvidia-ml.so.<version> and libcuda.so.<version>
(with their .so.1 links), the driver stand-in (simulators/standins/nvidia_driver/nvidia_standin.py) with its
driver.json in /usr/lib/x86_64-linux-gnu/nvidia-standin, and /usr/bin/nvidia-smi, which runs it. That nvidia-smi
behaves like NVML: it answers only while the kernel module file (--proc-version-path, read at every call) reports the
same version ("Driver/library version mismatch", exit 18, otherwise), only when /dev/nvidiactl can be opened, and lists
only the GPUs whose /dev/nvidiaN nodes this container can open (the kernel module's GPUs are read from the gpus/
directory beside the version file); their memory comes from the node's ledger (--ledger-dir), which the SGLang
simulator allocates from.
"""
import argparse
import json
import os
import re
import sys

VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
# Paths are pasted into shell code and JSON: only characters that need no quoting.
PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+$")
DRIVER_STANDIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nvidia_driver", "nvidia_standin.py")
INSTALLED_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"
# The GPU memory ledger of the node, as pve-sim shows it in every container it starts.
DEFAULT_LEDGER_DIR = "/srv/host-gpu-memory-ledger"

TEMPLATE = r"""#!/bin/sh
# Stand-in for NVIDIA's NVIDIA-Linux-x86_64-@VERSION@.run (llmops.serving tests, simulators/standins): records its
# flags, refuses what the real installer refuses in a container (a run without --no-kernel-module, an interactive
# run), and installs a stand-in userspace driver after removing the previous version, as the real one does.
# NOT NVIDIA's installer: no driver is installed.
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
rm -f "$libdir"/libnvidia-ml.so.[0-9]*.* "$libdir"/libcuda.so.[0-9]*.*
rm -rf @INSTALLED_DIR@
mkdir -p @INSTALLED_DIR@
: > "$libdir/libnvidia-ml.so.@VERSION@"
ln -sf "libnvidia-ml.so.@VERSION@" "$libdir/libnvidia-ml.so.1"
: > "$libdir/libcuda.so.@VERSION@"
ln -sf "libcuda.so.@VERSION@" "$libdir/libcuda.so.1"
cat > @INSTALLED_DIR@/nvidia_standin.py <<'NVIDIA_STANDIN_PY'
@DRIVER_STANDIN@NVIDIA_STANDIN_PY
cat > @INSTALLED_DIR@/driver.json <<'DRIVER_JSON'
@DRIVER_JSON@
DRIVER_JSON
cat > /usr/bin/nvidia-smi <<'SMI'
#!/usr/bin/python3
# Stand-in nvidia-smi @VERSION@ (llmops.serving tests): the driver stand-in beside it answers as NVML would.
import sys
sys.path.insert(0, "@INSTALLED_DIR@")
import nvidia_standin
sys.exit(nvidia_standin.main(["--config", "@INSTALLED_DIR@/driver.json"] + sys.argv[1:]))
SMI
chmod 0644 @INSTALLED_DIR@/nvidia_standin.py @INSTALLED_DIR@/driver.json
chmod 0755 /usr/bin/nvidia-smi
"""


def render_installer(version, proc_version_path="/proc/driver/nvidia/version", ledger_dir=DEFAULT_LEDGER_DIR,
                     driver_standin=DRIVER_STANDIN):
    """The installer's text; ValueError for a version or path that would not make a sane script."""
    if not VERSION_RE.match(version):
        raise ValueError(f"driver version {version!r} is not like 580.95.05")
    for name, path in (("kernel module version path", proc_version_path), ("ledger directory", ledger_dir)):
        if not PATH_RE.match(path):
            raise ValueError(f"{name} {path!r} must be absolute, without spaces or quotes")
    with open(driver_standin, encoding="utf-8") as handle:
        standin = handle.read()
    if "\nNVIDIA_STANDIN_PY\n" in "\n" + standin:
        raise ValueError("the driver stand-in contains the here-document's end marker")
    config = {"proc_dir": os.path.dirname(proc_version_path), "version_path": proc_version_path, "dev_dir": "/dev", "ledger_dir": ledger_dir,
              "driver_version": version, "cuda_version": "13.0"}
    return (TEMPLATE.replace("@DRIVER_STANDIN@", standin if standin.endswith("\n") else standin + "\n")
            .replace("@DRIVER_JSON@", json.dumps(config, sort_keys=True))
            .replace("@INSTALLED_DIR@", INSTALLED_DIR)
            .replace("@VERSION@", version))


def installer_name(version):
    """The file name NVIDIA publishes the installer under (x86_64)."""
    return f"NVIDIA-Linux-x86_64-{version}.run"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="make-installer", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--version", required=True, help="driver version the installer installs, e.g. 580.95.05")
    parser.add_argument("--out", required=True, help="installer file to write (conventionally NVIDIA-Linux-x86_64-<version>.run)")
    parser.add_argument("--proc-version-path", default="/proc/driver/nvidia/version",
                        help="kernel module version file the installed nvidia-smi compares itself with (its gpus/ "
                             "directory beside it lists the module's GPUs)")
    parser.add_argument("--ledger-dir", default=DEFAULT_LEDGER_DIR,
                        help="the node's GPU memory ledger as the container sees it (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        text = render_installer(args.version, args.proc_version_path, args.ledger_dir)
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
