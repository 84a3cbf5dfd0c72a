# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The on-target layout of a server instance: where its files live and the formats of the files that describe it.

The one definition of those names and formats. deployment_record and deployment_restore, log_header's parser and,
through the filters ``deployment_paths`` and ``log_header_printf``, the sglang_service and sglang_verify roles and
the launcher all take them from here. Pure functions; the callers read and write the files.

Per instance ``<i>`` with the default roots::

    /etc/systemd/system/sglang-<i>.service                unit
    /etc/llmops-serving/<i>/server.env                    secrets (0600)
    /etc/llmops-serving/<i>/deployment.env                the deployment ID for the unit (deployment_env_text)
    /etc/llmops-serving/<i>/node.env                      multi-node only: this node's rank and interfaces
    /var/lib/llmops-serving/<i>/deployment.json           the record (build_record)
    /var/lib/llmops-serving/<i>/sampling.json             the model card's sampling values for clients
    /var/lib/llmops-serving/<i>/deployments/<id>/         archive, with manifest.json (manifest_text, parse_manifest)
    /var/log/llmops-serving/<i>/<start>-<invocation>.log  one per start (LOG_FILE_NAME_RE), first line the header (HEADER_KEYS)
    /var/log/llmops-serving/<i>/current.log               symlink to the newest log
    /var/cache/llmops-serving/<i>/                        the server's HOME and cache
"""

from __future__ import annotations

import datetime
import json
import os
import re

from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import env_file_line

DEFAULT_CONFIG_DIR = "/etc/llmops-serving"
DEFAULT_STATE_DIR = "/var/lib/llmops-serving"
DEFAULT_LOG_ROOT = "/var/log/llmops-serving"
DEFAULT_CACHE_ROOT = "/var/cache/llmops-serving"
SYSTEMD_UNIT_DIR = "/etc/systemd/system"

RECORD_NAME = "deployment.json"
SAMPLING_NAME = "sampling.json"
# The model directory SGLang is given: the staged model's entries linked, plus the card's generation_config.json
# (the staged model itself may be read-only, shared, or rewritten by `hf download`).
SERVED_MODEL_NAME = "model"
# What the last verified rollout deployed, as component digests (module_utils/rollout_plan).
ROLLOUT_NAME = "rollout.json"
SERVER_ENV_NAME = "server.env"
DEPLOYMENT_ENV_NAME = "deployment.env"
# The API key as an SGLang --config file (root, 0600), handed to the server as a systemd credential; SGLang wants
# the .yaml suffix. It is never archived with a deployment.
SECRETS_CONFIG_NAME = "server-secrets.yaml"
# Multi-node tensor parallelism: what differs between the nodes of one model (the node's rank, its NCCL and Gloo
# interface), outside the deployment: every node runs the same unit and deployment ID. Root-owned, 0644.
NODE_ENV_NAME = "node.env"
ARCHIVES_NAME = "deployments"
MANIFEST_NAME = "manifest.json"
# deployment_record and deployment_restore hold an flock on this file (in the instance's state dir) while they run.
LOCK_NAME = "deployment.lock"
# An archive being written is staged as <archive>.partial and renamed into place when complete.
PARTIAL_SUFFIX = ".partial"
# An unusable deployment.json is kept aside as deployment.json.corrupt-<YYYYmmddTHHMMSSZ>.
CORRUPT_LABEL = "corrupt"
CURRENT_LOG_NAME = "current.log"
# The launcher names each start's log by its start time (UTC) and systemd invocation ID; current.log points at the newest.
LOG_FILE_NAME_PATTERN = "<YYYYmmddTHHMMSSZ>-<32 hex invocation id>.log"
LOG_FILE_NAME_RE = re.compile(r"\A[0-9]{8}T[0-9]{6}Z-[0-9a-f]{32}\.log\Z")

# An instance name, whole (\Z: unlike $, it does not match before a final newline).
INSTANCE_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*\Z")

# The variables deployment.env sets for the unit; the launcher and service_provenance read them in the server's environment.
DEPLOYMENT_ID_VARIABLE = "LLMOPS_DEPLOYMENT_ID"
INSTANCE_VARIABLE = "LLMOPS_INSTANCE"

# Environment files may hold secrets: archived and restored readable by root only.
SECRET_FILE_MODE = 0o600

# The first line of every log file: the marker, then key=value for each key, in this order.
HEADER_MARKER = "# llmops-serving"
HEADER_KEYS = ("instance", "deployment_id", "invocation_id", "pid", "started_at", "unit")


class ManifestError(ValueError):
    """An archive's manifest cannot be used; the message names the file and says why."""


