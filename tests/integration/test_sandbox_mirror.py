# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/sandbox-mirror.py for real: a mirror built into tmp_path (dpkg-deb, and pip wheel with build isolation, which
fetches setuptools from the package index), its layout and contents, a pinned install and the upgrade to the stand-in
release that cannot start, the no-op second run, the rebuild on a new option with the same wheels. About 10 s per
build; two builds here."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import pathlib
import sys
import tarfile
import zipfile

import pytest

from ansible_collections.llmops.serving.tests.unit.simulators.sim_harness import GpuKit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the stand-in CUDA repository (Debian only)")


def load(relative, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relative))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mirror = load("scripts/sandbox-mirror.py", "sandbox_mirror")


def embedded_driver_config(installer_text):
    """The driver.json the installer writes (its here-document): where the installed stand-in looks."""
    return json.loads(re.search(r"<<'DRIVER_JSON'\n(.*?)\nDRIVER_JSON\n", installer_text, re.S).group(1))


def deb_file(deb, member):
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], capture_output=True, check=True, timeout=30).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(member).read().decode()


def hub_wheels():
    """The real huggingface_hub's wheels for the containers (scripts/hub-wheels.sh, downloaded once into .cache)."""
    result = subprocess.run(["bash", os.path.join(REPO, "scripts", "hub-wheels.sh")], capture_output=True, text=True,
                            check=True, timeout=300, env=dict(os.environ, VENV=os.path.dirname(os.path.dirname(sys.executable))))
    return result.stdout.strip()


