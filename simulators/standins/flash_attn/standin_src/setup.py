# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A STAND-IN for flash-attn's source build, for tests only: no CUDA code.

Like flash-attn's setup.py it imports torch at build time (so it only builds with --no-build-isolation next to the
venv's torch) and reads MAX_JOBS, NVCC_THREADS and FLASH_ATTN_CUDA_ARCHS; it records them, the torch it saw and the
ninja on PATH in /var/tmp/flash-attn-standin-build.json. With FLASH_ATTN_STANDIN_REPLAY_LOG set it prints that file
(a verbatim failed-build log) and exits 1, as a failed ninja build does.
"""
import json
import os
import shutil
import sys

import torch  # pylint: disable=import-error
from setuptools import setup

replay = os.environ.get("FLASH_ATTN_STANDIN_REPLAY_LOG")
if replay and any(word in sys.argv for word in ("bdist_wheel", "install", "develop", "editable_wheel")):
    with open(replay, encoding="utf-8") as log:
        sys.stdout.write(log.read())
    sys.exit(1)

with open("/var/tmp/flash-attn-standin-build.json", "w", encoding="utf-8") as record:
    json.dump({
        "MAX_JOBS": os.environ.get("MAX_JOBS"),
        "NVCC_THREADS": os.environ.get("NVCC_THREADS"),
        "FLASH_ATTN_CUDA_ARCHS": os.environ.get("FLASH_ATTN_CUDA_ARCHS"),
        "FLASH_ATTENTION_FORCE_BUILD": os.environ.get("FLASH_ATTENTION_FORCE_BUILD"),
        "torch": torch.__version__,
        "ninja": shutil.which("ninja"),
    }, record)

setup(
    name="flash_attn",
    version="2.8.3.post2",
    description="Test stand-in for flash-attn's source build; not flash-attn.",
    packages=["flash_attn"],
)
