# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deployment_paths
short_description: The names and paths of a server instance on the target
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Returns the systemd unit, the configuration, state, archive, log and cache paths of an instance, from the roots that
    hold one directory per instance.
  - The same definition the modules M(llmops.serving.deployment_record) and M(llmops.serving.deployment_restore) use, so
    the roles and the modules cannot disagree on where a file lives.
options:
  _input:
    description: The instance name; no slashes, not starting with a dot.
    type: str
    required: true
  config_dir:
    description: Directory that holds one configuration directory per instance.
    type: str
    default: /etc/llmops-serving
  state_dir:
    description: Directory that holds one state directory (deployment record, archive) per instance.
    type: str
    default: /var/lib/llmops-serving
  log_root:
    description: Directory that holds one log directory per instance.
    type: str
    default: /var/log/llmops-serving
  cache_root:
    description: Directory that holds one cache directory per instance.
    type: str
    default: /var/cache/llmops-serving
  unit_dir:
    description: Directory of the systemd unit file.
    type: str
    default: /etc/systemd/system
"""

EXAMPLES = r"""
- name: Show where instance qwen36 logs
  ansible.builtin.debug:
    msg: "{{ ('qwen36' | llmops.serving.deployment_paths(log_root='/var/log/llmops-serving')).current_log }}"
    # -> /var/log/llmops-serving/qwen36/current.log
"""

RETURN = r"""
_value:
  description:
    - C(instance), C(unit) (C(sglang-<instance>.service)), C(unit_path), C(config_dir), C(server_env), C(deployment_env),
      C(secrets_config) (the API key's C(server-secrets.yaml)), C(state_dir), C(record_path) (C(deployment.json)),
      C(sampling_path), C(archive_root), C(log_dir), C(current_log) and C(cache_dir).
    - C(config_dir), C(state_dir) and C(log_dir) here are the instance's own directories under the roots.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils import deployment_layout


def deployment_paths(instance, config_dir=deployment_layout.DEFAULT_CONFIG_DIR, state_dir=deployment_layout.DEFAULT_STATE_DIR,
                     log_root=deployment_layout.DEFAULT_LOG_ROOT, cache_root=deployment_layout.DEFAULT_CACHE_ROOT,
                     unit_dir=deployment_layout.SYSTEMD_UNIT_DIR):
    if not isinstance(instance, str):
        raise AnsibleFilterError(f"deployment_paths expects an instance name, not {type(instance).__name__}")
    roots = dict(config_dir=config_dir, state_dir=state_dir, log_root=log_root, cache_root=cache_root, unit_dir=unit_dir)
    for name, root in roots.items():
        if not isinstance(root, str) or not root.startswith("/"):
            raise AnsibleFilterError(f"deployment_paths: {name} must be an absolute path, not {root!r}")
    try:
        return deployment_layout.instance_paths(str(instance), **{name: str(root) for name, root in roots.items()})
    except ValueError as exc:
        raise AnsibleFilterError(f"deployment_paths: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"deployment_paths": deployment_paths}
