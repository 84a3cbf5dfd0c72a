# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test stand-in for SGLang 0.5.23: only `sglang.srt.server_args`, backed by the SGLang simulator."""

__version__ = "0.5.23+standin"
# A stand-in release may carry a fault of the simulator (SGLANG_SIM_FAULT's values), which sglang-sim applies when
# SGLANG_SIM_FAULT is unset; empty for the normal one. scripts/sandbox-mirror.py rewrites it for a failing release.
STANDIN_FAULT = ""
