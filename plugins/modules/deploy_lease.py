#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_lease
short_description: Take or give back the deploy lease of a container, so that two runs never change it at once
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "A deploy lease is a file (O(path), mode 0600, in a directory only root may write) naming the run of
    ansible-playbook that may change a container now. C(deploy.yml) takes every container's lease in its first play
    and gives them back in its last; a second run started meanwhile against the same container is refused, naming the
    run that holds it, before it changes anything."
  - "O(state=present) takes the lease when it is free or already this run's. When another run holds it, the action
    plugin (on the controller) asks whether that run still runs: a run of this controller whose ansible-playbook
    process is gone (killed, crashed, or its machine rebooted) is taken over, and the result says so
    (RV(took_over)); a run still running, or a run of another controller (which cannot be checked from here), is
    refused, naming it and how to break the lease when that run is known to be over (O(replace))."
  - A run that fails or dies keeps its leases (a failed run's last play never runs); the next run from the same
    controller takes them over by itself.
  - O(state=absent) removes the lease when this run (or a run in O(replace)) holds it; another run's is left alone.
  - Reads and replacements of a lease happen under an flock of a sibling file (C(<path>.lock)), so two runs racing for
    a free or abandoned lease cannot both take it. A lease directory that another user owns or may write, a symbolic
    link, a FIFO or anything that is not a lease at O(path) is refused by name, never followed or overwritten.
options:
  path:
    description: The lease file. Its directory is created (mode 0700) when missing.
    type: path
    required: true
  state:
    description: C(present) takes the lease, C(absent) gives it back.
    type: str
    choices: [present, absent]
    default: present
  run:
    description:
      - The run that takes or gives back the lease. Filled by the action plugin with this run of ansible-playbook (the
        controller, the user, the PID and start of its process, the boot and the machine); set it only to act for
        another run.
    type: dict
  replace:
    description:
      - IDs of runs whose lease this run may take over or remove, as the refusal prints them (C(deploy.yml) passes
        C(llmops_deploy_lease_break) here). The action plugin adds the holder itself when it found that run gone.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the lease would be taken or given back, and who holds it; writes nothing.
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Take the container's deploy lease (on its Proxmox node, where it exists before the container does)
  llmops.serving.deploy_lease:
    path: "/run/lock/llmops-serving/lxc-{{ pve_container_vmid }}.json"
  delegate_to: "{{ llmops_pve_node }}"

- name: Take over the lease of a run that is known to be over (from another controller)
  llmops.serving.deploy_lease:
    path: /run/lock/llmops-serving/lxc-201.json
    replace: [laptop/41234/20261205T030102Z]

- name: Give the lease back at the end of the run
  llmops.serving.deploy_lease:
    path: /run/lock/llmops-serving/lxc-201.json
    state: absent
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lease now (in check mode, would hold it). Always false for O(state=absent).
  returned: always
  type: bool
holder:
  description: The lease found before this task (its C(run) with C(id), C(controller), C(user), C(pid), C(started);
    C(taken)), or null when there was none.
  returned: always
  type: dict
took_over:
  description: The ID of the run whose lease this run took over, or null.
  returned: always
  type: str
holder_state:
  description: "Whether the holder of a lease that another run holds still runs, as the controller found: C(alive),
    C(gone) (taken over) or C(unknown) (a run of another controller)."
  returned: when another run held the lease
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import deploy_lease


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            run=dict(type="dict"),
            replace=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["run"] is None:
        module.fail_json(msg="run is required (the action plugin fills it with this run of ansible-playbook)")
    try:
        run = deploy_lease.check_run(params["run"])
    except ValueError as exc:
        module.fail_json(msg="run: %s" % exc)
    path = params["path"]
    result = dict(changed=False, acquired=False, holder=None, took_over=None)
    try:
        if params["state"] == "present":
            changed, before, after = deploy_lease.take(path, run, params["replace"], module.check_mode)
            result.update(changed=changed, acquired=True, holder=before,
                          took_over=before["run"]["id"] if before and before["run"]["id"] != run["id"] else None)
        else:
            changed, before = deploy_lease.give_back(path, run["id"], params["replace"], module.check_mode)
            after = None if changed else before
            result.update(changed=changed, holder=before)
    except deploy_lease.LeaseHeld as exc:
        result["holder"] = exc.holder
        module.fail_json(msg="%s holds the deploy lease %s" % (deploy_lease.describe(exc.holder), path), **result)
    except deploy_lease.LeaseProblem as exc:
        module.fail_json(msg=str(exc), **result)
    if module._diff:
        result["diff"] = dict(before=deploy_lease.render(before), after=deploy_lease.render(after),
                              before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
