# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/sandbox-mirror.py for real: a mirror built into tmp_path (dpkg-deb, and pip wheel with build isolation, which
fetches setuptools from the package index), its layout and contents, the no-op second run, the rebuild on a new option.
About 10 s per build; two builds here."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import pathlib
import tarfile
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the stand-in CUDA repository (Debian only)")


def load(relative, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relative))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mirror = load("scripts/sandbox-mirror.py", "sandbox_mirror")


def embedded_nvidia_smi(installer_text):
    """The nvidia-smi the installer writes (its here-document)."""
    return re.search(r"<<'SMI'\n(.*?)\nSMI\n", installer_text, re.S).group(1) + "\n"


def deb_file(deb, member):
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], capture_output=True, check=True, timeout=30).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(member).read().decode()


def test_build_the_layout_then_a_second_run_does_nothing(tmp_path, capsys):
    outdir = str(tmp_path / "mirror")
    argv = [outdir, "--proc-version-path", "/srv/gpu-kit/proc/driver/nvidia/version"]
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
        "models/Qwen3.6-27B/config.json", "models/Qwen3.6-27B/.cache/huggingface/download/config.json.metadata",
    }
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
    assert " /srv/gpu-kit/proc/driver/nvidia/version)" in embedded_nvidia_smi(run_file)
    assert deb_file(os.path.join(outdir, "cuda/cuda-keyring_1.1-1_all.deb"),
                    "./etc/apt/sources.list.d/cuda-debian12-x86_64.list") == "deb [trusted=yes] file:///srv/llmops-mirror/cuda/ /\n"
    packages = pathlib.Path(outdir, "cuda/Packages").read_text(encoding="utf-8")
    assert "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n" in packages
    with zipfile.ZipFile(os.path.join(outdir, "wheels/sglang-0.5.23+standin-py3-none-any.whl")) as wheel:
        metadata = wheel.read("sglang-0.5.23+standin.dist-info/METADATA").decode()
        assert "sglang/srt/server_args.py" in wheel.namelist()
    assert "Requires-Dist: sglang-sim" in metadata
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
