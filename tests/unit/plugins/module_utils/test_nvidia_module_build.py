"""nvidia_module_build: dkms status in both formats, installed kernels, the next-boot kernel with and without a
proxmox-boot-tool pin, and nvidia_module_not_built for the running and the next-boot kernel.

Real `dkms status` outputs from public issues (data/gpu_preflight/public, verbatim; sources in PUBLIC_DKMS below):
dkms 2's comma format, dkms 3's slash format, `added`, `built`, `(original_module exists)`, dkms's `Error!` lines and
the `(WARNING! Diff between built and installed module!)` suffix on a Proxmox `-pve` kernel (an i915 module there: no
public `dkms status` of an NVIDIA module on a `-pve` kernel with a citable source was found). The kernel and module
trees around them are synthetic, as are SYNTHETIC_STATUS's lines, labelled as such."""
from __future__ import annotations

import os
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_module_build as build
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import public

# Each file is whole lines of one paste; the prompt lines (`$ dkms status` ...) are the poster's, kept verbatim.
PUBLIC_DKMS = {
    "dkms-status-comma-negativo17-56.txt": "https://github.com/negativo17/nvidia-driver/issues/56",
    "dkms-status-error-negativo17-56.txt": "https://github.com/negativo17/nvidia-driver/issues/56",
    "dkms-status-slash-rtl8852bu-7.txt": "https://github.com/morrownr/rtl8852bu/issues/7",
    "dkms-status-added-ogkm-526.txt": "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/526",
    "dkms-status-diff-warning-i915-sriov-274.txt": "https://github.com/strongtz/i915-sriov-dkms/issues/274",
}

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


# --------------------------------------------------------------------------- real dkms status outputs

def runs(name):
    """The outputs of each `dkms status` in a public paste: the lines after each prompt line, in order."""
    outputs = []
    for line in public(name).splitlines():
        if "dkms status" in line:
            outputs.append([])
        elif outputs:
            outputs[-1].append(line)
    return ["".join(text + "\n" for text in lines) for lines in outputs]


def records(status):
    return [(e["module"], e["version"], e["kernel"], e["arch"], e["state"], e["extra"]) for e in status["entries"]]


def tree(tmp_path, kernels, module_in=()):
    """Synthetic: installed kernels (module tree and vmlinuz), ``nvidia.ko`` only in those of ``module_in``."""
    modules, boot = tmp_path / "lib/modules", tmp_path / "boot"
    boot.mkdir()
    for kernel in kernels:
        (modules / kernel / "kernel").mkdir(parents=True)
        (boot / ("vmlinuz-" + kernel)).write_text("")
        if kernel in module_in:
            (modules / kernel / "updates/dkms").mkdir(parents=True)
            (modules / kernel / "updates/dkms/nvidia.ko").write_text("")
    return {"modules": str(modules), "boot": str(boot), "pin": str(tmp_path / "etc/kernel/proxmox-boot-pin")}


def findings_for(paths, running, status, loaded=None):
    state = build.build_state(paths["modules"], paths["boot"], paths["pin"], running, status, loaded)
    return build.build_findings(state, status)


FEDORA = ["4.17.11-200.fc28.x86_64", "4.17.12-200.fc28.x86_64", "4.17.14-202.fc28.x86_64"]


def test_real_dkms2_comma_format_three_kernels_installed(tmp_path):
    [output] = runs("dkms-status-comma-negativo17-56.txt")
    status = build.parse_dkms_status(output)
    assert records(status) == [("nvidia", "396.45", kernel, "x86_64", "installed", "") for kernel in FEDORA]
    assert status["other"] == []
    assert build.dkms_installed(status, FEDORA[0]) == "nvidia, 396.45, 4.17.11-200.fc28.x86_64, x86_64: installed"
    # No nvidia.ko in the (synthetic) trees: dkms's word alone counts, for the running and the next-boot kernel.
    paths = tree(tmp_path, FEDORA)
    assert findings_for(paths, FEDORA[0], status) == []
    assert findings_for(paths, FEDORA[2], status) == []


def test_real_dkms_error_lines_then_original_module_exists(tmp_path):
    broken, fixed = [build.parse_dkms_status(text) for text in runs("dkms-status-error-negativo17-56.txt")]
    assert broken["entries"] == []
    assert broken["other"] == ["Error! Could not locate dkms.conf file.",
                               "File: /var/lib/dkms/nvidia/390.48/source/dkms.conf does not exist."]
    assert records(fixed) == [("nvidia", "396.45", FEDORA[2], "x86_64", "installed", "(original_module exists)")]
    assert build.dkms_installed(fixed, FEDORA[2]).endswith("x86_64: installed (original_module exists)")
    paths = tree(tmp_path, FEDORA[1:])
    assert findings_for(paths, FEDORA[2], fixed) == []
    # The broken dkms tree: no module for the running kernel, and the evidence carries dkms's own error lines.
    [finding] = findings_for(paths, FEDORA[2], broken)
    assert (finding.check, finding.severity, finding.subject) == ("nvidia_module_not_built", "error", "kernel %s (running)" % FEDORA[2])
    assert finding.evidence == ["dkms status lists no nvidia module", "Error! Could not locate dkms.conf file.",
                                "File: /var/lib/dkms/nvidia/390.48/source/dkms.conf does not exist.",
                                "no nvidia.ko* or nvidia-current*.ko* under the module tree of %s" % FEDORA[2]]
    assert finding.fix.startswith("apt install linux-headers-%s, then dkms autoinstall -k %s" % (FEDORA[2], FEDORA[2]))


