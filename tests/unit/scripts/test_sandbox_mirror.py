# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/sandbox-mirror.py: the input digest, the manifest and its checks, the layout, the stand-in installer's
nvidia-smi, and a failure named by its step. The real build is in tests/integration/test_sandbox_mirror.py."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load(relative, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relative))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mirror = load("scripts/sandbox-mirror.py", "sandbox_mirror")
installer = load("simulators/standins/nvidia_installer/make-installer.py", "make_installer")

OPTIONS = {"driver_version": "580.95.05", "cuda_version": "13.0", "ledger_dir": "/srv/host-gpu-memory-ledger",
           "proc_version_path": "/proc/driver/nvidia/version", "mount_point": "/srv/llmops-mirror"}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


@pytest.fixture
def sources(tmp_path):
    """A source tree with inputs and the build outputs setuptools leaves next to them."""
    root = tmp_path / "src"
    write(str(root / "pkg" / "pyproject.toml"), "[project]\nname = 'x'\n")
    write(str(root / "pkg" / "x" / "__init__.py"), "VALUE = 1\n")
    write(str(root / "tool.py"), "print('tool')\n")
    for output in ("pkg/build/lib/x/__init__.py", "pkg/x.egg-info/PKG-INFO", "pkg/x/__pycache__/a.cpython-311.pyc",
                   "pkg/dist/x-1.whl", "pkg/x/b.pyc"):
        write(str(root / output), "build output\n")
    script = tmp_path / "sandbox-mirror.py"
    script.write_text("# the script\n")
    return root, str(script)


def test_input_files_are_the_sources_and_the_script_without_build_outputs(sources):
    root, script = sources
    names = [pair[0] for pair in mirror.input_files(str(root), ["pkg", "tool.py"], script)]
    assert names == sorted(["pkg/pyproject.toml", "pkg/x/__init__.py", "tool.py", "sandbox-mirror.py"])


def test_a_missing_input_is_an_error(sources):
    root, script = sources
    with pytest.raises(FileNotFoundError, match="input gone does not exist"):
        mirror.input_files(str(root), ["gone"], script)


def test_input_digest_follows_contents_names_and_options(sources):
    root, script = sources

    def digest(options=None):
        return mirror.input_digest(mirror.input_files(str(root), ["pkg", "tool.py"], script), options or OPTIONS)

    first = digest()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert digest() == first
    # Option order does not matter, option values do.
    assert digest(dict(reversed(list(OPTIONS.items())))) == first
    assert digest(dict(OPTIONS, driver_version="580.82.07")) != first
    # Build outputs do not count.
    write(str(root / "pkg" / "build" / "lib" / "x" / "__init__.py"), "rebuilt\n")
    assert digest() == first
    # A source edit, a rename and an edit of the script do.
    write(str(root / "pkg" / "x" / "__init__.py"), "VALUE = 2\n")
    edited = digest()
    assert edited != first
    os.rename(root / "pkg" / "x" / "__init__.py", root / "pkg" / "x" / "main.py")
    assert digest() not in (first, edited)
    os.rename(root / "pkg" / "x" / "main.py", root / "pkg" / "x" / "__init__.py")
    assert digest() == edited
    with open(script, "a", encoding="utf-8") as handle:
        handle.write("# changed\n")
    assert digest() != edited


def make_tree(outdir):
    write(os.path.join(outdir, "nvidia", "a.run"), "#!/bin/sh\n")
    write(os.path.join(outdir, "wheels", "b.whl"), "wheel bytes")
    write(os.path.join(outdir, "models", "m", ".cache", "meta"), "commit\n")


def test_manifest_lists_every_file_but_itself_with_sha256_and_size(tmp_path):
    outdir = str(tmp_path / "mirror")
    make_tree(outdir)
    write(os.path.join(outdir, mirror.MANIFEST), "{}")
    manifest = mirror.build_manifest(outdir, "d" * 64, OPTIONS)
    assert manifest["input_digest"] == "d" * 64
    assert manifest["options"] == OPTIONS
    assert sorted(manifest["files"]) == ["models/m/.cache/meta", "nvidia/a.run", "wheels/b.whl"]
    assert manifest["files"]["wheels/b.whl"] == {"sha256": hashlib.sha256(b"wheel bytes").hexdigest(), "size": 11}


