#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print a JSON object of the installed versions of the named distributions (absent ones are left out).

Run with the virtualenv's python, so that it reads that environment's metadata.
"""
from __future__ import annotations

import json
import sys
from importlib import metadata


def installed_versions(names):
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


if __name__ == "__main__":
    print(json.dumps(installed_versions(sys.argv[1:]), sort_keys=True))
