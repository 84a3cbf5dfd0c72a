# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""python -m hf_hub_sim"""
from __future__ import annotations

import sys

from hf_hub_sim.cli import main

sys.exit(main())
