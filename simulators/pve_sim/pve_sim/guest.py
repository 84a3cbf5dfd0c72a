# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What PVE::LXC::Setup does to a new container's root filesystem at create: root's authorized_keys
(set_user_authorized_ssh_keys) and fresh SSH host keys (rewrite_ssh_host_keys), so that no two containers made from
one template share a host key.

Files are written from the host into the rootfs; a symlink on the way is refused (PVE writes them in a
protected_call, chrooted into the container, for the same reason: the rootfs belongs to the guest). They belong to the
container's root: host uid/gid 0 in a privileged container, the id map's root (100000) in an unprivileged one, as
PVE::LXC::Setup::Base's ct_reset_ownership/ct_make_path give them ``root_uid``/``root_gid``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from pve_sim.tasks import TaskFailed

PVE_SECTION_BEGIN = "# --- BEGIN PVE ---\n"
PVE_SECTION_END = "# --- END PVE ---\n"
# PVE::LXC::Setup::Base::ssh_host_key_types_to_generate
HOST_KEY_TYPES = (("rsa", "ssh_host_rsa_key"), ("ecdsa", "ssh_host_ecdsa_key"), ("ed25519", "ssh_host_ed25519_key"))
_FINGERPRINT_RE = re.compile(r"^(?:(?:[0-9a-f]{2}:)+[0-9a-f]{2}|SHA256:[0-9a-z+/]{43})\s+", re.IGNORECASE)
# (uid, gid) on the host of the container's root: a privileged container's.
HOST_ROOT = (0, 0)


def guest_path(rootfs, path, make_dirs=(), owner=HOST_ROOT):
    """The host path of ``path`` inside the container; no component of it may be a symlink.
    ``make_dirs``: {relative dir: mode} to create (owned by ``owner``, the container's root) when missing."""
    current = os.path.abspath(rootfs)
    parts = [part for part in path.strip("/").split("/") if part]
    for depth, part in enumerate(parts):
        current = os.path.join(current, part)
        relative = "/".join(parts[:depth + 1])
        if os.path.islink(current):
            raise TaskFailed("refusing to write through the symlink /%s in the container" % relative)
        if relative in dict(make_dirs) and not os.path.exists(current):
            os.mkdir(current, dict(make_dirs)[relative])
            os.chmod(current, dict(make_dirs)[relative])
            _chown(current, owner)
    return current


def _chown(path, owner):
    if os.geteuid() == 0:
        os.chown(path, owner[0], owner[1], follow_symlinks=False)


def _write_file(path, data, mode, owner=HOST_ROOT):
    """Replace ``path`` with ``data`` (owned by ``owner``, ``mode``), never following a symlink at ``path``."""
    temporary = "%s.pve-sim.%d" % (path, os.getpid())
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        _chown(temporary, owner)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def write_guest_file(rootfs, path, data, mode=0o644, owner=HOST_ROOT):
    """``data`` as the file ``path`` inside the container (ct_file_set_contents: replaced, ``mode``, the container root's),
    never through a symlink."""
    _write_file(guest_path(rootfs, path), data, mode, owner)


def merge_pve_section(old, data):
    """PVE::LXC::Setup::Base::ct_modify_file (append mode): ``data`` between the BEGIN/END PVE markers, replacing an
    existing section or appended after what the file holds. ``old`` is None when the file does not exist."""
    if data and not data.endswith("\n"):
        data += "\n"
    section = PVE_SECTION_BEGIN + data + PVE_SECTION_END
    if old is None:
        return section
    lines = old.split("\n")
    while lines and lines[-1] == "":  # Perl's split drops trailing empty fields
        lines.pop()
    begin = end = None
    for index, line in enumerate(lines):
        if begin is None and re.match(r"^#\s*---\s*BEGIN\s*PVE\s*", line):
            begin = index
        elif begin is not None and re.match(r"^#\s*---\s*END\s*PVE\s*", line, re.IGNORECASE):
            end = index
            break
    if begin is not None and end is not None:
        lines[begin:end + 1] = [section.rstrip("\n")]
        return "\n".join(lines) + "\n"
    return "\n".join(lines) + "\n" + section


def validate_ssh_public_keys(keys):
    """PVE::Tools::validate_ssh_public_keys: every non-blank line must be a key ``ssh-keygen -l`` reads.
    Returns None or the message PVE dies with."""
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not found on this host: cannot validate ssh-public-keys (install openssh-client)"
    work = tempfile.mkdtemp(prefix="pve-sim-sshkey.")
    try:
        for number, line in enumerate(keys.split("\n")):
            if not line.strip():
                continue
            path = os.path.join(work, "key%d" % number)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(line + "\n")
            result = subprocess.run(["ssh-keygen", "-l", "-f", path], capture_output=True, text=True, timeout=30, check=False)
            if result.returncode != 0:
                return "SSH public key validation error"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


def write_authorized_keys(rootfs, keys, owner=HOST_ROOT):
    """root's ~/.ssh/authorized_keys with ``keys`` in PVE's section: /root/.ssh 0700, the file 0600, both owned by
    the container's root (``owner`` on the host), which is what sshd's StrictModes accepts."""
    path = guest_path(rootfs, "/root/.ssh/authorized_keys", make_dirs={"root": 0o700, "root/.ssh": 0o700}, owner=owner)
    directory = os.path.dirname(path)
    os.chmod(directory, 0o700)
    _chown(directory, owner)
    old = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            old = handle.read()
    _write_file(path, merge_pve_section(old, keys), 0o600, owner)
    return path


def rewrite_ssh_host_keys(rootfs, hostname, log, owner=HOST_ROOT):
    """New rsa, ecdsa and ed25519 host keys for this container (comment root@<hostname>), written over whatever the
    template had, when the rootfs has /etc/ssh (PVE does nothing otherwise), owned by the container's root (``owner``
    on the host). Returns the public key lines."""
    ssh_dir = guest_path(rootfs, "/etc/ssh")
    if not os.path.isdir(ssh_dir):
        return []
    if shutil.which("ssh-keygen") is None:
        raise TaskFailed("ssh-keygen not found on this host: install openssh-client to create containers with /etc/ssh")
    comment = "root@%s" % (hostname or "localhost").split(".")[0]
    work = tempfile.mkdtemp(prefix="pve-sim-hostkey.")
    public_keys = []
    try:
        for key_type, basename in HOST_KEY_TYPES:
            log("Creating SSH host key '%s' - this may take some time ..." % basename)
            file = os.path.join(work, key_type)
            result = subprocess.run(["ssh-keygen", "-f", file, "-t", key_type, "-N", "", "-E", "sha256", "-C", comment],
                                    capture_output=True, text=True, timeout=120, check=False)
            if result.returncode != 0:
                raise TaskFailed("command 'ssh-keygen -t %s' failed: %s" % (key_type, result.stderr.strip()))
            fingerprint = next((line for line in result.stdout.splitlines() if _FINGERPRINT_RE.match(line)), "")
            log("done: %s" % fingerprint)
            with open(file, encoding="ascii") as handle:
                private = handle.read()
            with open(file + ".pub", encoding="ascii") as handle:
                public = handle.read()
            _write_file(guest_path(rootfs, "/etc/ssh/" + basename), private, 0o600, owner)
            _write_file(guest_path(rootfs, "/etc/ssh/%s.pub" % basename), public, 0o644, owner)
            public_keys.append(public.strip())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return public_keys
