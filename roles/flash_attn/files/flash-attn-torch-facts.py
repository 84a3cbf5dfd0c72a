#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as JSON, what a flash-attn wheel must match: torch's version, CUDA major and C++ ABI, the Python tag,
and the flash-attn version installed now (null when none). Run with the virtualenv's python."""
from __future__ import annotations

import json
import sys
from importlib import metadata


def main():
    import torch  # pylint: disable=import-error

    try:
        flash_attn = metadata.version("flash_attn")
    except metadata.PackageNotFoundError:
        flash_attn = None
    print(json.dumps({
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),  # pylint: disable=protected-access
        "python_tag": "cp%d%d" % sys.version_info[:2],
        "flash_attn": flash_attn,
    }))


if __name__ == "__main__":
    main()