def unit_name(instance):
    """The systemd unit of an instance."""
    return f"sglang-{instance}.service"


def instance_name_error(instance):
    """Why ``instance`` cannot name an instance, or None when it can.

    It becomes a directory under each root, part of the unit's name, a line of deployment.env and words in the unit:
    letters, digits, ``_ . -``, starting with a letter or digit (INSTANCE_NAME_RE, matched whole: a trailing newline
    is refused too).
    """
    if not isinstance(instance, str):
        return f"instance {instance!r} is not a valid instance name (not a string)"
    if not instance or "/" in instance or instance.startswith("."):
        return f"instance {instance!r} is not a valid instance name (no slashes, not hidden)"
    if not INSTANCE_NAME_RE.match(instance):
        return (f"instance {instance!r} is not a valid instance name (letters, digits, _ . - only, starting with a "
                "letter or digit; no whitespace or control characters)")
    return None


def instance_paths(instance, config_dir=DEFAULT_CONFIG_DIR, state_dir=DEFAULT_STATE_DIR, log_root=DEFAULT_LOG_ROOT,
                   cache_root=DEFAULT_CACHE_ROOT, unit_dir=SYSTEMD_UNIT_DIR):
    """Every per-instance name and path, from the roots that hold one directory per instance.

    Raises ValueError for an instance name that would escape the roots.
    """
    error = instance_name_error(instance)
    if error:
        raise ValueError(error)
    instance_config_dir = os.path.join(config_dir, instance)
    instance_state_dir = os.path.join(state_dir, instance)
    log_dir = os.path.join(log_root, instance)
    unit = unit_name(instance)
    return {
        "instance": instance,
        "unit": unit,
        "unit_path": os.path.join(unit_dir, unit),
        "config_dir": instance_config_dir,
        "server_env": os.path.join(instance_config_dir, SERVER_ENV_NAME),
        "deployment_env": os.path.join(instance_config_dir, DEPLOYMENT_ENV_NAME),
        "secrets_config": os.path.join(instance_config_dir, SECRETS_CONFIG_NAME),
        "node_env": os.path.join(instance_config_dir, NODE_ENV_NAME),
        "state_dir": instance_state_dir,
        "record_path": os.path.join(instance_state_dir, RECORD_NAME),
        "sampling_path": os.path.join(instance_state_dir, SAMPLING_NAME),
        "served_model_dir": os.path.join(instance_state_dir, SERVED_MODEL_NAME),
        "rollout_path": os.path.join(instance_state_dir, ROLLOUT_NAME),
        "archive_root": os.path.join(instance_state_dir, ARCHIVES_NAME),
        "log_dir": log_dir,
        "current_log": os.path.join(log_dir, CURRENT_LOG_NAME),
        "cache_dir": os.path.join(cache_root, instance),
    }


def record_paths(instance, state_dir, env_file=None):
    """instance_paths as deployment_record and deployment_restore use them: under the state root they are given, with
    deployment.env where their env_file option puts it (by default under the default configuration root), and the
    lock they hold while they run (``lock_path``).
    """
    paths = instance_paths(instance, state_dir=state_dir)
    if env_file:
        paths["deployment_env"] = env_file
    paths["lock_path"] = os.path.join(paths["state_dir"], LOCK_NAME)
    return paths


def archive_dir_for(state_dir, instance, deployment_id):
    """Directory that holds the archived files of ``deployment_id``."""
    return os.path.join(state_dir, instance, ARCHIVES_NAME, deployment_id)


# -- deployment.env -------------------------------------------------------------------------------


def deployment_env_text(instance, deployment_id):
    """Content of the unit's EnvironmentFile= that carries the deployment ID to the server.

    deployment_record and deployment_restore both write it; the text must stay byte-identical (and across releases),
    or a rerun would rewrite the file and report a change. The lines come from systemd_syntax's env_file_line, which
    leaves these plain values bare. Raises ValueError for an invalid instance name (one with a newline would add a
    line) and SystemdSyntaxError (a ValueError) for an ID systemd could not read back.
    """
    error = instance_name_error(instance)
    if error:
        raise ValueError(error)
    return "# Written by llmops.serving.deployment_record; loaded by the unit.\n" + "".join(
        env_file_line(name, value, "deployment.env") + "\n"
        for name, value in ((DEPLOYMENT_ID_VARIABLE, deployment_id), (INSTANCE_VARIABLE, instance)))


