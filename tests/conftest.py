# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Settings every test tier shares."""

from __future__ import annotations

import os
from pathlib import Path

# Hypothesis keeps its example database and constants cache in ./.hypothesis by default, which is the collection root:
# `ansible-galaxy collection build` would pack it. .cache/ is left out of the build (galaxy.yml build_ignore).
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(__file__).resolve().parent.parent / ".cache" / "hypothesis"))
