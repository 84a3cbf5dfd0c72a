# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Shared ``attributes`` descriptions for the collection's modules."""

    # Base: the descriptions; modules set ``support`` themselves or use a variant below.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return a changed status prediction without modifying the target.
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) when run in diff mode.
"""

    # Read-only modules: they inspect the target and never change it.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module only reads the target's state; it behaves the same in check mode.
  diff_mode:
    support: N/A
    details: This module never changes anything.
"""
