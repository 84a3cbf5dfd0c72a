#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a stand-in flash_attn wheel under upstream's release file name (a plain zip, as every wheel is).

Usage: build-standin-wheel.py OUTPUT_DIR WHEEL_FILE_NAME
The name carries the version with its local label (+cu13torch2.9cxx11abiTRUE) and the cp/abi/platform tags; METADATA
and WHEEL repeat them, so pip accepts the file as it accepts upstream's.
"""
import base64
import hashlib
import os
import sys
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def main(out_dir, name):
    dist, version, python_tag, abi_tag, platform_tag = name[:-len(".whl")].split("-")
    info = f"{dist}-{version}.dist-info"
    files = {
        "flash_attn/__init__.py": f'"""Test stand-in for flash-attn (prebuilt wheel {name}); not flash-attn."""\n__version__ = "{version}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\nSummary: Test stand-in for flash-attn; not flash-attn.\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: llmops-standin\nRoot-Is-Purelib: false\nTag: {python_tag}-{abi_tag}-{platform_tag}\n",
    }
    lines = []
    os.makedirs(out_dir, exist_ok=True)
    with zipfile.ZipFile(os.path.join(out_dir, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, text in files.items():
            data = text.encode()
            wheel.writestr(path, data)
            lines.append(record_line(path, data))
        lines.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
