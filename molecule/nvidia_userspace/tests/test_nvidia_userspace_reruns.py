"""Reruns against a changed host: verify-only mismatch, a missing installer, a host driver update, a wrong GPU count.

Every test leaves the host as converge left it (kernel module 580.95.05, the same userspace installed).
"""

from __future__ import annotations

import pytest

from nvidia_checks import FLAGS, HOST_VERSION, LIBDIR, OPEN, OTHER_VERSION, installer_runs, preflight_result, set_host_module

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge


@pytest.fixture
def restore_host(host):
    yield
    set_host_module(host, HOST_VERSION)
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0] == HOST_VERSION


def test_mismatch_fails_with_both_versions_side_by_side(host, restore_host):
    set_host_module(host, OTHER_VERSION)
    runs_before = installer_runs(host)
    run = rerun_converge({"nvidia_userspace_install": False})
    assert run.rc != 0
    text = run.text
    assert f"host kernel module {OTHER_VERSION}, container userspace {HOST_VERSION}" in text
    assert "Driver/library version mismatch" in text
    assert installer_runs(host) == runs_before


def test_missing_installer_names_both_versions(host, restore_host):
    set_host_module(host, "580.105.08")
    run = rerun_converge()
    assert run.rc != 0
    text = run.text
    assert f"host kernel module 580.105.08, container userspace {HOST_VERSION}: could not get" in text
    assert "NVIDIA-Linux-x86_64-580.105.08.run" in text


def test_installer_of_another_version_is_refused(host, restore_host):
    set_host_module(host, "580.105.08")
    runs_before = installer_runs(host)
    run = rerun_converge({"nvidia_userspace_installer_url": f"file:///srv/nvidia-standin/NVIDIA-Linux-x86_64-{OTHER_VERSION}.run"})
    assert run.rc != 0
    assert f"host kernel module 580.105.08, installer NVIDIA-Linux-x86_64-{OTHER_VERSION}.run {OTHER_VERSION}" in run.text
    assert installer_runs(host) == runs_before


def test_host_driver_update_installs_the_new_version(host, restore_host):
    set_host_module(host, OTHER_VERSION, line=OPEN)
    runs_before = installer_runs(host)
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    assert installer_runs(host) == runs_before + [f"{OTHER_VERSION} {FLAGS}"]
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split() == [OTHER_VERSION] * 6
    assert not host.file(f"{LIBDIR}/libnvidia-ml.so.{HOST_VERSION}").exists
    # The container's preflight ran after the new userspace was verified: the kit's uvm node matches its major.
    preflight = preflight_result(run)
    assert preflight["error_count"] == 0, preflight["summary"]
    assert not [finding for finding in preflight["findings"] if finding["check"] == "uvm_node"], preflight["summary"]


def test_wrong_gpu_count_fails(host):
    run = rerun_converge({"nvidia_userspace_expected_gpu_count": 4})
    assert run.rc != 0
    assert "nvidia-smi inside the container lists 6 GPU(s) (GPU-" in run.text and "expected 4" in run.text, run.text


def test_an_assigned_gpu_that_was_not_passed_in_is_named_with_its_node(host):
    visible = host.check_output("nvidia-smi --query-gpu=uuid --format=csv,noheader").split()
    every = [line.split()[-1] for line in host.check_output("cat /srv/nvidia-standin/gpus/*/information").splitlines()
             if line.startswith("GPU UUID:")]
    (missing,) = sorted(set(every) - set(visible))
    run = rerun_converge({"nvidia_userspace_expected_gpu_uuids": visible[:1] + [missing]})
    assert run.rc != 0
    assert "%s (the host's GPU 6, /dev/nvidia6) is not usable here: its device node is not in the container" % missing in run.text, \
        run.text
    assert "%s (GPU 1 here) is visible but not assigned to this container" % visible[1] in run.text, run.text
