# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures the unit tests of several directories share: hf_hub (the Hugging Face Hub stand-in on 127.0.0.1) and
hostile (a server on 127.0.0.1 that answers what a test tells it to)."""
from __future__ import annotations

from ansible_collections.llmops.serving.tests.support.hf_hub import hf_hub, hostile  # noqa: F401  pylint: disable=unused-import