def test_real_dkms3_slash_format_installed_for_the_running_kernel(tmp_path):
    [output] = runs("dkms-status-slash-rtl8852bu-7.txt")
    status = build.parse_dkms_status(output)
    kernel = "6.5.0-060500rc5-generic"
    assert records(status) == [("nvidia", "535.86.05", kernel, "x86_64", "installed", ""),
                               ("rtl8852bu", "1.19.3", kernel, "x86_64", "installed", "")]
    assert build.dkms_installed(status, kernel) == "nvidia/535.86.05, 6.5.0-060500rc5-generic, x86_64: installed"
    assert findings_for(tree(tmp_path, [kernel]), kernel, status) == []


def test_real_added_only_leaves_the_next_boot_kernel_without_a_module(tmp_path):
    # As in the issue: the driver worked on 6.3.9 (loaded, synthetic here); after the update to 6.4.1 dkms has only
    # added the source (no kernel), so the kernel booted next has no nvidia module.
    [output] = runs("dkms-status-added-ogkm-526.txt")
    status = build.parse_dkms_status(output)
    assert records(status) == [("nvidia", "390.157", None, None, "added", ""),
                               ("vboxhost", "7.0.8_OSE", "6.4.1-zen1-1-zen", "x86_64", "installed", ""),
                               ("vhba-module", "20211218", "6.4.1-zen1-1-zen", "x86_64", "built", "")]
    assert status["other"] == ["Result:"]
    assert build.dkms_installed(status, "6.4.1-zen1-1-zen") is None
    paths = tree(tmp_path, ["6.3.9-zen1-1-zen", "6.4.1-zen1-1-zen"])
    [finding] = findings_for(paths, "6.3.9-zen1-1-zen", status, loaded="/sys/module/nvidia")
    assert (finding.check, finding.severity, finding.subject) == ("nvidia_module_not_built", "error", "kernel 6.4.1-zen1-1-zen (next boot)")
    assert finding.evidence == ["nvidia/390.157: added", "no nvidia.ko* or nvidia-current*.ko* under the module tree of 6.4.1-zen1-1-zen"]
    assert "the kernel the node boots next (the newest installed)" in finding.what
    assert finding.fix.startswith("apt install linux-headers-6.4.1-zen1-1-zen, then dkms autoinstall -k 6.4.1-zen1-1-zen")
    assert finding.fix.endswith("proxmox-boot-tool kernel pin 6.3.9-zen1-1-zen")
    # Running the new kernel itself, the same lines are the error for the running kernel.
    [finding] = findings_for(paths, "6.4.1-zen1-1-zen", status)
    assert finding.subject == "kernel 6.4.1-zen1-1-zen (running)"


def test_real_pve_line_with_the_diff_warning_is_installed_but_not_nvidia(tmp_path):
    [output] = runs("dkms-status-diff-warning-i915-sriov-274.txt")
    status = build.parse_dkms_status(output)
    assert records(status) == [("i915-sriov-dkms", "2025.03.26", "6.11.11-2-pve", "x86_64", "installed",
                                "(WARNING! Diff between built and installed module!)")]
    assert build.dkms_installed(status, "6.11.11-2-pve") is None  # installed, but not the nvidia module
    [finding] = findings_for(tree(tmp_path, ["6.11.11-2-pve"]), "6.11.11-2-pve", status)
    assert finding.subject == "kernel 6.11.11-2-pve (running)"
    assert finding.evidence[0] == "dkms status lists no nvidia module"
    assert finding.fix.startswith("apt install proxmox-headers-6.11.11-2-pve, then dkms autoinstall -k 6.11.11-2-pve")


# --------------------------------------------------------------------------- Debian's packages, Proxmox VE 9 kernels

# Debian's dkms.conf (first lines, verbatim from the .deb files of deb.debian.org: nvidia-kernel-dkms 535.261.03-1 in
# bookworm and 550.163.01-2 in trixie, nvidia-open-kernel-dkms 550.163.01-2 in trixie): the module's dkms name.
DEBIAN_DKMS_CONF = {"dkms-conf-debian-nvidia-kernel-dkms-535.261.03-1.conf": "nvidia-current",
                    "dkms-conf-debian-nvidia-kernel-dkms-550.163.01-2.conf": "nvidia-current",
                    "dkms-conf-debian-nvidia-open-kernel-dkms-550.163.01-2.conf": "nvidia-current-open"}


