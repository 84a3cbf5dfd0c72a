# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23 simulator: command line, logs, HTTP API and process layout of `python -m sglang.launch_server`, without a GPU."""

SIMULATED_SGLANG_VERSION = "0.5.23"
__version__ = "0.1.0"
