# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment ID: a stable digest of everything that defines a running server.

Pure functions; the caller reads the files. Secret values never enter the digest: an environment
file counts only by its variable names, so rotating a key does not make a new deployment while
adding or removing a variable does. Where the ID is stored (the record, deployment.env) is
deployment_layout's.
"""

from __future__ import annotations

import hashlib
import json

DIGEST_SCHEMA = 1


def env_file_keys(text):
    """Names of the variables an EnvironmentFile= defines, in file order, without their values."""
    keys = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith(";"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, _value = line.partition("=")
        if sep and name.strip():
            keys.append(name.strip())
    return keys


def compute_deployment_id(file_contents, env_files, inputs):
    """Digest of the deployment's parts.

    file_contents: {path: bytes} of files that define the server (unit, launcher, ...), hashed whole.
    env_files: {path: text} of environment files that may hold secrets, hashed by variable names only.
    inputs: JSON-serialisable facts that are not files (model path and revision, package versions).
    """
    canonical = {
        "schema": DIGEST_SCHEMA,
        "files": {path: hashlib.sha256(content).hexdigest() for path, content in sorted(file_contents.items())},
        "env_keys": {path: sorted(env_file_keys(text)) for path, text in sorted(env_files.items())},
        "inputs": inputs,
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()
