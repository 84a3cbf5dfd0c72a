# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Versioned SGLang package environments: which ones deployments run from, which ones may go.

The sglang role installs each request into its own virtualenv ``<root>/<version>-<12 hex digits>``; sglang_service
records the one the server runs from as ``inputs.package_environment`` of the deployment record, and the archive keeps
the same inputs in each deployment's manifest. An environment is in use while a record or an archived deployment (one
a rollback may restore) names it.

referenced_environments reads the state root (the record and manifests only as regular files, never through a symlink,
never opening a FIFO) and reports what it could not read instead of raising; plan_prune and
restore_environment_error are pure.
"""

from __future__ import annotations

import os
import re
import stat

from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import NotARegularFile, file_type, read_regular
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    ARCHIVES_NAME,
    DEPLOYMENT_ID_RE,
    MANIFEST_NAME,
    RECORD_NAME,
    ManifestError,
    RecordError,
    instance_name_error,
    parse_manifest,
    parse_record,
)

# The key of a deployment's inputs that names its environment.
INPUT_KEY = "package_environment"
# ``<version>-<12 lowercase hex>``, matched whole (\Z: unlike $, not before a final newline). The version has no slash,
# whitespace or control character.
ENV_NAME_RE = re.compile(r"\A[0-9][0-9A-Za-z.+!_-]*-[0-9a-f]{12}\Z")
# How many digits of an archived deployment's ID its label shows.
SHORT_ID_LENGTH = 12


def _has_control_characters(text):
    return any(ord(char) < 0x20 or char == "\x7f" for char in text)


def environment_path_error(value):
    """Why ``value`` (a deployment's ``inputs.package_environment``) names no environment, or None when it does.

    None, absent and "" are not errors: records written before environments were recorded have none.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "its %s is %s, not a path" % (INPUT_KEY, type(value).__name__)
    if not os.path.isabs(value) or _has_control_characters(value):
        return "its %s %r is not an absolute path without control characters" % (INPUT_KEY, value)
    return None


def _record_reference(inputs, where):
    """(normalised path or None, problem or None) of the environment ``inputs`` name; ``where`` names their file."""
    value = inputs.get(INPUT_KEY)
    error = environment_path_error(value)
    if error:
        return None, "%s: %s" % (where, error)
    return (os.path.normpath(value) if value else None), None


def _scan(directory):
    """The entries of ``directory`` as a list, sorted by name (FileNotFoundError and other OSErrors propagate)."""
    with os.scandir(directory) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _read_inputs(path, required, parse, *args):
    """(inputs, problem): the inputs of ``parse(content, *args)`` for the regular file ``path``.

    A missing file is a problem when ``required`` (parse_manifest says so, given None); else it has no inputs.
    """
    try:
        data = read_regular(path)
    except FileNotFoundError:
        if not required:
            return {}, None
        data = None
    except NotARegularFile as exc:
        return None, "%s is %s, not a regular file (not followed)" % (path, exc.found)
    except OSError as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    try:
        return parse(data, *args).get("inputs") or {}, None
    except (RecordError, ManifestError) as exc:
        return None, str(exc)


def _instance_references(instance_dir, instance, add, problems):
    record_path = os.path.join(instance_dir, RECORD_NAME)
    inputs, problem = _read_inputs(record_path, False, parse_record, record_path)
    if problem is None:
        path, problem = _record_reference(inputs, record_path)
        if path:
            add(path, "%s current" % instance)
    if problem:
        problems.append(problem)

    archive_root = os.path.join(instance_dir, ARCHIVES_NAME)
    try:
        info = os.lstat(archive_root)
    except FileNotFoundError:
        return
    except OSError as exc:
        problems.append("cannot read %s: %s" % (archive_root, exc.strerror or exc))
        return
    if not stat.S_ISDIR(info.st_mode):
        problems.append("%s is %s, not a directory (not followed)" % (archive_root, file_type(info.st_mode)))
        return
    try:
        entries = _scan(archive_root)
    except OSError as exc:
        problems.append("cannot list %s: %s" % (archive_root, exc.strerror or exc))
        return
    for entry in entries:
        # Staging directories (<id>.partial) are no deployment a rollback can restore.
        if not DEPLOYMENT_ID_RE.match(entry.name):
            continue
        if not entry.is_dir(follow_symlinks=False):
            try:
                found = file_type(entry.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                continue  # pruned since the listing: no deployment any more
            problems.append("the archived deployment %s is %s, not a directory (not followed)" % (entry.path, found))
            continue
        manifest_path = os.path.join(entry.path, MANIFEST_NAME)
        inputs, problem = _read_inputs(manifest_path, True, parse_manifest, entry.name, manifest_path)
        if problem is None:
            path, problem = _record_reference(inputs, manifest_path)
            if path:
                add(path, "%s archived %s" % (instance, entry.name[:SHORT_ID_LENGTH]))
        if problem:
            problems.append(problem)


def referenced_environments(state_dir):
    """({environment path: [labels]}, [problems]) from every instance's record and archived manifests under ``state_dir``.

    Labels read ``<instance> current`` or ``<instance> archived <first 12 digits of the ID>``; paths are normalised
    (os.path.normpath). Problems are what could not be read for certain, each a sentence naming the path: a missing
    state directory (no way to tell that nothing is deployed), a symlink where an instance directory, a record, an
    archive or a manifest should be (never followed), a record or manifest that is not one, an environment that is not
    an absolute path. Entries of the state root that cannot be instances (names INSTANCE_NAME_RE refuses, regular files)
    are not read.
    """
    referenced, problems = {}, []

    def add(path, label):
        referenced.setdefault(path, []).append(label)

    try:
        entries = _scan(state_dir)
    except FileNotFoundError:
        return {}, ["the state directory %s does not exist, so no deployment on this host can be read" % state_dir]
    except OSError as exc:
        return {}, ["cannot list the state directory %s: %s" % (state_dir, exc.strerror or exc)]
    for entry in entries:
        if instance_name_error(entry.name):
            continue
        if entry.is_symlink():
            problems.append("the instance directory %s is a symbolic link (not followed)" % entry.path)
        elif entry.is_dir(follow_symlinks=False):
            _instance_references(entry.path, entry.name, add, problems)
    return {path: sorted(labels) for path, labels in sorted(referenced.items())}, problems


def path_aliases(path):
    """The names a path is compared by: normalised as written, and with every symlink on the way resolved."""
    return {os.path.normpath(path), os.path.realpath(path)}


def plan_prune(root, entries, protected, real_root=None):
    """What to do with each entry of the environment root ``root``.

    entries: (name, st_mode from lstat) of each entry. protected: normalised paths that must stay (what deployments
    reference and the caller's keep list, each as path_aliases gives them). real_root: ``root`` with its symlinks
    resolved, when it differs, so that a reference through either name protects the entry.

    Returns {"environments": [(path, name)], "remove": [path], "left_alone": [(path, reason)]}: environments are the
    real directories named like one (ENV_NAME_RE); of those, remove are the ones no protected path names. Anything else
    is left alone with the reason: a symbolic link (never followed, never removed through), another kind of file, a
    directory with a name no install gives.
    """
    root = os.path.normpath(root)
    roots = {root, os.path.normpath(real_root or root)}
    protected = {os.path.normpath(path) for path in protected}
    plan = {"environments": [], "remove": [], "left_alone": []}
    for name, mode in sorted(entries):
        path = os.path.join(root, name)
        if not stat.S_ISDIR(mode):
            plan["left_alone"].append((path, "%s, not a directory" % file_type(mode)))
        elif not ENV_NAME_RE.match(name):
            plan["left_alone"].append((path, "not named <version>-<12 hex digits>"))
        else:
            plan["environments"].append((path, name))
            if not any(os.path.join(each, name) in protected for each in roots):
                plan["remove"].append(path)
    return plan


def restore_environment_error(deployment_id, inputs, source, is_directory):
    """Why the deployment ``deployment_id`` cannot be restored for want of its package environment, or None.

    inputs: the archived deployment's inputs (from ``source``, its manifest). is_directory(path): whether a directory
    is there (a symlink to one counts). The restored unit starts the server with that environment's python, so
    restoring without it would put back a server that cannot start.
    """
    value = inputs.get(INPUT_KEY)
    error = environment_path_error(value)
    if error:
        return "deployment %s cannot be restored: %s: %s" % (deployment_id, source, error)
    if not value or is_directory(value):
        return None
    versions = inputs.get("versions")
    version = versions.get("sglang") if isinstance(versions, dict) else None
    which = "SGLang %s" % version if isinstance(version, str) and version else "its SGLang version"
    return ("deployment %s cannot be restored: its package environment %s (%s of %s) is not a directory any more; "
            "the restored unit would start a python that is gone. Nothing was changed. To go on: deploy %s again "
            "(the sglang role installs it into a new environment and sglang_service records a new deployment), or "
            "restore another deployment whose environment still exists (deployment_id)"
            % (deployment_id, value, INPUT_KEY, source, which))
