"""After converge and the idempotence run: the host's version installed once, non-interactively, and visible."""

from __future__ import annotations

from nvidia_checks import FLAGS, HOST_VERSION, LIBDIR, installer_runs


def test_installer_ran_once_with_the_container_flags(host):
    # converge installed it; molecule's idempotence run found the same version and did not run it again.
    assert installer_runs(host) == [f"{HOST_VERSION} {FLAGS}"]


def test_userspace_has_the_host_kernel_module_version(host):
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split() == [HOST_VERSION] * 6
    assert host.file(f"{LIBDIR}/libnvidia-ml.so.{HOST_VERSION}").exists
    assert host.file(f"{LIBDIR}/libnvidia-ml.so.1").linked_to == f"{LIBDIR}/libnvidia-ml.so.{HOST_VERSION}"


def test_the_gpus_passed_in_are_visible_and_only_those(host):
    # Seven GPUs on the "node" (the driver's list the container sees), six of them passed in.
    assert host.check_output("nvidia-smi -L").count("GPU ") == 6
    assert len(host.check_output("ls /srv/nvidia-standin/gpus").split()) == 7


def test_installer_kept_for_the_record(host):
    assert host.file(f"/var/cache/llmops-serving/nvidia/NVIDIA-Linux-x86_64-{HOST_VERSION}.run").mode == 0o755
