# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: model_revision_file
short_description: The file that records which commit of a model is staged in a directory
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - "C(hf download --local-dir) records the commit of every file it fetched in
    C(<dir>/.cache/huggingface/download/<file>.metadata), the commit hash on the first line. The model's revision is
    the one recorded for C(config.json)."
  - The one definition the sglang role (which stages the model) and the rollout plan (which compares the staged
    revision with the last verified rollout) both use.
options:
  _input:
    description: The model directory (absolute).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the commit of the staged model
  ansible.builtin.slurp:
    src: "{{ '/srv/models/Qwen3.6-27B' | llmops.serving.model_revision_file }}"
    # -> /srv/models/Qwen3.6-27B/.cache/huggingface/download/config.json.metadata
"""

RETURN = r"""
_value:
  description: The path of C(config.json)'s download metadata in the model directory.
  type: str
"""

from ansible.errors import AnsibleFilterError

# huggingface_hub's local-dir download cache (huggingface_hub/_local_folder.py: .cache/huggingface/download/).
METADATA_OF_CONFIG = ".cache/huggingface/download/config.json.metadata"


def model_revision_file(model_dir):
    if not isinstance(model_dir, str) or not model_dir.startswith("/"):
        raise AnsibleFilterError("model_revision_file expects an absolute model directory, not %r" % (model_dir,))
    return model_dir.rstrip("/") + "/" + METADATA_OF_CONFIG


class FilterModule:
    def filters(self):
        return {"model_revision_file": model_revision_file}
