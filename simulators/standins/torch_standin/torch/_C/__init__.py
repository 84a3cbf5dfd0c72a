# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""torch._C's ABI flag (PyPI's torch wheels are built with the C++11 ABI)."""
_GLIBCXX_USE_CXX11_ABI = True
