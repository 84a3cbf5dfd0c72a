# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout plan: would a container get a new deployment, and why - decided before the serial cutover.

A deployment is made of the collection's code and templates, the options the inventory gives each role, and what the
node and the model directory say (the host's driver version, the staged model revision). Each is one *component*
digest. After a rollout verified a container, its components are recorded on it (``rollout.json`` next to the
deployment record, with the deployment ID they produced); the next run's plan compares the components it would
deploy now with that record. Equal components and the same deployment still running: the container is only verified.
Anything else - a component changed, no record, the deployment changed since (a rollback, a hand-made change) -
sends it through the serial cutover, with the reason.

Pure functions; the module ``rollout_plan`` reads and writes the record, the lookup ``rollout_inputs`` lists the
options and digests the collection.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

ROLE_NAME_RE = re.compile(r"\A[a-z][a-z0-9_]*\Z")
COMPONENT_RE = re.compile(r"\A[a-z][a-z0-9_]*\Z")
DIGEST_RE = re.compile(r"\A[0-9a-f]{64}\Z")
RECORD_VERSION = 1
# A state file (a driver version file, a download's metadata) is small; more than this is not read.
STATE_FILE_MAX_BYTES = 65536
# Build outputs and caches of Python and the tests are not part of what a deployment is made of.
SKIPPED_NAMES = ("__pycache__", ".pytest_cache")
SKIPPED_SUFFIXES = (".pyc", ".pyo")


class PlanRecordError(ValueError):
    """A rollout record that cannot be used."""


def value_digest(value):
    """SHA-256 of a JSON-able value, keys sorted: the same value gives the same digest on every controller."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_digest(root, subdirs):
    """SHA-256 over the relative path and content of every regular file under root/subdir for each subdir, sorted.

    Symbolic links are digested as their target text, never followed (a link out of the tree changes nothing here).
    """
    digest = hashlib.sha256()
    for subdir in subdirs:
        base = os.path.join(root, subdir)
        for directory, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(name for name in dirnames if name not in SKIPPED_NAMES)
            for name in sorted(filenames):
                if name.endswith(SKIPPED_SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                digest.update(relative.encode("utf-8", "surrogateescape") + b"\0")
                if os.path.islink(path):
                    digest.update(b"link:" + os.readlink(path).encode("utf-8", "surrogateescape"))
                else:
                    with open(path, "rb") as handle:
                        digest.update(hashlib.sha256(handle.read()).digest())
                digest.update(b"\0")
    return digest.hexdigest()


def components(collection_digest, options_by_role, state=None):
    """The component digests of what this run would deploy.

    ``options_by_role``: role name -> {option name: value as the inventory sets it}; ``state``: name -> value read from
    the container or the node (``node_driver``: the host's driver version file, ``model_revision``, ...). Returns
    ``{"collection": ..., "<role>": ..., "<state name>": ...}``.
    """
    if not DIGEST_RE.match(collection_digest or ""):
        raise ValueError("collection_digest must be a SHA-256 hex digest")
    result = {"collection": collection_digest}
    for role, values in sorted((options_by_role or {}).items()):
        if not ROLE_NAME_RE.match(role):
            raise ValueError("%r is not a role name" % (role,))
        result["options_" + role] = value_digest(values)
    return add_state(result, state)


def add_state(components_now, state):
    """``components_now`` with one ``state_<name>`` digest per entry of ``state`` (name -> value read from the
    container or the node); a name that is not a component name, or is given twice, raises ValueError."""
    result = dict(components_now)
    for name, value in sorted((state or {}).items()):
        if not COMPONENT_RE.match(str(name)) or "state_" + name in result:
            raise ValueError("%r cannot name a state component" % (name,))
        result["state_" + name] = value_digest(value)
    return result


def parse_record(data):
    """The rollout record (bytes or text of rollout.json): {"version", "deployment_id", "components", "recorded_at"}."""
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise PlanRecordError("not JSON: %s" % exc) from None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise PlanRecordError("not a rollout record of version %d" % RECORD_VERSION)
    if not isinstance(record.get("deployment_id"), str) or not DIGEST_RE.match(record["deployment_id"]):
        raise PlanRecordError("deployment_id is not a SHA-256 hex digest")
    found = record.get("components")
    if not isinstance(found, dict) or not all(
            isinstance(key, str) and COMPONENT_RE.match(key) and isinstance(value, str) and DIGEST_RE.match(value)
            for key, value in found.items()):
        raise PlanRecordError("components must map names to SHA-256 hex digests")
    return record


def render_record(components_now, deployment_id, recorded_at):
    """The text of rollout.json for a verified rollout."""
    if not DIGEST_RE.match(deployment_id or ""):
        raise ValueError("deployment_id must be a SHA-256 hex digest")
    return json.dumps({"version": RECORD_VERSION, "deployment_id": deployment_id, "components": components_now,
                       "recorded_at": recorded_at}, indent=2, sort_keys=True) + "\n"


def compare(record, components_now, current_deployment_id):
    """Would this container get a new deployment? Returns ``{"cutover": bool, "reasons": [...], "changed": [...]}``.

    ``record``: parse_record's dict or None; ``current_deployment_id``: the deployment record's ID now, or None.
    """
    if record is None:
        return {"cutover": True, "reasons": ["no verified rollout is recorded on this container"], "changed": []}
    if current_deployment_id is None:
        return {"cutover": True, "reasons": ["the container has no deployment record"], "changed": []}
    if record["deployment_id"] != current_deployment_id:
        return {"cutover": True, "changed": [],
                "reasons": ["the deployment changed since the last verified rollout (%s.. -> %s..): a rollback or a "
                            "change outside deploy.yml" % (record["deployment_id"][:12], current_deployment_id[:12])]}
    recorded = record["components"]
    changed = sorted(name for name in set(recorded) | set(components_now) if recorded.get(name) != components_now.get(name))
    reasons = []
    for name in changed:
        if name not in recorded:
            reasons.append("%s: new" % name)
        elif name not in components_now:
            reasons.append("%s: no longer part of the deployment" % name)
        else:
            reasons.append("%s: changed" % name)
    return {"cutover": bool(changed), "reasons": reasons, "changed": changed}


def cutover_batches(hosts, model_nodes, batch_size):
    """The serial batch sizes of the cutover (a list for the play's ``serial``).

    ``hosts`` are the hosts that cut over, in rollout order; ``model_nodes`` maps a host to the nodes of the model it
    runs, in rank order (a server on one node: absent, or the host alone). A batch holds ``batch_size`` servers (or
    that percentage of them), and a
    multi-node model is one server with all of its nodes: a node restarted without the others takes them down, and
    systemd brings them back on their old deployment. Raises ValueError, naming the model, when its nodes do not all cut
    over or are not next to each other in the rollout order.
    """
    hosts = list(hosts)
    servers = []
    index = 0
    while index < len(hosts):
        nodes = list(model_nodes.get(hosts[index]) or [hosts[index]])
        if len(nodes) > 1:
            missing = [node for node in nodes if node not in hosts]
            if missing:
                raise ValueError("the model on %s cuts over without its nodes %s: every node of a multi-node model must "
                                 "cut over in the same batch" % (", ".join(nodes), ", ".join(missing)))
            if sorted(hosts[index:index + len(nodes)]) != sorted(nodes):
                raise ValueError("the nodes of the model on %s are not next to each other in the inventory's order of "
                                 "sglang_servers (%s): list them together so that they cut over in one batch"
                                 % (", ".join(nodes), ", ".join(hosts)))
        servers.append(len(nodes))
        index += len(nodes)
    size = servers_per_batch(batch_size, len(servers))
    if not servers:
        return [size]
    return [sum(servers[start:start + size]) for start in range(0, len(servers), size)]


def servers_per_batch(batch_size, servers):
    """llmops_rollout_batch_size as a number of servers: an integer, or a percentage of ``servers`` as Ansible's
    ``serial`` reads one (rounded down, at least 1)."""
    text = str(batch_size).strip()
    try:
        if text.endswith("%"):
            size = max(1, int(servers * float(text[:-1]) / 100.0)) if float(text[:-1]) > 0 else 0
        else:
            size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError("llmops_rollout_batch_size must be a number of servers of at least 1 or a percentage above 0, "
                         "not %r" % (batch_size,))
    return size
