#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: controller_report
short_description: Write a report of this run on the controller
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Writes O(content) to O(path) on the controller (the machine that runs ansible-playbook), atomically (a temporary
    file in the same directory, then a rename), creating missing directories with mode 0755.
  - An action plugin that runs in the controller's worker process, for whichever host the task runs for; no module
    runs, on the target or on the controller. A fleet's rerun writes one verification summary per server, and a copy
    delegated to localhost would start two Python processes for each.
  - A report of the run, not a change to a host, so the result is never RV(ignore:changed) and the file is written in
    check mode too.
options:
  path:
    description: The file on the controller. A symbolic link there is replaced, never followed.
    type: path
    required: true
  content:
    description: The text to write (UTF-8).
    type: str
    required: true
  mode:
    description: Permission bits of the file, as an octal string.
    type: str
    default: "0644"
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: The report is written in check mode too (a report of the run, not a change to a host).
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Write the summary as JSON on the controller
  llmops.serving.controller_report:
    path: "{{ playbook_dir }}/.llmops-verify/{{ inventory_hostname }}.json"
    content: "{{ summary | to_nice_json }}\n"
"""

RETURN = r"""
path:
  description: The file written (absolute).
  returned: always
  type: str
"""
