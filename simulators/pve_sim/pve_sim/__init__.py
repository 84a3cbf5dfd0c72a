# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim: a Proxmox VE node simulator (PVE API subset over HTTPS, containers realised with LXC)."""
from __future__ import annotations

__version__ = "0.1.0"
