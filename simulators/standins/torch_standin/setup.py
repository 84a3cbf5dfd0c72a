# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A STAND-IN for torch, for tests only: exposes __version__, version.cuda and _C._GLIBCXX_USE_CXX11_ABI, nothing else.

The version comes from TORCH_STANDIN_VERSION at build time (default 2.9.1+standin), so one source builds the torch
versions the checks need. The real CPU torch is not available inside the test container.
"""
import os

from setuptools import setup

setup(
    name="torch",
    version=os.environ.get("TORCH_STANDIN_VERSION", "2.9.1+standin"),
    description="Test stand-in for torch: __version__, version.cuda and _C._GLIBCXX_USE_CXX11_ABI only; not PyTorch.",
    packages=["torch", "torch._C"],
    # As the real torch 2.9.1 declares it (its Requires-Dist on PyPI): Python 3.12 and newer make virtualenvs without
    # setuptools, and a build without isolation (flash-attn's) imports it from the environment.
    install_requires=['setuptools; python_version >= "3.12"'],
)
