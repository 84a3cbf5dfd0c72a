#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: package_environments
short_description: List and prune the versioned SGLang package environments that no deployment runs from
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - The P(llmops.serving.sglang#role) role installs SGLang into one virtualenv per install request,
    C(<root>/<version>-<12 hex digits>) (for example C(/opt/sglang/envs/0.5.23-3f2a9c1b7e0d)), beside the one the
    running server uses, so a rollout stages a new SGLang without touching the running server.
  - This module lists those environments and which deployments reference them, and removes the ones that none does.
    An environment is referenced when the current deployment record of an instance
    (C(<state_dir>/<instance>/deployment.json)) or one of its archived deployments
    (C(<state_dir>/<instance>/deployments/<id>/manifest.json), which a rollback with
    M(llmops.serving.deployment_restore) may restore) names it as C(inputs.package_environment).
  - Only real directories directly under O(root) whose names are C(<version>-<12 lowercase hex digits>) are ever
    removed. Symbolic links (whatever they point at), other kinds of files and directories with other names are left
    alone and returned in RV(left_alone).
  - When any record or manifest cannot be read for certain (not a regular file, a symbolic link, not JSON, not of the
    record's schema, an environment that is not an absolute path) or O(state_dir) does not exist, nothing is removed,
    because the module cannot tell which environments are in use. It then warns, naming each problem, and does not fail.
options:
  root:
    description:
      - The directory that holds the environments. It must be an absolute path.
      - When it does not exist there is nothing to do. When it is a symbolic link or not a directory the module fails.
    type: path
    required: true
  state_dir:
    description:
      - Directory that holds one sub-directory per instance with C(deployment.json) and the archive, as given to
        M(llmops.serving.deployment_record).
    type: path
    default: /var/lib/llmops-serving
  keep:
    description:
      - Environments to keep whether or not a deployment references them, as absolute paths (a trailing slash does not
        matter), for example the one an install is about to use.
    type: list
    elements: path
    default: []
  prune:
    description:
      - Remove the environments that no deployment references and O(keep) does not name.
      - With V(false) the module only lists them.
    type: bool
    default: true
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is removed; C(changed) and RV(removed) say what a real run would remove.
  diff_mode:
    support: full
    details: Shows the names of the environments under O(root) before and after.
notes:
  - Paths are compared as written and with symbolic links in their parent directories resolved, so a record that
    names an environment through another path to O(root) still protects it.
  - An environment is removed with its whole tree; right before, the module checks again (lstat) that it is a real
    directory and not a symbolic link, and the removal never follows a symbolic link inside it.
  - Records written before environments were recorded (no C(inputs.package_environment), or an empty one) reference
    none. An environment that only such a deployment runs from is not protected, so deploy once with the current roles
    before pruning.
  - An environment an install is still creating is not referenced yet, so name it in O(keep).
seealso:
  - module: llmops.serving.deployment_record
  - module: llmops.serving.deployment_restore
"""

EXAMPLES = r"""
- name: Remove the SGLang environments no deployment runs from, keeping the one about to be installed
  llmops.serving.package_environments:
    root: /opt/sglang/envs
    keep:
      - /opt/sglang/envs/0.5.23-3f2a9c1b7e0d

- name: List the environments and who uses them
  llmops.serving.package_environments:
    root: /opt/sglang/envs
    prune: false
  register: envs

- name: Show the environments
  ansible.builtin.debug:
    msg: "{{ item.path }}: {{ item.referenced_by | join(', ') or 'unreferenced' }}"
  loop: "{{ envs.environments }}"
"""

RETURN = r"""
environments:
  description:
    - The environments found under O(root) before anything was removed, each with the deployments that reference it
      (V(<instance> current) or V(<instance> archived <first 12 digits of the deployment ID>)) and whether O(keep)
      names it.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The environment's directory.
      type: str
      sample: /opt/sglang/envs/0.5.23-3f2a9c1b7e0d
    referenced_by:
      description: The deployments that run from it; empty when none does.
      type: list
      elements: str
      sample: [qwen36-a current, qwen36-a archived 9a8b7c6d5e4f]
    keep:
      description: Whether O(keep) names it.
      type: bool
      sample: false
  sample:
    - path: /opt/sglang/envs/0.5.23-3f2a9c1b7e0d
      referenced_by: [qwen36-a current]
      keep: false
    - path: /opt/sglang/envs/0.5.9-a41c07e2b9d3
      referenced_by: []
      keep: false
removed:
  description: The environments that were removed (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/opt/sglang/envs/0.5.9-a41c07e2b9d3]
left_alone:
  description: Entries of O(root) that are no environment this module manages, with the reason; never removed.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The entry.
      type: str
    reason:
      description: Why it is left alone.
      type: str
  sample:
    - path: /opt/sglang/envs/current
      reason: a symbolic link, not a directory
problems:
  description:
    - What could not be read for certain under O(state_dir); when not empty, nothing was removed.
  returned: always
  type: list
  elements: str
  sample: ["the manifest /var/lib/llmops-serving/qwen36-a/deployments/9a8b.../manifest.json is unreadable: not JSON (...)"]
"""

import os
import shutil
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import file_type
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import DEFAULT_STATE_DIR
from ansible_collections.llmops.serving.plugins.module_utils.package_environments import (
    path_aliases,
    plan_prune,
    referenced_environments,
)


def _root_entries(root):
    """(name, st_mode from lstat) of each entry of ``root``; one that vanished while listed is left out."""
    entries = []
    with os.scandir(root) as found:
        for entry in found:
            try:
                entries.append((entry.name, entry.stat(follow_symlinks=False).st_mode))
            except FileNotFoundError:
                continue
    return entries


def _remove(path):
    """Remove the environment ``path`` if it is still a real directory; None when removed, else why not."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "gone before it was removed"
    if not stat.S_ISDIR(mode):
        return "%s by the time it was to be removed, not a directory" % file_type(mode)
    # rmtree works on directory file descriptors and refuses a symlink as its top: nothing outside the tree is touched.
    shutil.rmtree(path)
    return None


def _describe(plan, referenced, keep, real_root):
    """The result's environments: each with the deployments that reference it and whether keep names it."""
    reference_aliases = {path: path_aliases(path) for path in referenced}
    environments = []
    for path, name in plan["environments"]:
        aliases = {path, os.path.join(real_root, name)}
        labels = sorted({label for ref, labels in referenced.items() if reference_aliases[ref] & aliases for label in labels})
        environments.append(dict(path=path, referenced_by=labels, keep=bool(aliases & keep)))
    return environments


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
            keep=dict(type="list", elements="path", default=[]),
            prune=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, environments=[], removed=[], left_alone=[], problems=[])
    relative = [path for path in [params["root"]] + params["keep"] if not os.path.isabs(path)]
    if relative:
        module.fail_json(msg="root and keep take absolute paths; not absolute: %s" % ", ".join(map(repr, relative)), **result)
    root = os.path.normpath(params["root"])
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        module.exit_json(msg="%s does not exist: no environments" % root, **result)
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s" % (root, exc.strerror or exc), **result)
    if not stat.S_ISDIR(mode):
        module.fail_json(msg="%s is %s, not a directory of environments: give the directory itself as root" % (
            root, file_type(mode)), **result)

    referenced, problems = referenced_environments(params["state_dir"])
    keep = set()
    for path in params["keep"]:
        keep |= path_aliases(path)
    protected = set(keep)
    for path in referenced:
        protected |= path_aliases(path)
    real_root = os.path.realpath(root)
    try:
        plan = plan_prune(root, _root_entries(root), protected, real_root)
    except OSError as exc:
        module.fail_json(msg="cannot list %s: %s" % (root, exc.strerror or exc), **result)
    result.update(environments=_describe(plan, referenced, keep, real_root), problems=problems,
                  left_alone=[dict(path=path, reason=reason) for path, reason in plan["left_alone"]])
    to_remove = plan["remove"] if params["prune"] and not problems else []
    if problems:
        module.warn("which environments under %s deployments use cannot be told for certain%s: %s" % (
            root, ", so nothing was removed" if params["prune"] else "", "; ".join(problems)))
    if module._diff:
        before = [name for dummy_path, name in plan["environments"]]
        after = [name for path, name in plan["environments"] if path not in to_remove]
        result["diff"] = dict(before_header=root, after_header=root, before=before, after=after)
    if module.check_mode:
        result.update(removed=to_remove, changed=bool(to_remove))
        module.exit_json(msg="would remove %d of %d environment(s) under %s" % (
            len(to_remove), len(plan["environments"]), root), **result)
    for path in to_remove:
        try:
            not_removed = _remove(path)
        except OSError as exc:
            # Part of the tree may be gone already: that is a change.
            result["changed"] = True
            module.fail_json(msg="cannot remove %s: %s" % (path, exc), **result)
        if not_removed:
            result["left_alone"].append(dict(path=path, reason=not_removed))
        else:
            result["removed"].append(path)
            result["changed"] = True
    module.exit_json(msg="removed %d of %d environment(s) under %s" % (
        len(result["removed"]), len(plan["environments"]), root), **result)


if __name__ == "__main__":
    main()
