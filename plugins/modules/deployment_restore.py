#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: deployment_restore
short_description: Put a server instance back on an archived deployment
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Restores the files of an earlier deployment of a server instance (unit, launcher, log pruner, the secret
    environment file) from the archive that M(llmops.serving.deployment_record) keeps under
    C(<state_dir>/<instance>/deployments/<id>/), byte for byte and with their archived modes.
  - By default the target is the deployment before the current one (the record's C(previous_deployment_id)).
    When the record was itself written by a restore, the last deployment is already undone and the target is the
    record's own deployment, so a second run changes nothing. To go further back, name the deployment in O(deployment_id).
  - Then rewrites the deployment record (the restored ID, with the ID it replaced as C(previous_deployment_id) and
    C(rolled_back_from), and the restored deployment's inputs) and the unit's C(deployment.env).
  - Does not reload systemd or restart anything; the caller does that and verifies the restored server.
options:
  instance:
    description: Name of the server instance, as given to M(llmops.serving.deployment_record).
    type: str
    required: true
  state_dir:
    description: Directory that holds one sub-directory per instance with C(deployment.json) and the archive.
    type: path
    default: /var/lib/llmops-serving
  env_file:
    description:
      - Environment file to write with C(LLMOPS_DEPLOYMENT_ID) and C(LLMOPS_INSTANCE), for the unit's C(EnvironmentFile=).
      - Defaults to C(/etc/llmops-serving/<instance>/deployment.env).
    type: path
  deployment_id:
    description:
      - Restore this archived deployment instead of the one before the current.
      - The full 64-digit ID, as returned by M(llmops.serving.deployment_record) and listed under C(<state_dir>/<instance>/deployments/).
    type: str
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
    details: In check mode nothing is written; C(changed) and RV(restored_files) say what a real run would do.
  diff_mode:
    support: full
    details: Shows the record before and after, and the paths of the files that would be restored with the reason
      (missing, content, mode). File contents are never shown, because the archive holds the secret environment file.
notes:
  - Each file is written atomically (a temporary file in the same directory, fsync, rename), owned by root when the
    module runs as root. Environment files that may hold secrets are restored with mode 0600.
  - The files are restored first and the record is written last, so an interrupted restore can simply be run again.
  - The secret environment file comes back as it was archived, with the values it had then. Archives are written when
    a deployment is recorded; a key rotated later without a new deployment is not in the archive.
  - Files of the current deployment that the restored deployment did not have are left in place.
  - Only the newest archives are kept (O(llmops.serving.deployment_record#module:keep), the role's
    C(sglang_service_deployment_history)); a pruned deployment cannot be restored.
  - One run at a time per instance, this module and M(llmops.serving.deployment_record) alike (an flock on
    C(<state_dir>/<instance>/deployment.lock), shared in check mode).
  - A deployment whose archived inputs name a C(package_environment) that is no longer a directory (a symbolic link to
    one counts) is not restored, because its unit would start a python that is gone; the run fails before anything is
    changed and says to deploy that version again or to restore another deployment. Environments that a current or
    archived deployment names are kept by M(llmops.serving.package_environments).
  - A C(deployment.json) that is not a record is moved aside to C(deployment.json.corrupt-<UTC time>) and the run fails,
    as in M(llmops.serving.deployment_record), because the deployment to restore cannot be known from it.
seealso:
  - module: llmops.serving.deployment_record
  - module: llmops.serving.package_environments
"""

EXAMPLES = r"""
- name: Put qwen36 back on the deployment before the current one
  llmops.serving.deployment_restore:
    instance: qwen36
  register: restore

- name: Load the restored unit and start it
  ansible.builtin.systemd_service:
    name: sglang-qwen36.service
    state: restarted
    daemon_reload: true
  when: restore is changed

- name: Restore a named deployment from the archive
  llmops.serving.deployment_restore:
    instance: qwen36
    deployment_id: 3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
"""

RETURN = r"""
deployment_id:
  description: The deployment the instance is on after the restore.
  returned: always
  type: str
  sample: 3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
rolled_back_from:
  description: The deployment this run moved the instance away from; null when the instance was already on the target.
  returned: always
  type: str
  sample: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
restored_files:
  description: Paths of the files that were restored (would be, in check mode) because their content or mode differed
    or they were missing. Paths only, never contents.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/sglang-qwen36.service, /etc/llmops-serving/qwen36/server.env]
record:
  description: The deployment record after the restore, as stored in C(<state_dir>/<instance>/deployment.json).
  returned: always
  type: dict
  sample:
    instance: qwen36
    deployment_id: 3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
    deployed_at: "2026-11-29T20:12:44Z"
    previous_deployment_id: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
    rolled_back_from: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
    inputs: {model_path: /models/Qwen3.6-27B}
    archive: /var/lib/llmops-serving/qwen36/deployments/3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
archive:
  description: The archive directory the files were restored from.
  returned: always
  type: str
  sample: /var/lib/llmops-serving/qwen36/deployments/3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5
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
notes:
  description: Things the operator should know about this restore, for example that the archive predates stored inputs
    and the record's C(inputs) were left empty.
  returned: always
  type: list
  elements: str
  sample: []
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils import deployment_state
from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import atomic_write, read_bytes, read_regular
from ansible_collections.llmops.serving.plugins.module_utils.deployment_archive import (
    ArchiveError,
    archive_missing_message,
    choose_restore_target,
    describe_plan,
    plan_restore,
)
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import (
    DEFAULT_STATE_DIR,
    MANIFEST_NAME,
    ManifestError,
    archive_dir_for,
    deployment_env_text,
    parse_manifest,
    record_paths,
    record_text,
    restored_record,
    utc_timestamp,
)
from ansible_collections.llmops.serving.plugins.module_utils.package_environments import restore_environment_error


def _on_disk(path):
    """(content, mode) of a regular file, or None when there is none (a directory in its place is an error)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} exists but is not a regular file")
    return read_bytes(path), stat.S_IMODE(st.st_mode)


def _read_text(path):
    """The text of the regular file ``path``, or None: a symlink is not followed, a FIFO or device never opened (a
    FIFO in place of a manifest would block the restore for good)."""
    try:
        return read_regular(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instance=dict(type="str", required=True),
            state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
            env_file=dict(type="path"),
            deployment_id=dict(type="str"),
            lock_timeout=dict(type="int", default=deployment_state.DEFAULT_LOCK_TIMEOUT),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        paths = record_paths(params["instance"], params["state_dir"], params["env_file"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=False, record_path=paths["record_path"], env_file=paths["deployment_env"], restored_files=[],
                  notes=[], rolled_back_from=None)
    try:
        with deployment_state.instance_lock(paths, params["lock_timeout"], module.check_mode, create=False):
            restore(module, paths, result)
    except deployment_state.StateError as exc:
        module.fail_json(msg=str(exc), **result)


def restore(module, paths, result):
    """Everything between reading the record and writing it, under the instance's lock; exits the module."""
    params = module.params
    instance = params["instance"]
    record_path, env_path = paths["record_path"], paths["deployment_env"]
    try:
        current = deployment_state.load_record(record_path, paths["archive_root"], module.check_mode)
        target_id = choose_restore_target(current, params["deployment_id"], record_path)
        archive_dir = archive_dir_for(params["state_dir"], instance, target_id)
        result.update(deployment_id=target_id, archive=archive_dir)
        if not os.path.isdir(archive_dir):
            raise ArchiveError(archive_missing_message(target_id, archive_dir))
        manifest_path = os.path.join(archive_dir, MANIFEST_NAME)
        manifest = parse_manifest(_read_text(manifest_path), target_id, manifest_path)
        # The restored unit runs the server from the deployment's package environment: without it, it cannot start.
        missing_environment = restore_environment_error(target_id, manifest["inputs"], manifest_path, os.path.isdir)
        if missing_environment:
            raise ArchiveError(missing_environment)
    except (ArchiveError, ManifestError, deployment_state.StateError) as exc:
        module.fail_json(msg=str(exc), **result)

    try:
        archived = {entry["archived"]: read_bytes(os.path.join(archive_dir, entry["archived"])) for entry in manifest["files"]}
    except OSError as exc:
        module.fail_json(msg=f"the archive {archive_dir} is incomplete: cannot read {exc.filename}: {exc.strerror}", **result)
    try:
        on_disk = {entry["path"]: _on_disk(entry["path"]) for entry in manifest["files"]}
    except OSError as exc:
        module.fail_json(msg=f"cannot read the file to restore: {exc}", **result)
    plan = plan_restore(manifest["files"], archived, on_disk)
    # Dropped from memory early: nothing below needs the current contents, and none of it may reach the result.
    del on_disk

    moving = current["deployment_id"] != target_id
    if moving and not manifest["has_inputs"]:
        result["notes"].append(
            f"the manifest of deployment {target_id} predates stored inputs: the restored record has inputs {{}} "
            "(the files are restored exactly; the record lacks the model and version facts until the next new deployment)"
        )
    record = restored_record(current, instance, target_id, utc_timestamp(), manifest["inputs"], archive_dir)
    env_text = deployment_env_text(instance, target_id)
    record_changed = record != current
    env_changed = _read_text(env_path) != env_text
    changed = bool(plan) or record_changed or env_changed
    result.update(
        changed=changed,
        record=record,
        rolled_back_from=current["deployment_id"] if moving else None,
        restored_files=[entry["path"] for entry in plan],
    )
    if module._diff:
        result["diff"] = [
            dict(before_header=record_path, after_header=record_path, before=record_text(current), after=record_text(record)),
            dict(before_header=f"files that differ from the archive {archive_dir}", after_header="restored from the archive (contents not shown)",
                 before="", after=describe_plan(plan)),
        ]
    if not changed:
        module.exit_json(msg=f"instance {instance} is already on deployment {target_id} and every archived file is identical; nothing to restore",
                         **result)
    verb = "would restore" if module.check_mode else "restored"
    summary = f"{verb} deployment {target_id}" + (f" (rolled back from {current['deployment_id']})" if moving else "")
    summary += f": {len(plan)} file(s) from {archive_dir}"
    for note in result["notes"]:
        module.warn(note)
    if module.check_mode:
        module.exit_json(msg=summary, **result)

    try:
        for entry in plan:
            atomic_write(entry["path"], archived[entry["archived"]], entry["mode"])
        if env_changed:
            atomic_write(env_path, env_text.encode("utf-8"), 0o644)
        # The record last: until it is written, a rerun targets the same deployment and finishes the job.
        if record_changed:
            atomic_write(record_path, record_text(record).encode("utf-8"), 0o644)
    except OSError as exc:
        module.fail_json(msg=f"cannot restore deployment {target_id}: {exc}", **result)
    module.exit_json(msg=summary, **result)


if __name__ == "__main__":
    main()
