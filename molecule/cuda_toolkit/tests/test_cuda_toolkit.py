"""The pinned toolkit from the local repository, no drivers, /usr/local/cuda, CUDA_HOME, and the major refusal."""

from __future__ import annotations

from cuda_checks import installed

from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge

HOME = "/usr/local/cuda-13.0"


def test_pinned_toolkit_and_keyring_installed(host):
    assert installed(host, "cuda-keyring")
    assert installed(host, "cuda-toolkit-13-0")
    assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"


def test_no_driver_or_metapackage_installed(host):
    for package in ("cuda", "cuda-drivers", "cuda-toolkit-12-8"):
        assert not installed(host, package), package


def test_apt_refuses_driver_packages(host):
    # The stand-in repository offers cuda-drivers and cuda; the role's pin must leave apt no candidate.
    policy = host.check_output("apt-cache policy cuda-drivers cuda")
    assert policy.count("Candidate: (none)") == 2, policy
    assert host.run("apt-get install --simulate --yes cuda-drivers").rc != 0


def test_repository_source_points_at_the_configured_url(host):
    sources = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").content_string
    assert "deb [trusted=yes] file:///srv/cuda-repo/ /" in sources


def test_cuda_link_and_nvcc(host):
    assert host.file("/usr/local/cuda").is_symlink
    assert host.check_output("readlink -f /usr/local/cuda") == HOME
    assert "Cuda compilation tools, release 13.0, V13.0.88" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_login_shell_has_cuda_home_and_nvcc(host):
    assert host.check_output("bash -lc 'echo $CUDA_HOME'") == HOME
    assert host.check_output("bash -lc 'command -v nvcc'") == f"{HOME}/bin/nvcc"


def test_toolkit_of_another_major_is_refused_before_installing(host):
    run = rerun_converge({"cuda_toolkit_version": "12.8"})
    assert run.rc != 0
    text = run.text
    assert "cuda_toolkit_version 12.8 is CUDA 12, but torch 2.14.1 (CUDA 13 build), pinned by sglang 0.5.23" in text
    assert "needs CUDA 13" in text
    assert not installed(host, "cuda-toolkit-12-8")
    assert host.check_output("readlink -f /usr/local/cuda") == HOME


def test_rerun_changes_nothing(host):
    run = rerun_converge()
    assert run.rc == 0, run.summary()
    assert run.stats[host.backend.host]["changed"] == 0, run.summary()