def test_build_the_layout_then_a_second_run_does_nothing(tmp_path, capsys):
    outdir = str(tmp_path / "mirror")
    hub = hub_wheels()
    argv = [outdir, "--proc-version-path", "/srv/gpu-kit/proc/driver/nvidia/version", "--hub-wheels", hub]
    standin_source = os.path.join(REPO, "simulators/standins/sglang_standin")
    source_entries = sorted(os.listdir(standin_source))
    assert mirror.main(argv) == 0
    assert f"built {outdir}" in capsys.readouterr().out

    manifest = json.loads((tmp_path / "mirror" / "MANIFEST.json").read_text())
    assert set(manifest["files"]) == {
        "nvidia/NVIDIA-Linux-x86_64-580.95.05.run",
        "cuda/Packages", "cuda/Release", "cuda/cuda-keyring_1.1-1_all.deb", "cuda/cuda-toolkit-13-0_13.0.2-1_amd64.deb",
        "cuda/cuda-toolkit-12-8_12.8.1-1_amd64.deb", "cuda/cuda-drivers_580.95.05-1_amd64.deb", "cuda/cuda_13.0.2-1_amd64.deb",
        "wheels/sglang_sim-0.1.0-py3-none-any.whl", "wheels/sglang-0.5.23+standin-py3-none-any.whl",
        "wheels/sglang-0.5.23.post1+standin-py3-none-any.whl",
        "models/Qwen3.6-27B/config.json", "models/Qwen3.6-27B/.cache/huggingface/download/config.json.metadata",
    } | {"wheels/" + name for name in os.listdir(hub) if name.endswith(".whl")}
    assert "wheels/huggingface_hub-2.4.0-py3-none-any.whl" in manifest["files"]
    for relative, entry in manifest["files"].items():
        data = pathlib.Path(outdir, relative).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}, relative
    # World-readable all the way down: the containers read it through a bind mount.
    for directory, _dirs, names in os.walk(outdir):
        assert os.stat(directory).st_mode & 0o755 == 0o755, directory
        for name in names:
            assert os.stat(os.path.join(directory, name)).st_mode & 0o644 == 0o644, name
    assert not os.path.exists(outdir + ".tmp") and not os.path.exists(outdir + ".old")

    # The pieces point where the roles will look.
    run_file = pathlib.Path(outdir, "nvidia/NVIDIA-Linux-x86_64-580.95.05.run").read_text(encoding="utf-8")
    config = embedded_driver_config(run_file)
    assert (config["proc_dir"], config["ledger_dir"]) == ("/srv/gpu-kit/proc/driver/nvidia", "/srv/host-gpu-memory-ledger")
    assert deb_file(os.path.join(outdir, "cuda/cuda-keyring_1.1-1_all.deb"),
                    "./etc/apt/sources.list.d/cuda-debian12-x86_64.list") == "deb [trusted=yes] file:///srv/llmops-mirror/cuda/ /\n"
    packages = pathlib.Path(outdir, "cuda/Packages").read_text(encoding="utf-8")
    assert "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n" in packages
    with zipfile.ZipFile(os.path.join(outdir, "wheels/sglang-0.5.23+standin-py3-none-any.whl")) as wheel:
        metadata = wheel.read("sglang-0.5.23+standin.dist-info/METADATA").decode()
        assert "sglang/srt/server_args.py" in wheel.namelist()
    # As the real SGLang 0.5.23 through transformers==5.19.0: its `hf` is what the sglang role downloads models with.
    assert "Requires-Dist: sglang-sim" in metadata and "Requires-Dist: huggingface-hub<3.0,>=1.31.0" in metadata
    check_the_failing_release(os.path.join(outdir, "wheels"), tmp_path)
    metadata_file = pathlib.Path(outdir, "models/Qwen3.6-27B/.cache/huggingface/download/config.json.metadata")
    assert metadata_file.read_text(encoding="utf-8").splitlines()[0] == "0123456789abcdef0123456789abcdef01234567"
    # The sources were built from copies: no build outputs were left in the tree.
    assert sorted(os.listdir(standin_source)) == source_entries

    inode = os.stat(outdir).st_ino
    assert mirror.main(argv) == 0
    assert "is up to date" in capsys.readouterr().out
    assert os.stat(outdir).st_ino == inode

    # Another option is another mirror, rebuilt in place.
    assert mirror.main(argv + ["--driver-version", "580.82.07"]) == 0
    assert "the inputs changed" in capsys.readouterr().out
    assert os.listdir(os.path.join(outdir, "nvidia")) == ["NVIDIA-Linux-x86_64-580.82.07.run"]
    # Reproducible: the same sources give the same wheels.
    rebuilt = json.loads((tmp_path / "mirror" / "MANIFEST.json").read_text())["files"]
    wheels = sorted(name for name in manifest["files"] if name.startswith("wheels/"))
    assert [rebuilt[name] for name in wheels] == [manifest["files"][name] for name in wheels]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_the_failing_release(wheels, tmp_path):
    """sglang==0.5.23 installs the normal stand-in; the upgrade to 0.5.23.post1+standin installs one whose server dies
    with the simulator's startup OOM, with no SGLANG_SIM_FAULT set."""
    with zipfile.ZipFile(os.path.join(wheels, "sglang-0.5.23.post1+standin-py3-none-any.whl")) as wheel:
        metadata = wheel.read("sglang-0.5.23.post1+standin.dist-info/METADATA").decode()
    assert "Version: 0.5.23.post1+standin\n" in metadata and "Requires-Dist: sglang-sim" in metadata
    assert ("Summary: stand-in of a release that cannot start on the sandbox's GPUs (the simulator's startup OOM); "
            "for the package-rollback test\n") in metadata

    venv = str(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    python = os.path.join(venv, "bin", "python")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SGLANG_", "PYTHON"))}

    def install(requirement):
        subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--disable-pip-version-check",
                        "--no-index", "--find-links", wheels, requirement], check=True, timeout=120, env=env)

    def installed():
        probe = ("from importlib import metadata; import sglang; from sglang_sim import knobs; "
                 "print(metadata.version('sglang'), sglang.__version__, ','.join(sorted(knobs.load_knobs([]).faults)) or '-')")
        return subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, timeout=60, env=env).stdout.split()

    install("sglang==0.5.23")
    assert installed() == ["0.5.23+standin", "0.5.23+standin", "-"], "sglang==0.5.23 must not match 0.5.23.post1 (PEP 440)"
    hf = subprocess.run([os.path.join(venv, "bin", "hf"), "version"], capture_output=True, text=True, timeout=60, env=env,
                        check=False)
    assert hf.returncode == 0 and "2.4.0" in hf.stdout, hf.stdout + hf.stderr
    install("sglang==0.5.23.post1+standin")
    assert installed() == ["0.5.23.post1+standin", "0.5.23.post1+standin", "oom"]
    # The server of that release dies at start as SGLang does on a GPU too small for it (TP 2 fits the simulated GPUs:
    # two A6000s of a GPU kit, the driver the server finds; without one it finds no accelerator).
    kit = GpuKit(tmp_path / "gpu-kit", gpus=2)
    server = subprocess.run(
        [os.path.join(venv, "bin", "sglang-sim"), "--model-path", "Qwen/Qwen3.6-27B", "--port", str(free_port()), "--tp", "2",
         "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"],
        capture_output=True, text=True, timeout=60, check=False, env=dict(env, SGLANG_SIM_STARTUP_SECONDS="0.5", **kit.env()))
    assert server.returncode == -9, server.stderr
    assert "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache." in server.stderr
    assert "The server is fired up and ready to roll!" not in server.stderr
