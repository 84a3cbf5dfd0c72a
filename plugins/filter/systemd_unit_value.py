# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_unit_value
short_description: Render one value of a systemd unit setting that takes no quoted words
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Checks and renders the value of a setting such as C(Description=), C(User=), C(EnvironmentFile=),
    C(ReadWritePaths=), C(LogsDirectory=), C(LoadCredential=) or C(DeviceAllow=) so that systemd reads back exactly that
    value, or fails with a message that names the setting or variable and the offending character (never the value).
  - Every kind refuses control characters and other characters systemd cannot carry (newline, carriage return, NUL, DEL,
    C1 controls, Unicode noncharacters, line separators), as a newline would start a new directive.
options:
  _input:
    description: The value.
    type: str
    required: true
  name:
    description: The setting or variable the value is for, for error messages.
    type: str
    required: true
  kind:
    description:
      - C(text) (C(Description=)) doubles C(%) (specifiers are expanded there) and refuses leading or trailing whitespace
        (systemd drops it) and a trailing backslash (it would join the next line).
      - C(path) and C(relative_path) refuse whitespace, quotes, backslashes, C(%), C($), C(;) and C(..) components, as
        systemd splits, unquotes or expands them in some path settings and not in others.
      - C(account) takes a user or group name, C(keyword) one word of letters, digits, C(_) and C(-), C(device_allow) a
        C(/dev) path or C(char-)/C(block-) class followed by the access.
    type: str
    choices: [text, path, relative_path, account, keyword, device_allow]
    default: text
"""

EXAMPLES = r"""
- name: Render a unit's description and environment file
  ansible.builtin.copy:
    dest: /etc/systemd/system/example.service
    mode: "0644"
    content: |
      [Unit]
      Description={{ 'Example at 100% load' | llmops.serving.systemd_unit_value('Description') }}
      [Service]
      EnvironmentFile={{ '/etc/example/env' | llmops.serving.systemd_unit_value('EnvironmentFile', kind='path') }}
      ExecStart=/usr/bin/true
    # -> Description=Example at 100%% load
"""

RETURN = r"""
_value:
  description: The value as the unit file must spell it.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.systemd_syntax import SystemdSyntaxError, unit_value


def systemd_unit_value(value, name, kind="text"):
    try:
        return unit_value(value, name, kind)
    except SystemdSyntaxError as exc:
        raise AnsibleFilterError("systemd_unit_value: %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"systemd_unit_value": systemd_unit_value}
