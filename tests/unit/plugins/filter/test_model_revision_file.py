# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.model_revision_file import FilterModule, model_revision_file


def test_the_metadata_of_config_json_in_huggingface_hubs_local_dir_cache():
    # huggingface_hub/_local_folder.py: <local_dir>/.cache/huggingface/download/<filename>.metadata
    assert model_revision_file("/srv/models/Qwen3.6-27B") == "/srv/models/Qwen3.6-27B/.cache/huggingface/download/config.json.metadata"
    assert model_revision_file("/srv/models/Qwen3.6-27B/") == model_revision_file("/srv/models/Qwen3.6-27B")
    assert FilterModule().filters()["model_revision_file"] is model_revision_file


@pytest.mark.parametrize("model_dir", ["", "models/Qwen", None, 3])
def test_a_directory_that_is_not_absolute_is_refused(model_dir):
    with pytest.raises(AnsibleFilterError, match="absolute model directory"):
        model_revision_file(model_dir)
