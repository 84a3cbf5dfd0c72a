"""nvidia_module_build: dkms status in both formats (synthetic lines in the formats dkms 2 and 3 print, labelled as
such: no public Proxmox capture with a source URL was found), installed kernels, the next-boot kernel with and
without a proxmox-boot-tool pin, and nvidia_module_not_built for the running and the next-boot kernel."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_module_build as build

# Synthetic, in the formats of dkms 3 (module/version) and dkms 2 (module, version), with a suffix and a warning line.
SYNTHETIC_STATUS = """nvidia/550.54.14, 6.8.4-2-pve, x86_64: installed
nvidia, 550.54.14, 6.5.13-1-pve, x86_64: installed (Original modules exist)
nvidia/550.54.14, 6.8.12-4-pve, x86_64: built
nvidia/550.54.14: added
zfs/2.2.3, 6.8.4-2-pve, x86_64: installed
WARNING: Kernel headers for 6.8.12-9-pve are missing
"""


def test_both_dkms_formats_and_the_other_lines():
    status = build.parse_dkms_status(SYNTHETIC_STATUS)
    assert [(e["module"], e["version"], e["kernel"], e["state"]) for e in status["entries"]] == [
        ("nvidia", "550.54.14", "6.8.4-2-pve", "installed"), ("nvidia", "550.54.14", "6.5.13-1-pve", "installed"),
        ("nvidia", "550.54.14", "6.8.12-4-pve", "built"), ("nvidia", "550.54.14", None, "added"),
        ("zfs", "2.2.3", "6.8.4-2-pve", "installed")]
    assert status["entries"][1]["extra"] == "(Original modules exist)"
    assert status["other"] == ["WARNING: Kernel headers for 6.8.12-9-pve are missing"]
    assert build.dkms_installed(status, "6.8.4-2-pve").startswith("nvidia/550.54.14, 6.8.4-2-pve")
    assert build.dkms_installed(status, "6.8.12-4-pve") is None  # built is not installed


def test_version_order_is_numeric():
    kernels = ["6.8.12-10-pve", "6.8.12-9-pve", "6.5.13-1-pve", "6.8.4-2-pve"]
    assert sorted(kernels, key=build.version_key) == ["6.5.13-1-pve", "6.8.4-2-pve", "6.8.12-9-pve", "6.8.12-10-pve"]


@pytest.fixture
def host(tmp_path):
    """Synthetic: three installed kernels, one module tree without a vmlinuz (a removed kernel)."""
    modules, boot, etc = tmp_path / "lib/modules", tmp_path / "boot", tmp_path / "etc/kernel"
    for path in (modules, boot, etc):
        path.mkdir(parents=True)
    for kernel in ("6.8.4-2-pve", "6.8.12-4-pve", "6.8.12-10-pve"):
        (modules / kernel / "kernel").mkdir(parents=True)
        (boot / ("vmlinuz-" + kernel)).write_text("")
    (modules / "6.2.16-3-pve").mkdir()
    (modules / "6.8.4-2-pve/updates/dkms").mkdir(parents=True)
    (modules / "6.8.4-2-pve/updates/dkms/nvidia.ko.xz").write_text("")
    os.symlink("/nonexistent/build", modules / "6.8.4-2-pve" / "build")
    return {"modules": str(modules), "boot": str(boot), "pin": str(etc / "proxmox-boot-pin"), "root": tmp_path}


def test_installed_kernels_and_the_newest_boots_next(host):
    assert build.installed_kernels(host["modules"], host["boot"]) == ["6.8.4-2-pve", "6.8.12-4-pve", "6.8.12-10-pve"]
    state = build.build_state(host["modules"], host["boot"], host["pin"], "6.8.4-2-pve", None)
    assert (state["running"], state["next_boot"], state["pin"]) == ("6.8.4-2-pve", "6.8.12-10-pve", None)
    assert state["kernels"]["6.8.4-2-pve"]["module_files"][0].endswith("updates/dkms/nvidia.ko.xz")
    [finding] = build.build_findings(state, None)
    assert (finding.check, finding.severity, finding.subject) == ("nvidia_module_not_built", "error", "kernel 6.8.12-10-pve (next boot)")
    assert "the next reboot comes up without the NVIDIA driver" in finding.consequence
    assert "apt install proxmox-headers-6.8.12-10-pve, then dkms autoinstall -k 6.8.12-10-pve" in finding.fix


def test_a_pin_decides_the_next_boot_and_next_boot_pin_wins(host):
    with open(host["pin"], "w") as handle:
        handle.write("6.8.4-2-pve\n")
    state = build.build_state(host["modules"], host["boot"], host["pin"], "6.8.4-2-pve", None)
    assert state["next_boot"] == "6.8.4-2-pve" and build.build_findings(state, None) == []
    with open(os.path.join(os.path.dirname(host["pin"]), "next-boot-pin"), "w") as handle:
        handle.write("6.8.12-4-pve\n")
    state = build.build_state(host["modules"], host["boot"], host["pin"], "6.8.4-2-pve", None)
    assert state["next_boot"] == "6.8.12-4-pve"


def test_dkms_installed_counts_and_a_module_anywhere_in_the_tree_counts(host):
    status = build.parse_dkms_status("nvidia/550.54.14, 6.8.12-10-pve, x86_64: installed\n")
    state = build.build_state(host["modules"], host["boot"], host["pin"], "6.8.4-2-pve", status)
    assert build.build_findings(state, status) == []
    extra = os.path.join(host["modules"], "6.8.12-10-pve", "kernel", "drivers", "gpu", "nvidia")
    os.makedirs(extra)
    open(os.path.join(extra, "nvidia.ko"), "w").close()
    assert build.build_findings(build.build_state(host["modules"], host["boot"], host["pin"], "6.8.4-2-pve", None), None) == []


def test_the_running_kernel_without_a_module_is_an_error_once(host):
    state = build.build_state(host["modules"], host["boot"], host["pin"], "6.8.12-10-pve", None)
    [finding] = build.build_findings(state, build.parse_dkms_status(SYNTHETIC_STATUS))
    assert finding.subject == "kernel 6.8.12-10-pve (running)" and "running kernel" in finding.what
    assert finding.evidence[0] == "nvidia/550.54.14, 6.8.4-2-pve, x86_64: installed"


@pytest.mark.parametrize("kernel, package", [("6.8.12-4-pve", "proxmox-headers-6.8.12-4-pve"), ("5.15.108-1-pve", "pve-headers-5.15.108-1-pve"),
                                             ("6.1.0-18-amd64", "linux-headers-6.1.0-18-amd64")])
def test_the_headers_package(kernel, package):
    assert build.headers_package(kernel) == package


def test_hostile_status_and_missing_trees(tmp_path):
    status = build.parse_dkms_status("\x1b[31mnvidia/1, k, x86_64: installed\x1b[0m\n" + "x" * 100000 + "\n")
    assert status["entries"] == [] and len(status["other"]) == 2
    assert build.installed_kernels(str(tmp_path / "none"), str(tmp_path)) == []
    state = build.build_state(str(tmp_path / "none"), str(tmp_path), str(tmp_path / "pin"), "6.8.4-2-pve", status)
    [finding] = build.build_findings(state, status)
    assert finding.subject == "kernel 6.8.4-2-pve (running)"


def test_a_loaded_module_counts_as_built_for_the_running_kernel(tmp_path):
    # As on the real H200 VM: the module is loaded (/sys/module/nvidia) but its file lies outside /lib/modules.
    state = build.build_state(str(tmp_path / "none"), str(tmp_path), str(tmp_path / "pin"), "6.18.44-fc-v1252-gpu", None,
                              loaded="/sys/module/nvidia")
    assert state["kernels"]["6.18.44-fc-v1252-gpu"]["loaded"] == "/sys/module/nvidia"
    assert build.build_findings(state, None) == []