# -- deployment.json ------------------------------------------------------------------------------

# A deployment ID: a SHA-256 in lowercase hex, matched whole (\Z: unlike $, not before a final newline).
DEPLOYMENT_ID_RE = re.compile(r"\A[0-9a-f]{64}\Z")


class RecordError(ValueError):
    """deployment.json cannot be used as a record; the message names the file and says what was found."""


def _json_type(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _id_error(record, key, required):
    value = record.get(key)
    if value is None and not required:
        return None
    if isinstance(value, str) and DEPLOYMENT_ID_RE.match(value):
        return None
    shown = repr(value)[:80] if isinstance(value, str) else _json_type(value)
    return f"its {key} is {shown}, not a deployment ID (64 lowercase hexadecimal digits)"


def parse_record(text, record_path=RECORD_NAME):
    """The record stored in deployment.json, checked against the schema build_record writes. Raises RecordError.

    Required: an object with a valid ``deployment_id``. ``previous_deployment_id`` and ``rolled_back_from`` are null
    or IDs, ``inputs`` an object, ``instance``, ``deployed_at`` and ``archive`` text, where present.
    """
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"the deployment record {record_path} is not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise RecordError(f"the deployment record {record_path} is {_json_type(record)}, not an object")
    why = (_id_error(record, "deployment_id", True) or _id_error(record, "previous_deployment_id", False)
           or _id_error(record, "rolled_back_from", False))
    if why is None and not isinstance(record.get("inputs", {}), dict):
        why = f"its inputs are {_json_type(record['inputs'])}, not an object"
    for key in ("instance", "deployed_at", "archive"):
        if why is None and not isinstance(record.get(key, ""), str):
            why = f"its {key} is {_json_type(record[key])}, not text"
    if why:
        raise RecordError(f"the deployment record {record_path} is not a record: {why}")
    return record


def utc_timestamp(now=None):
    """``deployed_at`` of a record: UTC to the second, ``2026-11-29T19:45:01Z``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_record(instance, deployment_id, deployed_at, previous_deployment_id, inputs, archive, rolled_back_from=None):
    """The record of a deployment as stored in deployment.json; ``rolled_back_from`` only on a record a restore wrote.

    ``archive`` is part of the record so that a deployment_record run over restored files finds the record it would
    write and changes nothing.
    """
    record = {
        "instance": instance,
        "deployment_id": deployment_id,
        "deployed_at": deployed_at,
        "previous_deployment_id": previous_deployment_id,
        "inputs": inputs,
        "archive": archive,
    }
    if rolled_back_from is not None:
        record["rolled_back_from"] = rolled_back_from
    return record


def next_record(previous, instance, deployment_id, deployed_at, inputs, archive):
    """The record to store for a new or unchanged ``deployment_id``, given the stored ``previous`` record (or None).

    An unchanged deployment keeps its record as it is (same time, and ``rolled_back_from`` if a restore wrote it),
    so a rerun writes nothing.
    """
    if previous and previous.get("deployment_id") == deployment_id:
        return dict(previous, archive=archive)
    return build_record(instance, deployment_id, deployed_at, (previous or {}).get("deployment_id"), inputs, archive)


def restored_record(current, instance, target_id, deployed_at, target_inputs, archive):
    """The record to store after restoring ``target_id`` over the ``current`` record.

    Restoring the deployment the record already names keeps the record as it is (a rerun writes nothing).
    """
    if current.get("deployment_id") == target_id:
        return current
    return build_record(instance, target_id, deployed_at, current.get("deployment_id"), target_inputs, archive,
                        rolled_back_from=current.get("deployment_id"))


def record_text(record):
    """deployment.json's content."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


# -- the archive's manifest.json ------------------------------------------------------------------


def manifest_entries(files, env_files, modes):
    """The manifest's entries for the files of a deployment: path, archived name, mode (int) and secret flag.

    files, env_files: paths, in the order they were given; modes: {path: its mode on disk}. Environment files may hold
    secrets and are archived with mode 0600 whatever their mode on disk.
    """
    entries = []
    for index, (path, secret) in enumerate([(p, False) for p in files] + [(p, True) for p in env_files]):
        entries.append({
            "path": path,
            "archived": "%02d-%s" % (index, os.path.basename(path)),
            "mode": SECRET_FILE_MODE if secret else modes[path],
            "secret": secret,
        })
    return entries


def manifest_text(deployment_id, inputs, entries):
    """manifest.json's content: the record's ID and inputs (so a restore can write them back) and the entries."""
    files = [dict(entry, mode="%04o" % entry["mode"]) for entry in entries]
    return json.dumps({"deployment_id": deployment_id, "inputs": inputs, "files": files}, indent=2, sort_keys=True)


def _manifest_error(manifest_path, why):
    return ManifestError(f"the manifest {manifest_path} is unreadable: {why}")


def _parse_entry(raw, manifest_path):
    if not isinstance(raw, dict):
        raise _manifest_error(manifest_path, f"a file entry is not an object: {raw!r}")
    path, archived, mode_text, secret = raw.get("path"), raw.get("archived"), raw.get("mode"), raw.get("secret", False)
    if not isinstance(path, str) or not os.path.isabs(path):
        raise _manifest_error(manifest_path, f"a file entry has no absolute path: {path!r}")
    # The archived name is joined to the archive directory: it must not climb out of it.
    if not isinstance(archived, str) or archived in ("", ".", "..", MANIFEST_NAME) or "/" in archived or "\0" in archived:
        raise _manifest_error(manifest_path, f"the entry for {path} names an invalid archived file: {archived!r}")
    try:
        mode = int(mode_text, 8)
    except (TypeError, ValueError):
        raise _manifest_error(manifest_path, f"the entry for {path} has an invalid mode: {mode_text!r}") from None
    if not 0 <= mode <= 0o7777:
        raise _manifest_error(manifest_path, f"the entry for {path} has an invalid mode: {mode_text!r}")
    if not isinstance(secret, bool):
        raise _manifest_error(manifest_path, f"the entry for {path} has a non-boolean secret flag: {secret!r}")
    # Whatever the manifest says, a secret file is restored readable by root only.
    return {"path": path, "archived": archived, "mode": SECRET_FILE_MODE if secret else mode, "secret": secret}


def parse_manifest(text, deployment_id, manifest_path=MANIFEST_NAME):
    """The manifest of an archived deployment as {deployment_id, inputs, has_inputs, files: [entry, ...]}.

    ``text`` is the manifest's content, or None when it could not be read. Manifests written before deployment_record
    stored the ID and inputs have neither: ``inputs`` is then {} and ``has_inputs`` False. Raises ManifestError.
    """
    if text is None:
        raise _manifest_error(manifest_path, "it does not exist or cannot be read")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _manifest_error(manifest_path, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise _manifest_error(manifest_path, "it has no list of files")
    recorded_id = data.get("deployment_id")
    if recorded_id is not None and recorded_id != deployment_id:
        raise _manifest_error(manifest_path, f"it belongs to deployment {recorded_id}, not {deployment_id}")
    has_inputs = "inputs" in data
    inputs = data.get("inputs", {})
    if not isinstance(inputs, dict):
        raise _manifest_error(manifest_path, f"its inputs are not an object: {type(inputs).__name__}")
    files = [_parse_entry(raw, manifest_path) for raw in data["files"]]
    seen = set()
    for entry in files:
        if entry["path"] in seen:
            raise _manifest_error(manifest_path, f"{entry['path']} is listed twice")
        seen.add(entry["path"])
    if not files:
        raise _manifest_error(manifest_path, "it lists no files")
    return {"deployment_id": deployment_id, "inputs": inputs, "has_inputs": has_inputs, "files": files}


# -- the log header -------------------------------------------------------------------------------


def format_header_line(values):
    """The header line (without the newline) for {key: value}, every key of HEADER_KEYS in order and no other.

    The launcher's printf format is this line with ``%s`` as every value (the log_header_printf filter).
    """
    unknown = sorted(set(values) - set(HEADER_KEYS))
    missing = [key for key in HEADER_KEYS if key not in values]
    if unknown or missing:
        raise ValueError("a log header has exactly the keys %s (missing: %s; unknown: %s)" % (
            ", ".join(HEADER_KEYS), ", ".join(missing) or "none", ", ".join(unknown) or "none"))
    return " ".join([HEADER_MARKER] + ["%s=%s" % (key, values[key]) for key in HEADER_KEYS])