def test_up_to_date_only_with_the_same_digest_and_untouched_files(tmp_path):
    outdir = str(tmp_path / "mirror")
    make_tree(outdir)
    assert mirror.up_to_date(outdir, "d" * 64) == "no readable MANIFEST.json"
    mirror.write_manifest(outdir, "d" * 64, OPTIONS)
    assert mirror.up_to_date(outdir, "d" * 64) is None
    assert mirror.up_to_date(outdir, "e" * 64) == "the inputs changed"

    write(os.path.join(outdir, "wheels", "b.whl"), "other bytes")
    assert mirror.up_to_date(outdir, "d" * 64) == "files differ from the manifest: wheels/b.whl"
    os.remove(os.path.join(outdir, "wheels", "b.whl"))
    assert mirror.up_to_date(outdir, "d" * 64) == "files differ from the manifest: wheels/b.whl"
    write(os.path.join(outdir, "wheels", "b.whl"), "wheel bytes")
    write(os.path.join(outdir, "wheels", "extra.whl"), "x")
    assert mirror.up_to_date(outdir, "d" * 64) == "files differ from the manifest: wheels/extra.whl"

    write(os.path.join(outdir, mirror.MANIFEST), "{not json")
    assert mirror.up_to_date(outdir, "d" * 64) == "no readable MANIFEST.json"


def test_layout_names_what_is_missing(tmp_path):
    outdir = str(tmp_path / "mirror")
    write(os.path.join(outdir, "nvidia", "NVIDIA-Linux-x86_64-580.95.05.run"), "")
    write(os.path.join(outdir, "cuda", "cuda-toolkit-13-0_13.0.2-1_amd64.deb"), "")
    write(os.path.join(outdir, "wheels", "sglang-0.5.22+standin-py3-none-any.whl"), "")
    write(os.path.join(outdir, "wheels", "sglang_sim-0.1.0-py3-none-any.whl"), "")
    missing = mirror.missing_from_layout(outdir, OPTIONS)
    assert missing == [
        "cuda/Packages", "cuda/Release", "cuda/cuda-keyring_1.1-1_all.deb",
        "wheels/sglang-0.5.23+standin-py3-none-any.whl", "wheels/sglang-0.5.23.post1+standin-py3-none-any.whl",
        f"models/{mirror.MODEL}/config.json", f"models/{mirror.MODEL}/.cache/huggingface/download/config.json.metadata",
    ]
    # Another toolkit release is another package name.
    assert "cuda/cuda-toolkit-12-8_*_amd64.deb" in mirror.missing_from_layout(outdir, dict(OPTIONS, cuda_version="12.8"))


def package_constants(path):
    """(__version__, STANDIN_FAULT) of a stand-in sglang/__init__.py, read without importing it."""
    module = load(path, "sglang_standin_package")
    return module.__version__, module.STANDIN_FAULT


def test_the_failing_release_is_the_standin_source_with_its_version_description_and_fault(tmp_path):
    copy = str(tmp_path / "sglang_standin")
    mirror.copy_source(mirror.SGLANG_STANDIN, copy)
    release = {"version": "0.5.23.post1+standin", "fault": "oom", "description": "a release that cannot start"}
    mirror.make_release_source(copy, release)
    pyproject = (tmp_path / "sglang_standin" / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = "0.5.23.post1+standin"\n' in pyproject and "0.5.23+standin" not in pyproject
    assert 'description = "a release that cannot start"\n' in pyproject
    assert package_constants(os.path.join(copy, "sglang", "__init__.py")) == ("0.5.23.post1+standin", "oom")
    # The rest of the source is the stand-in's, without its build outputs.
    original = os.path.join(REPO, mirror.SGLANG_STANDIN, "sglang", "srt", "server_args.py")
    with open(original, encoding="utf-8") as handle:
        assert (tmp_path / "sglang_standin" / "sglang" / "srt" / "server_args.py").read_text(encoding="utf-8") == handle.read()
    assert not any(mirror.ignored(name) for _dir, dirs, files in os.walk(copy) for name in dirs + files)
    # The source of the normal release is untouched: it carries no fault.
    assert package_constants(os.path.join(REPO, mirror.SGLANG_STANDIN, "sglang", "__init__.py")) == ("0.5.23+standin", "")


def test_a_source_without_the_line_to_rewrite_is_refused(tmp_path):
    copy = str(tmp_path / "sglang_standin")
    mirror.copy_source(mirror.SGLANG_STANDIN, copy)
    write(os.path.join(copy, "sglang", "__init__.py"), '__version__ = "0.5.23+standin"\n')
    with pytest.raises(ValueError, match="expected one line matching .*STANDIN_FAULT.*, found 0"):
        mirror.make_release_source(copy, {"version": "0.5.23.post1+standin", "fault": "oom", "description": "d"})


def test_replace_dir_swaps_in_the_new_tree(tmp_path):
    outdir, tmp = str(tmp_path / "mirror"), str(tmp_path / "mirror.tmp")
    write(os.path.join(outdir, "old"), "old")
    write(os.path.join(tmp, "new"), "new")
    mirror.replace_dir(tmp, outdir)
    assert os.listdir(outdir) == ["new"]
    assert not os.path.exists(tmp) and not os.path.exists(outdir + ".old")


@pytest.mark.parametrize("argv, message", [
    (["out", "--cuda-version", "13"], "--cuda-version must be MAJOR.MINOR"),
    (["out", "--mount-point", "srv/mirror"], "--mount-point must be absolute"),
])
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        mirror.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_installer_refuses_values_it_would_paste_into_shell():
    with pytest.raises(ValueError, match="not like 580.95.05"):
        installer.render_installer("580.95.05; rm -rf /")
    with pytest.raises(ValueError, match="must be absolute"):
        installer.render_installer("580.95.05", proc_version_path="/srv/a b")
    with pytest.raises(ValueError, match="must be absolute"):
        installer.render_installer("580.95.05", ledger_dir="/srv/$(reboot)")


def here_document(installer_text, marker):
    """What the installer writes through its here-document ``marker``."""
    return re.search(r"<<'%s'\n(.*?)\n%s\n" % (marker, marker), installer_text, re.S).group(1) + "\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the kit's device nodes need mknod (root)")
