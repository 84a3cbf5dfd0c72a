#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: deployment_record
short_description: Compute and record the deployment ID of a server instance
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Computes a stable digest (the deployment ID) of everything that defines a running server, from the files
    on the target (unit, launcher, ...), the variable names of environment files that may hold secrets (never
    their values), and extra inputs such as the model path and revision or package versions.
  - Records it on the target as a small JSON file per instance with the ID, the time and the previous ID, and
    writes an environment file with C(LLMOPS_DEPLOYMENT_ID) that the systemd unit loads, so the running server
    carries the ID of the deployment that started it.
  - Archives the files of every recorded deployment under the instance's state directory, so an earlier
    deployment can be restored exactly (the archive keeps environment files with mode 0600).
  - Reports C(changed) exactly when the deployment ID differs from the recorded one (or the record is missing).
  - With O(unit), also says whether that unit's running invocation serves this deployment (RV(restart_needed)); the
    restart then follows from what runs, so a run killed after recording and before restarting the unit (a notified
    handler dies with its run) is completed by the next run, whose record is already unchanged.
options:
  instance:
    description: Name of the server instance (one container can host several); no slashes, not starting with a dot.
    type: str
    required: true
  files:
    description:
      - Files that define the server, hashed whole and archived (rendered unit, launcher, ...).
    type: list
    elements: path
    required: true
  env_files:
    description:
      - Environment files that may hold secrets. Only the names of the variables they define enter the digest.
      - They are archived with mode 0600, owned by root.
    type: list
    elements: path
    default: []
  inputs:
    description:
      - Facts that define the deployment but are not files, for example C(model_path), C(model_revision) and
        installed package versions. Must be serialisable as JSON.
    type: dict
    default: {}
  state_dir:
    description: Directory that holds one sub-directory per instance with C(deployment.json) and the archive.
    type: path
    default: /var/lib/llmops-serving
  env_file:
    description:
      - Environment file to write with C(LLMOPS_DEPLOYMENT_ID) and C(LLMOPS_INSTANCE), for the unit's C(EnvironmentFile=).
      - Defaults to C(/etc/llmops-serving/<instance>/deployment.env).
    type: path
  keep:
    description: How many archived deployments to keep per instance. The current and the previous one are always kept.
    type: int
    default: 5
  unit:
    description:
      - The systemd unit that runs this instance (for example C(sglang-qwen36.service)). When given, the module reads
        its state with C(systemctl show) and the C(LLMOPS_DEPLOYMENT_ID) of its main process (the only variable read
        from that process's environment), returns them as RV(running), and sets RV(restart_needed).
      - Read-only, in check mode too; omitted, nothing about the unit is read.
    type: str
    version_added: 0.2.0
  lock_timeout:
    description:
      - How many seconds to wait for another run that records or restores a deployment of the same instance (they
        hold a lock in the instance's state directory), before failing with a message that names its PID.
    type: int
    default: 60
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; when a file in O(files) does not exist yet, the ID cannot be computed and
      the module reports that it would change.
  diff_mode:
    support: full
    details: Shows the record before and after.
notes:
  - The record is written atomically (temporary file and rename) after the archive, so a crash never leaves a record
    that points at files that were not archived.
  - One run at a time per instance, this module and M(llmops.serving.deployment_restore) alike; they hold an flock on
    C(<state_dir>/<instance>/deployment.lock) from reading the record until the last write (shared in check mode).
  - A C(deployment.json) that is not a record (not JSON, not an object, a field of the wrong type) is never replaced in
    silence, because it holds the rollback history; the run moves it aside to C(deployment.json.corrupt-<UTC time>) and
    fails, listing the archived deployments. Running again records the current deployment with no previous one; an
    archived deployment can then still be restored by its ID. Anything but a regular file at that path (a directory, a
    symlink) fails naming what it is, and is left alone.
  - An archive is written into C(<id>.partial) and renamed into place when complete; the staging directories that an
    interrupted run left are removed by the next run that writes (under the lock, so never one a run is still writing).
seealso:
  - module: llmops.serving.deployment_restore
  - module: llmops.serving.service_provenance
  - module: llmops.serving.log_provenance
"""

EXAMPLES = r"""
- name: Record the deployment of instance qwen36
  llmops.serving.deployment_record:
    instance: qwen36
    files:
      - /etc/systemd/system/sglang-qwen36.service
      - /usr/local/libexec/llmops-serving/sglang-launch
    env_files:
      - /etc/llmops-serving/qwen36/server.env
    inputs:
      model_path: /models/Qwen3.6-27B
      model_revision: 6a1e0c2
      versions:
        sglang: 0.5.23
  register: deployment
  notify: Restart sglang-qwen36

- name: Show the ID
  ansible.builtin.debug:
    msg: "{{ deployment.deployment_id }} (was {{ deployment.previous_deployment_id }})"
"""

RETURN = r"""
deployment_id:
  description: SHA-256 digest that identifies the deployment. Null only in check mode when a file does not exist yet.
  returned: always
  type: str
  sample: 3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
previous_deployment_id:
  description: The ID that was recorded before this one (null on the first deployment).
  returned: always
  type: str
  sample: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
record:
  description: The record as stored in C(<state_dir>/<instance>/deployment.json).
  returned: always
  type: dict
  sample:
    instance: qwen36
    deployment_id: 3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
    deployed_at: "2026-11-29T19:45:01Z"
    previous_deployment_id: null
    inputs: {model_path: /models/Qwen3.6-27B}
    archive: /var/lib/llmops-serving/qwen36/deployments/3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
record_path:
  description: Path of the record file.
  returned: always
  type: str
  sample: /var/lib/llmops-serving/qwen36/deployment.json
env_file:
  description: Path of the environment file that carries the ID to the unit.
  returned: always
  type: str
  sample: /etc/llmops-serving/qwen36/deployment.env
running:
  description:
    - What the unit of O(unit) runs, read before anything restarts it. Null without O(unit).
  returned: always
  type: dict
  contains:
    active_state:
      description: systemd's ActiveState.
      type: str
      sample: active
    sub_state:
      description: systemd's SubState.
      type: str
      sample: running
    main_pid:
      description: The main process (0 when none runs).
      type: int
      sample: 4711
    invocation_id:
      description: The running invocation's ID (empty when the unit never started).
      type: str
      sample: 6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10
    deployment_id:
      description: C(LLMOPS_DEPLOYMENT_ID) of the main process; null when no process runs or it has none.
      type: str
      sample: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
restart_needed:
  description:
    - True when the unit of O(unit) has a running main process that does not carry this deployment's ID (another
      deployment's, or none); it must restart to serve what was recorded. False when it already serves it, when it
      runs no process (starting it is enough), and without O(unit).
  returned: always
  type: bool
  sample: true
pruned:
  description:
    - IDs of the archived deployments this run removed because they were older than the O(keep) newest; the current
      and the previous deployment are never removed.
    - Returned only when the module wrote the record (a change, outside check mode).
  returned: changed and not check mode
  type: list
  elements: str
  sample: [9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b]
pruned_partial:
  description:
    - Staging directories of archive writes that an interrupted run left (C(<id>.partial)) and this run removed.
    - Returned only when the module wrote the record (a change, outside check mode).
  returned: changed and not check mode
  type: list
  elements: str
  sample: [3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5.partial]
"""

import json
import os
import shutil
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import deployment_state
from ansible_collections.llmops.serving.plugins.module_utils import procfs
from ansible_collections.llmops.serving.plugins.module_utils import systemd_show
from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import atomic_write, read_bytes
from ansible_collections.llmops.serving.plugins.module_utils.deployment_archive import archives_to_prune
from ansible_collections.llmops.serving.plugins.module_utils.deployment_id import compute_deployment_id
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    DEFAULT_STATE_DIR,
    MANIFEST_NAME,
    PARTIAL_SUFFIX,
    archive_dir_for,
    deployment_env_text,
    manifest_entries,
    manifest_text,
    next_record,
    record_paths,
    record_text,
    utc_timestamp,
)


def _read_text(path):
    """The text of path, or None when there is none to compare (missing, not a regular file, not UTF-8)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _archive(archive_dir, entries, record):
    """Copy the deployment's files into archive_dir with their manifest, replacing the directory whole."""
    staging = archive_dir + PARTIAL_SUFFIX
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging, mode=0o700)
    for entry in entries:
        copy = os.path.join(staging, entry["archived"])
        shutil.copyfile(entry["path"], copy)
        os.chmod(copy, entry["mode"])
    with open(os.path.join(staging, MANIFEST_NAME), "w", encoding="utf-8") as handle:
        handle.write(manifest_text(record["deployment_id"], record["inputs"], entries))
    shutil.rmtree(archive_dir, ignore_errors=True)
    os.replace(staging, archive_dir)


def _prune(archive_root, keep, protected):
    try:
        archives = {e.name: e for e in os.scandir(archive_root) if e.is_dir() and not e.name.endswith(PARTIAL_SUFFIX)}
    except FileNotFoundError:
        return []
    removed = archives_to_prune([(name, e.stat().st_mtime) for name, e in archives.items()], keep, protected)
    for name in removed:
        shutil.rmtree(archives[name].path, ignore_errors=True)
    return removed


# Unit states in which a main process runs the server (or is starting it): restarting is what replaces it.
_RUNNING_STATES = ("active", "activating", "reloading", "deactivating")


def running_deployment(module, unit):
    """What the unit runs: systemd's state, its main process and that process's deployment ID."""
    try:
        facts = systemd_show.show_unit(module.run_command, systemd_show.unit_name(unit))
    except systemd_show.SystemdError as exc:
        module.fail_json(msg="cannot tell what %s runs: %s" % (unit, exc))
    main_pid = facts["main_pid"]
    running = facts["active_state"] in _RUNNING_STATES and main_pid > 0
    try:
        deployment_id = procfs.read_deployment_id(main_pid) if running else None
    except OSError as exc:
        module.fail_json(msg="cannot read the deployment of %s's main process %d: %s" % (unit, main_pid, exc.strerror or exc))
    return dict(active_state=facts["active_state"], sub_state=facts["sub_state"], main_pid=main_pid if running else 0,
                invocation_id=facts["invocation_id"], deployment_id=deployment_id)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instance=dict(type="str", required=True),
            files=dict(type="list", elements="path", required=True),
            env_files=dict(type="list", elements="path", default=[]),
            inputs=dict(type="dict", default={}),
            state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
            env_file=dict(type="path"),
            keep=dict(type="int", default=5),
            unit=dict(type="str"),
            lock_timeout=dict(type="int", default=deployment_state.DEFAULT_LOCK_TIMEOUT),
        ),
        supports_check_mode=True,
    )
    params = module.params
    instance = params["instance"]
    try:
        paths = record_paths(instance, params["state_dir"], params["env_file"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    try:
        json.dumps(params["inputs"], sort_keys=True)
    except (TypeError, ValueError) as exc:
        module.fail_json(msg=f"inputs must be serialisable as JSON: {exc}")
    try:
        with deployment_state.instance_lock(paths, params["lock_timeout"], module.check_mode):
            record_deployment(module, paths)
    except deployment_state.StateError as exc:
        module.fail_json(msg=str(exc), record_path=paths["record_path"], env_file=paths["deployment_env"])


def record_deployment(module, paths):
    """Everything between reading the record and writing it, under the instance's lock; exits the module."""
    params = module.params
    instance = params["instance"]
    record_path, env_path = paths["record_path"], paths["deployment_env"]
    # Read before the record is: the unit's state says what the last restart (or a run that died before it) left.
    running = running_deployment(module, params["unit"]) if params["unit"] else None
    result = dict(changed=False, record_path=record_path, env_file=env_path, running=running, restart_needed=False)
    try:
        previous = deployment_state.load_record(record_path, paths["archive_root"], module.check_mode)
    except deployment_state.StateError as exc:
        module.fail_json(msg=str(exc), previous_deployment_id=None, **result)
    result["previous_deployment_id"] = (previous or {}).get("deployment_id")

    missing = [p for p in params["files"] + params["env_files"] if not os.path.exists(p)]
    if missing:
        if module.check_mode:
            result.update(changed=True, deployment_id=None, record=previous or {})
            module.exit_json(msg="not all files exist yet (check mode): " + ", ".join(missing), **result)
        module.fail_json(msg="cannot compute the deployment ID, these files are missing: " + ", ".join(missing), **result)

    try:
        file_contents = {path: read_bytes(path) for path in params["files"]}
        env_texts = {path: read_bytes(path).decode("utf-8", errors="replace") for path in params["env_files"]}
    except OSError as exc:
        module.fail_json(msg=f"cannot read {exc.filename}: {exc.strerror}", **result)
    deployment_id = compute_deployment_id(file_contents, env_texts, params["inputs"])
    archive_dir = archive_dir_for(params["state_dir"], instance, deployment_id)
    record = next_record(previous, instance, deployment_id, utc_timestamp(), params["inputs"], archive_dir)

    env_text = deployment_env_text(instance, deployment_id)
    record_changed = previous != record
    needs_write = record_changed or _read_text(env_path) != env_text or not os.path.isdir(archive_dir)
    result.update(deployment_id=deployment_id, record=record, changed=needs_write,
                  restart_needed=bool(running and running["main_pid"] and running["deployment_id"] != deployment_id))
    if module._diff:
        result["diff"] = dict(
            before=record_text(previous) if previous else "",
            after=record_text(record),
            before_header=record_path,
            after_header=record_path,
        )
    if not needs_write or module.check_mode:
        module.exit_json(**result)

    try:
        os.makedirs(paths["archive_root"], mode=0o700, exist_ok=True)
        # Under the lock no other run is writing one: every staging directory is an interrupted run's.
        result["pruned_partial"] = deployment_state.prune_partials(paths["archive_root"])
        if result["pruned_partial"]:
            module.warn("removed the unfinished archives of an interrupted run: " + ", ".join(result["pruned_partial"]))
        if not os.path.isdir(archive_dir) or record_changed:
            modes = {path: stat.S_IMODE(os.stat(path).st_mode) for path in params["files"]}
            _archive(archive_dir, manifest_entries(params["files"], params["env_files"], modes), record)
        atomic_write(record_path, record_text(record).encode("utf-8"), 0o644)
        atomic_write(env_path, env_text.encode("utf-8"), 0o644)
    except OSError as exc:
        module.fail_json(msg=f"cannot record the deployment: {exc}", **result)
    result["pruned"] = _prune(paths["archive_root"], params["keep"], {deployment_id, record.get("previous_deployment_id") or ""})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
