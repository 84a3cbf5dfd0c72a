# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment ID: a stable digest of everything that defines a running server.

Pure functions; the caller reads the files. Secret values never enter the digest: an environment
file counts only by its variable names, so rotating a key does not make a new deployment while
adding or removing a variable does.
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


def deployment_env_text(instance, deployment_id):
    """Content of the unit's EnvironmentFile= that carries the deployment ID to the server.

    deployment_record and deployment_restore both write it; the text must stay byte-identical between
    them (and across releases), or a rerun would rewrite the file and report a change.
    """
    return f"# Written by llmops.serving.deployment_record; loaded by the unit.\nLLMOPS_DEPLOYMENT_ID={deployment_id}\nLLMOPS_INSTANCE={instance}\n"


def next_record(previous, instance, deployment_id, now_iso, inputs):
    """The record to store for ``deployment_id``, given the stored ``previous`` record (or None).

    Unchanged deployments keep their record as it is (same time), so a rerun writes nothing.
    """
    if previous and previous.get("deployment_id") == deployment_id:
        return previous
    return {
        "instance": instance,
        "deployment_id": deployment_id,
        "deployed_at": now_iso,
        "previous_deployment_id": (previous or {}).get("deployment_id"),
        "inputs": inputs,
    }
