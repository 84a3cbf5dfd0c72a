#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_plan
short_description: Decide whether a server instance needs a new deployment, or record the one a rollout verified
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "O(mode=check) (read-only): compares the component digests of what this run would deploy (O(components): the
    collection and each role's options; plus one C(state_<name>) digest per O(state_files) entry, what the node and the
    model directory say, read here) with those recorded on the container by the last verified rollout
    (C(<state_dir>/<instance>/rollout.json)), and that the deployment recorded then is still the current one
    (C(deployment.json)). Returns RV(cutover) and the reasons. No record, a changed component, a unit that is not
    active (O(check_unit)), or a deployment changed since (a rollback, a change made outside the playbook) all mean a
    cutover."
  - Everything the plan reads on the container is read by this one module run, so an unchanged container costs one
    module execution in the plan (the fleet's unchanged rerun runs it on every container).
  - "O(mode=record): after the verification passed, writes the components and the verified deployment ID (atomically,
    mode 0644, root-owned; digests only, nothing a digest was taken of)."
options:
  instance:
    description: The server instance (as in P(llmops.serving.sglang_service#role)).
    type: str
    required: true
  state_dir:
    description: Root of the per-instance state directories.
    type: path
    default: /var/lib/llmops-serving
  components:
    description: Component name to SHA-256 hex digest (the C(rollout_components) filter builds them).
    type: dict
    required: true
  mode:
    description: C(check) compares, C(record) writes.
    type: str
    choices: [check, record]
    default: check
  deployment_id:
    description: The verified deployment's ID, for O(mode=record).
    type: str
  state_files:
    description:
      - Files whose content is part of the deployment, each digested as the component C(state_<name>) (a missing file
        digests as null, so its appearance or removal is a change). O(mode=check) adds them to O(components);
        O(mode=record) reads them again and replaces the plan's C(state_<name>) entries, so that the record holds what
        the container says after the rollout (the first deployment downloads its model after the plan).
      - Only regular files are read (a symbolic link, FIFO or device is digested as what it is, never opened), at most
        64 KiB of each.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The component's name after C(state_).
        type: str
        required: true
      path:
        description: The file.
        type: path
        required: true
      first_line:
        description: Digest only the first line (a Hugging Face download's C(.metadata) file holds the commit on its
          first line and a download time after it).
        type: bool
        default: false
  check_unit:
    description:
      - For O(mode=check), read the instance's unit state (C(systemctl is-active)). Anything but C(active) is a reason
        for a cutover (the converge starts the unit; a verification alone would only report it down).
      - A unit on its way somewhere (C(activating), C(deactivating), C(reloading)), or not started yet while the
        container is still booting (C(systemctl is-system-running) says C(initializing) or C(starting)), is waited for,
        at most O(unit_settle_timeout), since a container that the same run has just (re)started is not a reason to cut
        over.
    type: bool
    default: false
  unit_settle_timeout:
    description: Seconds O(check_unit) waits for the unit and the container's boot to settle.
    type: float
    default: 120
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: O(mode=check) never writes; O(mode=record) reports what it would write.
  diff_mode:
    support: none
notes:
  - A record that is not a regular file, or not a rollout record, is reported as a reason for a cutover and left where
    it is; the cutover's O(mode=record) replaces it.
"""

EXAMPLES = r"""
- name: Decide whether the container needs a cutover
  llmops.serving.rollout_plan:
    instance: qwen36
    components: "{{ lookup('llmops.serving.rollout_inputs', 'sglang', 'sglang_service') | llmops.serving.rollout_components(hostvars[inventory_hostname]) }}"
    state_files:
      - name: node_driver
        path: /proc/driver/nvidia/version
    check_unit: true
  register: plan

- name: Record the verified rollout
  llmops.serving.rollout_plan:
    instance: qwen36
    components: "{{ plan.components }}"
    mode: record
    deployment_id: "{{ sglang_service_deployment_id }}"
"""

RETURN = r"""
cutover:
  description: Whether the container would get a new deployment (O(mode=check)).
  returned: always
  type: bool
reasons:
  description: Why (empty when nothing changed).
  returned: always
  type: list
  elements: str
changed_components:
  description: The components whose digest differs from the record.
  returned: always
  type: list
  elements: str
components:
  description: The components given, and in O(mode=check) one C(state_<name>) per O(state_files) entry.
  returned: always
  type: dict
current_deployment_id:
  description: The deployment recorded in C(deployment.json) now, or null.
  returned: always
  type: str
recorded_deployment_id:
  description: The deployment the last verified rollout recorded, or null.
  returned: always
  type: str
path:
  description: The rollout record's path.
  returned: always
  type: str
"""

import datetime
import errno
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import atomic_file, deployment_layout, deployment_state, rollout_plan


def read_rollout_record(path):
    """(record or None, reason or None): a missing file is no record; a damaged one is a reason."""
    try:
        return rollout_plan.parse_record(atomic_file.read_regular(path)), None
    except FileNotFoundError:
        return None, None
    except atomic_file.NotARegularFile as exc:
        return None, "%s is %s, not a rollout record" % (path, exc.found)
    except OSError as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    except rollout_plan.PlanRecordError as exc:
        return None, "%s is not a usable rollout record (%s)" % (path, exc)


def read_state_file(path, first_line):
    """The value a state file contributes to its digest: its text, None when absent, or what is there instead."""
    try:
        data = atomic_file.read_regular(path, max_bytes=rollout_plan.STATE_FILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    except atomic_file.NotARegularFile as exc:
        return {"not_a_regular_file": exc.found}
    except OSError as exc:
        return {"unreadable": errno.errorcode.get(exc.errno, str(exc.errno))}
    text = data.decode("utf-8", "surrogateescape")
    return text.split("\n", 1)[0].strip() if first_line else text


def unit_state(module, unit):
    """What ``systemctl is-active`` prints for the unit ("active", "inactive", "failed", ...; "unknown" when nothing)."""
    # is-active exits non-zero for every state but active: the printed state is the answer, not the exit status.
    _rc, stdout, stderr = module.run_command(["systemctl", "is-active", "--", unit], environ_update={"LC_ALL": "C"})
    return (stdout or stderr).strip().splitlines()[0] if (stdout or stderr).strip() else "unknown"


# Unit states on their way to another one; and the system states of a boot still in progress.
SETTLING_UNIT_STATES = ("activating", "deactivating", "reloading")
BOOTING_SYSTEM_STATES = ("initializing", "starting")
SETTLE_POLL_SECONDS = 0.5


def settled_unit_state(module, unit, timeout, clock=time.monotonic, sleep=time.sleep):
    """(state, seconds waited): the unit's state once it is not on its way somewhere, nor still to be started by a boot
    in progress; the state it has at ``timeout`` otherwise."""
    start = clock()
    while True:
        state = unit_state(module, unit)
        settling = state in SETTLING_UNIT_STATES
        if not settling and state == "inactive":
            _rc, stdout, _stderr = module.run_command(["systemctl", "is-system-running"], environ_update={"LC_ALL": "C"})
            settling = (stdout or "").strip() in BOOTING_SYSTEM_STATES
        waited = clock() - start
        if not settling or waited >= timeout:
            return state, waited
        sleep(min(SETTLE_POLL_SECONDS, max(timeout - waited, 0.0)))


def current_deployment(paths):
    """(deployment ID or None, reason or None) from deployment.json, never setting a damaged record aside."""
    try:
        record = deployment_state.load_record(paths["record_path"], paths["archive_root"], check_mode=True)
    except deployment_state.StateError as exc:
        return None, str(exc)
    return (record or {}).get("deployment_id"), None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instance=dict(type="str", required=True),
            state_dir=dict(type="path", default=deployment_layout.DEFAULT_STATE_DIR),
            components=dict(type="dict", required=True),
            mode=dict(type="str", choices=["check", "record"], default="check"),
            deployment_id=dict(type="str"),
            state_files=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                path=dict(type="path", required=True),
                first_line=dict(type="bool", default=False),
            )),
            check_unit=dict(type="bool", default=False),
            unit_settle_timeout=dict(type="float", default=120.0),
        ),
        required_if=[("mode", "record", ["deployment_id"])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        paths = deployment_layout.instance_paths(params["instance"], state_dir=params["state_dir"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    components = params["components"]
    bad = sorted(str(name) for name, value in components.items()
                 if not rollout_plan.COMPONENT_RE.match(str(name)) or not rollout_plan.DIGEST_RE.match(str(value)))
    if bad:
        module.fail_json(msg="components must map names to SHA-256 hex digests: %s" % ", ".join(bad))
    path = paths["rollout_path"]
    record, record_problem = read_rollout_record(path)
    current_id, current_problem = current_deployment(paths)
    result = dict(changed=False, path=path, components=components, current_deployment_id=current_id,
                  recorded_deployment_id=(record or {}).get("deployment_id"))

    if params["mode"] == "check":
        state = dict((entry["name"], read_state_file(entry["path"], entry["first_line"])) for entry in params["state_files"])
        try:
            components = rollout_plan.add_state(components, state)
        except ValueError as exc:
            module.fail_json(msg=str(exc), **result)
        result["components"] = components
        verdict = rollout_plan.compare(record, components, current_id)
        reasons = [problem for problem in (record_problem, current_problem) if problem] or verdict["reasons"]
        if params["check_unit"]:
            unit = deployment_layout.unit_name(params["instance"])
            state_now, waited = settled_unit_state(module, unit, params["unit_settle_timeout"])
            if state_now != "active":
                reasons = reasons + ["the unit %s is %s, not active%s" % (
                    unit, state_now, " (after waiting %.0f s for it to settle)" % waited if waited >= 1 else "")]
        module.exit_json(cutover=bool(reasons) or verdict["cutover"], reasons=reasons,
                         changed_components=verdict["changed"], **result)

    deployment_id = params["deployment_id"]
    if not rollout_plan.DIGEST_RE.match(deployment_id):
        module.fail_json(msg="deployment_id must be a SHA-256 hex digest", **result)
    if params["state_files"]:
        # What the container says after the rollout, not what the plan read before it: the first deployment downloads
        # the model after the plan, and a record of "no model yet" made the next run cut over again for nothing.
        state = dict((entry["name"], read_state_file(entry["path"], entry["first_line"])) for entry in params["state_files"])
        names = set("state_" + name for name in state)
        try:
            components = rollout_plan.add_state(dict((name, value) for name, value in components.items() if name not in names), state)
        except ValueError as exc:
            module.fail_json(msg=str(exc), **result)
        result["components"] = components
    if current_id != deployment_id:
        module.fail_json(msg="refusing to record deployment %s.. as verified: the container's deployment record says %s"
                         % (deployment_id[:12], current_id), **result)
    same = record is not None and record["components"] == components and record["deployment_id"] == deployment_id
    result.update(cutover=False, reasons=[], changed_components=[], recorded_deployment_id=deployment_id)
    if same:
        module.exit_json(**result)
    if not module.check_mode:
        recorded_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            atomic_file.atomic_write(path, rollout_plan.render_record(components, deployment_id, recorded_at).encode(), 0o644)
        except OSError as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, exc.strerror or exc), **result)
    result["changed"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
