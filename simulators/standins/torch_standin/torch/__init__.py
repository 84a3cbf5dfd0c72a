# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test stand-in for torch (see setup.py)."""
from importlib import metadata

from . import _C, version  # noqa: F401  pylint: disable=unused-import

__version__ = metadata.version("torch")
