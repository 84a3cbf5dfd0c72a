# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_sim's unprivileged containers on disk: the rootfs shifted into the id map, files it writes owned by the
container's root and never written through a symlink, the dev[n] copies with their mode/uid/gid, and the check that
the container's root can reach what LXC mounts for it. Most of it chowns and mknods: root only."""
from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile

import pytest

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import guest, idmap, pct_config  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.runtime import LxcRuntime, create_passthrough_node  # noqa: E402  pylint: disable=wrong-import-position
from pve_sim.tasks import TaskFailed  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown, mknod and running as another uid need root")

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA-placeholder-not-a-key test@example"
DEFAULT_MAP = list(idmap.DEFAULT_ID_MAP)


def owner(path):
    info = os.lstat(path)
    return info.st_uid, info.st_gid


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- the rootfs shift -----------------------------------------------------------------------------------

def test_the_rootfs_is_shifted_into_the_map_without_following_symlinks_and_keeps_setuid(tmp_path):
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "file").write_text("host\n")
    (outside / "target").write_text("host\n")
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "var" / "mail").mkdir(parents=True)
    su = rootfs / "usr" / "bin" / "su"
    su.write_text("#!/bin/sh\n")
    os.chmod(su, 0o4755)
    chage = rootfs / "usr" / "bin" / "chage"
    chage.write_text("#!/bin/sh\n")
    os.chown(chage, 0, 42)
    os.chmod(chage, 0o2755)
    os.chown(rootfs / "var" / "mail", 0, 8)
    os.chmod(rootfs / "var" / "mail", 0o2775)
    # Two names of one file (the template has some): shifted once, not twice.
    (rootfs / "usr" / "bin" / "perl").write_text("x\n")
    os.chown(rootfs / "usr" / "bin" / "perl", 7, 7)
    os.link(rootfs / "usr" / "bin" / "perl", rootfs / "usr" / "bin" / "perl5")
    # Symlinks out of the rootfs: the links are the container's, what they point to stays the host's.
    os.symlink(str(outside / "target"), str(rootfs / "file-link"))
    os.symlink(str(outside / "dir"), str(rootfs / "dir-link"))

    assert idmap.shift_rootfs(str(rootfs), DEFAULT_MAP) == 10
    assert owner(rootfs) == (100000, 100000) and owner(su) == (100000, 100000) and mode(su) == 0o4755
    assert owner(chage) == (100000, 100042) and mode(chage) == 0o2755
    assert owner(rootfs / "var" / "mail") == (100000, 100008) and mode(rootfs / "var" / "mail") == 0o2775
    assert owner(rootfs / "usr" / "bin" / "perl") == (100007, 100007) == owner(rootfs / "usr" / "bin" / "perl5")
    assert owner(rootfs / "file-link") == (100000, 100000) and owner(rootfs / "dir-link") == (100000, 100000)
    for path in (outside, outside / "target", outside / "dir", outside / "dir" / "file"):
        assert owner(path) == (0, 0), path


def test_an_owner_outside_the_id_map_fails_the_shift_like_tar_in_the_user_namespace(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "odd").write_text("x\n")
    os.chown(tmp_path / "etc" / "odd", 70000, 0)
    with pytest.raises(TaskFailed, match="^uid 70000 of /etc/odd is outside the container's id map$"):
        idmap.shift_rootfs(str(tmp_path), DEFAULT_MAP)
    assert idmap.shift_rootfs(str(tmp_path), []) == 0  # privileged: nothing to shift


