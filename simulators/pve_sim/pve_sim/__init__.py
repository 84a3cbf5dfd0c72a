# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim: a Proxmox VE node simulator (PVE API subset over HTTPS, containers realised with LXC)."""
from __future__ import annotations

__version__ = "0.1.0"
# What /version answers: a PVE 9 node (pve-manager 9.0.x, pve-container 6.x).
PVE_RELEASE = "9.0"
PVE_VERSION = "9.0.10"
PVE_REPOID = "deb1ca707ec72a89"