@pytest.mark.parametrize("module_line", [
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Tue Sep 30 10:00:00 UTC 2025",
    # pve-sim's GPU kit writes the open kernel module's format.
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  (pve-sim@gpu-kit)  Tue Sep 30 10:00:00 UTC 2025",
], ids=["proprietary", "open"])
def test_installed_nvidia_smi_answers_only_for_its_kernel_module(tmp_path, module_line):
    """The installer's driver stand-in and nvidia-smi, run as installed but from a temporary directory."""
    text = installer.render_installer("580.95.05", proc_version_path=str(tmp_path / "proc" / "version"),
                                      ledger_dir=str(tmp_path / "ledger"))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "nvidia_standin.py").write_text(here_document(text, "NVIDIA_STANDIN_PY"))
    config = json.loads(here_document(text, "DRIVER_JSON"))
    assert config == {"proc_dir": str(tmp_path / "proc"), "version_path": str(tmp_path / "proc" / "version"), "dev_dir": "/dev",
                      "ledger_dir": str(tmp_path / "ledger"),
                      "driver_version": "580.95.05", "cuda_version": "13.0"}
    standin = load(str(lib / "nvidia_standin.py"), "installed_nvidia_standin")
    gpus = [{"bus_id": "0000:1%d:00.0" % index, "uuid": "GPU-0000000%d-5e1d-4c0a-9b7e-00000000000%d" % (index, index),
             "name": "NVIDIA RTX A6000", "minor": index, "memory_total_mib": 49140} for index in range(3)]
    standin.write_driver_state(config["proc_dir"], config["ledger_dir"], gpus, "580.95.05")
    (tmp_path / "dev").mkdir()
    for minor in (0, 1, 2, 255):
        os.mknod(str(tmp_path / "dev" / ("nvidia%d" % minor if minor < 255 else "nvidiactl")), stat.S_IFCHR | 0o666,
                 os.makedev(195, minor))
    config["dev_dir"] = str(tmp_path / "dev")
    (lib / "driver.json").write_text(json.dumps(config))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(here_document(text, "SMI").replace(installer.INSTALLED_DIR, str(lib)))

    def call(*args):
        return subprocess.run([sys.executable, str(smi), *args], capture_output=True, text=True, timeout=30, check=False)

    (tmp_path / "proc" / "version").write_text(module_line.format(v="580.95.05") + "\nGCC version:  gcc version 12.2.0\n")
    assert call("--query-gpu=driver_version", "--format=csv,noheader").stdout.split() == ["580.95.05"] * 3
    assert call("-L").stdout.count("GPU ") == 3
    (tmp_path / "proc" / "version").write_text(module_line.format(v="580.82.07") + "\n")
    mismatch = call("-L")
    assert mismatch.returncode == 18
    assert mismatch.stdout.splitlines() == ["Failed to initialize NVML: Driver/library version mismatch",
                                            "NVML library version: 580.95"]


def test_a_failing_step_is_named_and_the_mirror_is_left_alone(tmp_path, monkeypatch, capsys):
    outdir = str(tmp_path / "mirror")
    write(os.path.join(outdir, "keep"), "the previous mirror")
    # No dpkg-deb on PATH: the CUDA repository step fails (after the installer step worked).
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert mirror.main([outdir]) == 1
    err = capsys.readouterr().err
    assert "step 'build the CUDA apt repository stand-in' failed" in err
    assert "dpkg-deb" in err
    assert os.listdir(outdir) == ["keep"]
    assert os.path.isfile(os.path.join(outdir + ".tmp", "nvidia", "NVIDIA-Linux-x86_64-580.95.05.run"))