class Log:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def test_a_rootfs_an_older_pve_sim_left_owned_by_host_root_is_shifted_once_at_start(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (rootfs / "etc" / "shadow").write_text("")
    os.chown(rootfs / "etc" / "shadow", 100000, 100042)  # an interrupted earlier shift got this far
    runtime, task = LxcRuntime(str(tmp_path / "state")), Log()
    runtime.upgrade_rootfs(120, pct_config.parse("unprivileged: 1\n"), str(rootfs), task)
    assert owner(rootfs) == (100000, 100000) == owner(rootfs / "etc" / "passwd")
    assert owner(rootfs / "etc" / "shadow") == (100000, 100042)
    assert task.lines[-1] == "shifted the owners of 3 files"
    runtime.upgrade_rootfs(120, pct_config.parse("unprivileged: 1\n"), str(rootfs), task)
    assert len(task.lines) == 2  # done: nothing more to do
    privileged = tmp_path / "privileged"
    privileged.mkdir()
    runtime.upgrade_rootfs(121, pct_config.parse("unprivileged: 0\n"), str(privileged), task)
    assert owner(privileged) == (0, 0) and len(task.lines) == 2


# -- files pve-sim writes into a rootfs ------------------------------------------------------------------

def test_authorized_keys_and_host_keys_belong_to_the_containers_root(tmp_path):
    (tmp_path / "etc" / "ssh").mkdir(parents=True)
    path = guest.write_authorized_keys(str(tmp_path), KEY, (100000, 100000))
    assert owner(path) == (100000, 100000) and owner(tmp_path / "root" / ".ssh") == (100000, 100000)
    assert owner(tmp_path / "root") == (100000, 100000) and mode(path) == 0o600
    if shutil.which("ssh-keygen"):
        guest.rewrite_ssh_host_keys(str(tmp_path), "ct", lambda _line: None, (100000, 100000))
        for _key_type, basename in guest.HOST_KEY_TYPES:
            assert owner(tmp_path / "etc" / "ssh" / basename) == (100000, 100000)
            assert owner(tmp_path / "etc" / "ssh" / (basename + ".pub")) == (100000, 100000)


def test_hostname_and_hosts_are_written_as_the_containers_root(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hostname").write_text("template\n")
    runtime = LxcRuntime(str(tmp_path / "state"))
    runtime.setup_guest(120, pct_config.parse("hostname: gpu1\nunprivileged: 1\n"), str(rootfs))
    assert (rootfs / "etc" / "hostname").read_text() == "gpu1\n" and "127.0.1.1 gpu1\n" in (rootfs / "etc" / "hosts").read_text()
    assert owner(rootfs / "etc" / "hostname") == (100000, 100000) == owner(rootfs / "etc" / "hosts")
    runtime.setup_guest(120, pct_config.parse("hostname: gpu1\nunprivileged: 0\n"), str(rootfs))
    assert owner(rootfs / "etc" / "hostname") == (0, 0) and mode(rootfs / "etc" / "hostname") == 0o644


@pytest.mark.parametrize("planted,is_directory", [("etc/hostname", False), ("etc/hosts", False), ("etc", True),
                                                  ("root/.ssh/authorized_keys", False), ("root/.ssh", True)])
def test_a_symlink_planted_in_the_rootfs_is_never_written_through(tmp_path, planted, is_directory):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("host file\n")
    rootfs = tmp_path / "rootfs"
    for directory in ("etc", "root/.ssh"):
        (rootfs / directory).mkdir(parents=True)
    link = rootfs / planted
    if is_directory:
        link.rmdir()
    os.symlink(str(outside) if is_directory else str(outside / "victim"), str(link))
    with pytest.raises(TaskFailed, match="^refusing to write through the symlink /%s in the container$" % planted):
        if planted.startswith("root"):
            guest.write_authorized_keys(str(rootfs), KEY, (100000, 100000))
        else:
            LxcRuntime(str(tmp_path / "state")).setup_guest(120, pct_config.parse("hostname: ct\nunprivileged: 1\n"), str(rootfs))
    assert sorted(os.listdir(outside)) == ["victim"] and (outside / "victim").read_text() == "host file\n"
    assert owner(outside / "victim") == (0, 0)


# -- dev[n]: copies of the host nodes ----------------------------------------------------------------------

def devices(text):
    return pct_config.parse(text).devices()


def test_dev_entries_are_copied_with_their_mode_and_mapped_uid_and_gid(tmp_path):
    base = tmp_path / "ct" / "passthrough"
    (tmp_path / "ct").mkdir()
    null = os.stat("/dev/null")
    plain, opened, grouped = devices("dev0: /dev/null\ndev1: /dev/zero,mode=0666\ndev2: /dev/full,gid=44,uid=5\n")
    copy = create_passthrough_node(str(base), plain, DEFAULT_MAP)
    assert copy == str(base / "dev" / "null")
    info = os.lstat(copy)
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == null.st_rdev
    assert (mode(copy), owner(copy)) == (0o660, (100000, 100000))  # PVE's default: 0660, the container's root
    assert (mode(create_passthrough_node(str(base), opened, DEFAULT_MAP)), owner(base / "dev" / "zero")) == (0o666, (100000, 100000))
    assert owner(create_passthrough_node(str(base), grouped, DEFAULT_MAP)) == (100005, 100044)
    assert mode(base) == 0o755 and mode(base / "dev") == 0o755
    # A privileged container: the ids as they are.
    (tmp_path / "priv").mkdir()
    assert owner(create_passthrough_node(str(tmp_path / "priv" / "passthrough"), grouped, [])) == (5, 44)
    with pytest.raises(TaskFailed, match="is not a valid device path"):
        create_passthrough_node(str(base), devices("dev0: /dev/../etc/shadow\n")[0], DEFAULT_MAP)


def test_the_copies_are_made_afresh_at_each_start(tmp_path):
    runtime = LxcRuntime(str(tmp_path / "state"))
    os.makedirs(os.path.join(runtime.lxcpath, runtime.container_name(120)))
    config = pct_config.parse("dev0: /dev/null,mode=0666\nunprivileged: 1\n")
    first = runtime.make_passthrough_nodes(120, config)
    stale = os.path.join(runtime.passthrough_dir(120), "dev", "stale")
    with open(stale, "w", encoding="utf-8") as handle:
        handle.write("x\n")
    assert runtime.make_passthrough_nodes(120, pct_config.parse("dev0: /dev/null\n")) == first
    assert not os.path.exists(stale) and (mode(first[0]), owner(first[0])) == (0o660, (0, 0))


# -- what LXC mounts as the container's root -----------------------------------------------------------

def test_an_unprivileged_start_is_refused_where_the_containers_root_cannot_reach_its_rootfs():
    top = tempfile.mkdtemp(prefix="pve-sim-reach.")
    try:
        os.chmod(top, 0o711)
        for name, directory_mode in (("open", 0o755), ("closed", 0o700)):
            os.makedirs(os.path.join(top, name, "rootfs"))
            os.chmod(os.path.join(top, name), directory_mode)
        reachable, hidden = os.path.join(top, "open", "rootfs"), os.path.join(top, "closed", "rootfs")
        assert idmap.unreachable([reachable, hidden], 100000, 100000) == {hidden: os.path.join(top, "closed")}
        runtime = LxcRuntime(os.path.join(top, "state"))
        unprivileged = pct_config.parse("unprivileged: 1\n")
        runtime.check_reachable(120, unprivileged, reachable, [])
        with pytest.raises(TaskFailed, match="^unprivileged CT 120: its root \\(host uid 100000\\) cannot reach %s: %s is not searchable"
                           % (hidden, os.path.join(top, "closed"))):
            runtime.check_reachable(120, unprivileged, hidden, [])
        # A bind mount point's host directory too.
        with pytest.raises(TaskFailed, match="cannot reach %s/data:" % hidden):
            os.makedirs(os.path.join(hidden, "data"))
            runtime.check_reachable(120, pct_config.parse("unprivileged: 1\nmp0: %s/data,mp=/data\n" % hidden), reachable, [])
        # A privileged container's root is host root: nothing to check.
        runtime.check_reachable(120, pct_config.parse("unprivileged: 0\n"), hidden, [])
    finally:
        shutil.rmtree(top)
