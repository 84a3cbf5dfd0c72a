# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the tests and benchmarks run Ansible on the sandbox, as scripts/sandbox.sh does: the example's inventory with
the sandbox's overlay, and the secrets the example's lookups read from the environment (pve-sim's root password, the
sandbox's API key)."""
from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
SANDBOX = REPO / ".build" / "sandbox"
EXAMPLE = REPO / "inventories" / "example"
OVERLAY = REPO / "inventories" / "sandbox"
# Later sources win: the overlay after the example.
INVENTORY = [EXAMPLE, OVERLAY]


def ansible_environment(extra=None):
    """ANSIBLE_CONFIG and the secrets scripts/sandbox.sh exports, then ``extra`` (which may replace a secret)."""
    environment = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PVE_ROOT_PASSWORD": (SANDBOX / "pve-sim" / "root-password").read_text().strip(),
        "SGLANG_API_KEY": (SANDBOX / "secrets" / "sglang-api-key").read_text().strip(),
    }
    environment.update(extra or {})
    return environment