@pytest.mark.parametrize("name, package", sorted(DEBIAN_DKMS_CONF.items()))
def test_the_module_names_and_kernel_rule_are_debians_own(name, package):
    conf = dict(line.split("=", 1) for line in public(name).splitlines() if "=" in line and not line.startswith("#"))
    assert conf["PACKAGE_NAME"] == '"%s"' % package and package in build.DEBIAN_DKMS_MODULES
    # BUILD_EXCLUSIVE_KERNEL="^(3\.[1-9][0-9]|[4-9]\.)" takes 4.x to 9.x: dkms does try Linux 7.x (it may fail there).
    assert re.match(conf["BUILD_EXCLUSIVE_KERNEL"].strip('"'), "7.0.14-1-pve")


# Synthetic lines in dkms 3's format (dkms's do_status: "<module>/<version>, <kernel>, <arch>: <state>"), with Debian's
# module name; kernels as Proxmox VE 9.1 (6.17) and 9.2 (7.0) name them.
PVE9 = ["6.17.13-2-pve", "7.0.14-1-pve"]


def test_debians_module_installed_for_the_next_kernel_is_no_finding(tmp_path):
    paths = tree(tmp_path, PVE9)
    (tmp_path / "lib/modules" / PVE9[1] / "updates/dkms").mkdir(parents=True)
    (tmp_path / "lib/modules" / PVE9[1] / "updates/dkms/nvidia-current.ko.xz").write_text("")
    status = build.parse_dkms_status("nvidia-current/550.163.01, %s, x86_64: installed\n" % PVE9[0])
    # The running kernel: dkms says installed; the next one: Debian's module file is there (before: both "not built").
    assert findings_for(paths, PVE9[0], status) == []
    assert build.dkms_installed(status, PVE9[0]).startswith("nvidia-current/550.163.01")
    # The open variant's dkms name counts the same.
    open_status = build.parse_dkms_status("nvidia-current-open/550.163.01, %s, x86_64: installed\n" % PVE9[0])
    assert build.dkms_installed(open_status, PVE9[0]) is not None
    # A module of another name that starts with nvidia (GPUDirect Storage's) is not the driver.
    assert build.dkms_installed(build.parse_dkms_status("nvidia-fs/2.20.5, %s, x86_64: installed\n" % PVE9[0]), PVE9[0]) is None


def test_a_next_kernel_7_with_debians_driver_has_no_known_cause_and_gets_the_generic_fix(tmp_path):
    paths = tree(tmp_path, PVE9, module_in=[PVE9[0]])
    status = build.parse_dkms_status("nvidia-current/550.163.01, %s, x86_64: installed\n" % PVE9[0])
    [finding] = findings_for(paths, PVE9[0], status)
    assert finding.subject == "kernel 7.0.14-1-pve (next boot)" and finding.what.endswith("(the newest installed)")
    assert finding.fix == ("apt install proxmox-headers-7.0.14-1-pve, then dkms autoinstall -k 7.0.14-1-pve (or reinstall "
                           "the driver for that kernel); or keep booting the working kernel: proxmox-boot-tool kernel pin "
                           "6.17.13-2-pve")


def test_trixies_550_163_01_on_6_17_names_the_backports_release(tmp_path):
    paths = tree(tmp_path, ["6.14.11-4-pve", PVE9[0]], module_in=["6.14.11-4-pve"])
    status = build.parse_dkms_status("nvidia-current/550.163.01, 6.14.11-4-pve, x86_64: installed\n")
    [finding] = findings_for(paths, "6.14.11-4-pve", status)
    assert "550.163.01-2 does not build for Linux 6.17" in finding.what
    assert "trixie-backports' 550.163.01-4~bpo13+1" in finding.fix and "dkms autoinstall -k 6.17.13-2-pve" in finding.fix
    # The same driver on a 6.14 kernel it did not build for: no known cause, the generic fix.
    (tmp_path / "b").mkdir()
    [generic] = findings_for(tree(tmp_path / "b", ["6.8.12-9-pve", "6.14.11-4-pve"], module_in=["6.8.12-9-pve"]),
                             "6.8.12-9-pve", build.parse_dkms_status("nvidia-current/550.163.01, 6.8.12-9-pve, x86_64: installed\n"))
    assert generic.fix.startswith("apt install proxmox-headers-6.14.11-4-pve, then dkms autoinstall -k 6.14.11-4-pve")


@pytest.mark.parametrize("version, known", [("580.119.02", True), ("580.126.18", True), ("595.71.05", True),
                                            ("595.91.07", False), ("610.57.04", False), ("610.43.01", True),
                                            ("580.159.04", False)])
def test_nvidias_releases_reported_not_to_build_for_7_0(tmp_path, version, known):
    paths = tree(tmp_path, PVE9, module_in=[PVE9[0]])
    status = build.parse_dkms_status("nvidia/%s, %s, x86_64: installed\n" % (version, PVE9[0]))
    [finding] = findings_for(paths, PVE9[0], status)
    assert ("lacks the Linux 7.0 build fixes of 595.91.07 and 610.57.04" in finding.what) is known
    assert finding.fix.startswith("install NVIDIA's driver 595.91.07") is known
