# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Proxmox VE node of each major release answers and enforces (``pve-sim start --release 8|9``).

Only what differs between the releases and matters to a client lives here; everything else is the same code for both.

- ``version``/``repoid``/``kernel``: what ``/version`` and ``/nodes/{node}/status`` print, from public ``pveversion``
  output (8: ``pve-manager: 8.3.2 (running version: 8.3.2/3e76eec21c4a14a7)`` with ``proxmox-ve: 8.3.0 (running kernel:
  6.8.12-5-pve)``, zhaodice/proxmox-ve-anti-detection issue 28; 9: ``pve-manager/9.1.6/71482d1833ded40a (running kernel:
  6.17.13-2-pve)``, theori-io/copy-fail-CVE-2026-31431 issue 38; 6.17 is PVE 9.1's default kernel).
- ``default_unprivileged``: what ``POST /lxc`` makes without ``unprivileged`` (pve-container 6.0.6, PVE 9: "api: create
  CT: default to unprivileged containers"; the PVE 8 schema's default is 0, a privileged container).
- ``cgroup_layouts``: how the node mounts its cgroups. Both boot pure cgroup v2 by default (PVE 7.0 made it the default);
  PVE 8 can still boot the hybrid layout (``systemd.unified_cgroup_hierarchy=0``), PVE 9 cannot ("removed entirely with
  Proxmox VE 9.0", pve-docs pct.adoc). On a pure cgroup v2 node LXC ignores every ``lxc.cgroup.*`` (v1) setting of a
  container with one warning (cgfsng_setup_limits_legacy: "Ignoring legacy cgroup limits on pure cgroup2 system"), so a
  v1 ``devices.allow`` line allows nothing there.
"""
from __future__ import annotations

import collections

Release = collections.namedtuple("Release", "major version repoid kernel default_unprivileged cgroup_layouts")

RELEASES = {
    "8": Release(major=8, version="8.3.2", repoid="3e76eec21c4a14a7", kernel="6.8.12-5-pve", default_unprivileged=False,
                 cgroup_layouts=("unified", "hybrid")),
    "9": Release(major=9, version="9.1.6", repoid="71482d1833ded40a", kernel="6.17.13-2-pve", default_unprivileged=True,
                 cgroup_layouts=("unified",)),
}
DEFAULT_RELEASE = "9"
# LXC's warning when a container has v1 settings on a pure cgroup v2 node (src/lxc/cgroups/cgfsng.c), as its log shows it.
LEGACY_LIMITS_IGNORED = "Invalid argument - Ignoring legacy cgroup limits on pure cgroup2 system"


class ReleaseError(ValueError):
    """A release or cgroup layout this simulator (or Proxmox VE) does not have."""


def release(name):
    """The Release for ``name`` (``8`` or ``9``)."""
    if name not in RELEASES:
        raise ReleaseError("pve-sim simulates Proxmox VE %s, not %r" % (" and ".join(sorted(RELEASES)), name))
    return RELEASES[name]


def check_layout(chosen, layout):
    """Refuse a cgroup layout the release cannot boot, with the documentation's reason."""
    if layout not in chosen.cgroup_layouts:
        raise ReleaseError("Proxmox VE %d boots only the %s cgroup layout: support for the hybrid cgroup hierarchy is removed "
                           "in Proxmox VE 9" % (chosen.major, " or ".join(chosen.cgroup_layouts)))
    return layout


def node_cgroup_version(layout):
    """The cgroup version whose ``lxc.cgroup*`` keys LXC applies on a node with this layout: 2 on a pure cgroup v2
    node, 1 on a hybrid one (where the devices, memory and cpuset controllers are v1)."""
    return 2 if layout == "unified" else 1
