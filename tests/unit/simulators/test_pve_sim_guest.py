# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's setup of a new container's rootfs (authorized_keys, fresh SSH host keys) and the template recipe check."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import cli, guest  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.tasks import TaskFailed  # noqa: E402  pylint: disable=wrong-import-position

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA-placeholder-not-a-key test@example"


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def sim_cli(*args):
    env = dict(os.environ, PYTHONPATH=SIM_SOURCE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pve_sim"] + [str(arg) for arg in args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


# -- authorized_keys --------------------------------------------------------------------------------

def test_the_pve_section_is_written_appended_or_replaced_like_ct_modify_file():
    assert guest.merge_pve_section(None, "k1") == "# --- BEGIN PVE ---\nk1\n# --- END PVE ---\n"
    assert guest.merge_pve_section("own key\n", "k1\n") == "own key\n# --- BEGIN PVE ---\nk1\n# --- END PVE ---\n"
    old = "a\n# --- BEGIN PVE ---\nold\n# --- END PVE ---\nb\n"
    assert guest.merge_pve_section(old, "k2") == "a\n# --- BEGIN PVE ---\nk2\n# --- END PVE ---\nb\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the files are chowned to root")
def test_authorized_keys_have_the_modes_and_owner_sshd_accepts(tmp_path):
    (tmp_path / "root").mkdir(mode=0o755)
    path = guest.write_authorized_keys(str(tmp_path), KEY)
    assert path == str(tmp_path / "root" / ".ssh" / "authorized_keys")
    assert (tmp_path / "root" / ".ssh" / "authorized_keys").read_text() == "# --- BEGIN PVE ---\n%s\n# --- END PVE ---\n" % KEY
    assert mode(tmp_path / "root" / ".ssh") == 0o700 and mode(path) == 0o600
    assert os.stat(path).st_uid == 0 and os.stat(path).st_gid == 0


def test_keys_are_never_written_through_a_symlink_in_the_rootfs(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    os.symlink(str(outside), str(rootfs / "root"))
    with pytest.raises(TaskFailed, match="refusing to write through the symlink /root in the container"):
        guest.write_authorized_keys(str(rootfs), KEY)
    assert not list(outside.iterdir())


# -- SSH host keys -------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_each_container_gets_its_own_host_keys_like_rewrite_ssh_host_keys(tmp_path):
    logged = []
    found = {}
    for name in ("ct1", "ct2"):
        rootfs = tmp_path / name
        (rootfs / "etc" / "ssh").mkdir(parents=True)
        # What a template may ship: a key that must not survive into the container.
        (rootfs / "etc" / "ssh" / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAA template\n")
        public = guest.rewrite_ssh_host_keys(str(rootfs), "%s.example.org" % name, logged.append)
        assert [line.split()[0] for line in public] == ["ssh-rsa", "ecdsa-sha2-nistp256", "ssh-ed25519"]
        assert all(line.endswith(" root@%s" % name) for line in public)
        for _key_type, basename in guest.HOST_KEY_TYPES:
            assert mode(rootfs / "etc" / "ssh" / basename) == 0o600 and mode(rootfs / "etc" / "ssh" / (basename + ".pub")) == 0o644
        found[name] = (rootfs / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text()
        assert "template" not in found[name]
    assert found["ct1"] != found["ct2"]
    assert logged[0] == "Creating SSH host key 'ssh_host_rsa_key' - this may take some time ..."
    assert logged[1].startswith("done: SHA256:") and logged[1].endswith(" root@ct1")


def test_a_rootfs_without_etc_ssh_gets_no_host_keys(tmp_path):
    assert guest.rewrite_ssh_host_keys(str(tmp_path), "ct", lambda _line: None) == []
    assert not (tmp_path / "etc").exists()


# -- the template recipe -------------------------------------------------------------------------------

def test_the_template_recipe_includes_sshd_and_drops_host_keys():
    recipe = cli.template_recipe()
    assert "openssh-server" in recipe["include"] and "ssh.service" in recipe["enabled"]
    assert "etc/ssh/ssh_host_*" in recipe["removed"]
    assert cli.recipe_digest() == cli.recipe_digest(dict(recipe))
    assert cli.recipe_digest(dict(recipe, include=recipe["include"][:-1])) != cli.recipe_digest()


def test_finish_rootfs_masks_enables_and_removes_host_keys(tmp_path):
    (tmp_path / "etc" / "ssh").mkdir(parents=True)
    (tmp_path / "etc" / "systemd" / "system").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "apt" / "lists" / "lock").write_text("")
    (tmp_path / "var" / "lib" / "apt" / "lists" / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text("x\n")
    (tmp_path / "etc" / "apt").mkdir(parents=True)
    (tmp_path / "etc" / "apt" / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    for name in ("ssh_host_rsa_key", "ssh_host_rsa_key.pub", "sshd_config"):
        (tmp_path / "etc" / "ssh" / name).write_text("x\n")
    cli.finish_rootfs(str(tmp_path))
    assert sorted(os.listdir(tmp_path / "etc" / "ssh")) == ["sshd_config"]
    assert os.readlink(tmp_path / "etc" / "systemd" / "system" / "multi-user.target.wants" / "ssh.service") == "/lib/systemd/system/ssh.service"
    assert os.readlink(tmp_path / "etc" / "systemd" / "system" / "getty.target") == "/dev/null"
    # The lists are gone, apt's lock file and partial directory stay (apt needs them to take its lock).
    assert sorted(os.listdir(tmp_path / "var" / "lib" / "apt" / "lists")) == ["lock", "partial"]
    # No mirror the containers cannot reach.
    assert "deb " not in (tmp_path / "etc" / "apt" / "sources.list").read_text().replace("# ", "")


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs zstd")
def test_the_root_file_system_is_made_outside_the_templates_directory(tmp_path, monkeypatch):
    # debootstrap mounts /proc in the root file system while it runs; the templates' directory is often in a checkout
    # (.build/pve-sim-cache), which ansible-galaxy collection build walks (EINVAL on rootfs/proc/<pid>/net). A
    # debootstrap stand-in records where it was asked to install and what the templates' directory held meanwhile.
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(cli.tempfile, "tempdir", None)
    seen = {}
    real_run = cli.subprocess.run

    def run(argv, **options):
        if argv[0] != "debootstrap":
            return real_run(argv, **options)
        rootfs = argv[-2]
        seen.update(rootfs=rootfs, beside=sorted(os.listdir(cache)))
        for directory in ("etc/apt", "etc/systemd/system"):
            os.makedirs(os.path.join(rootfs, directory))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(cli.subprocess, "run", run)
    output = cache / "debian-13-standard_13.1-2_amd64.tar.zst"
    assert cli.build_template(str(output)) == str(output)
    assert seen["rootfs"].startswith(str(tmp_path / "tmp") + os.sep), seen
    # Beside the output only the packed tarball's temporary name, which replaced the output: nothing is left but it.
    assert [name for name in seen["beside"] if not name.endswith(".partial")] == []
    assert sorted(os.listdir(cache)) == [output.name, output.name + ".recipe"]
    assert os.listdir(tmp_path / "tmp") == []


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs zstd")
def test_template_check_says_whether_the_tarball_matches_the_current_recipe(tmp_path):
    tarball = tmp_path / cli.DEFAULT_TEMPLATE
    missing = sim_cli("template", "check", "--output", tarball)
    assert missing.returncode == 1 and "does not exist" in missing.stdout
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hostname").write_text("t\n")
    # Packed from a rootfs: not the recipe's template, so no recipe file and "stale".
    packed = sim_cli("template", "build", "--output", tarball, "--from-rootfs", rootfs)
    assert packed.returncode == 0, packed.stderr
    assert tarball.exists() and not (tmp_path / (cli.DEFAULT_TEMPLATE + ".recipe")).exists()
    stale = sim_cli("template", "check", "--output", tarball)
    assert stale.returncode == 1 and "has no recipe file" in stale.stdout
    recipe_file = tmp_path / (cli.DEFAULT_TEMPLATE + ".recipe")
    recipe_file.write_text(json.dumps({"digest": cli.recipe_digest()}))
    current = sim_cli("template", "check", "--output", tarball)
    assert current.returncode == 0 and "matches the current recipe" in current.stdout
    recipe_file.write_text(json.dumps({"digest": "0" * 64}))
    older = sim_cli("template", "check", "--output", tarball)
    assert older.returncode == 1 and "was built from recipe 000000000000" in older.stdout
