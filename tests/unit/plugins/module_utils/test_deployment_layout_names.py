# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Instance names are matched whole (a trailing newline is refused, unlike with re.match(...$)), and deployment.env is
written through the escaping layer: an instance name cannot forge a line in it, and plain values stay byte-identical to
the files earlier releases wrote (or every rerun would report a change)."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import deployment_layout as layout
from ansible_collections.llmops.serving.plugins.modules import deployment_record, deployment_restore
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils import systemd_reference as ref

FORGED = "qwen36\nLLMOPS_DEPLOYMENT_ID=" + "0" * 64


@pytest.mark.parametrize("bad", ["qwen36\n", "qwen36\r", "qwen 36", "qwen36\0", "-qwen", "q\tx", "qwen36\u2028", FORGED])
def test_an_instance_name_with_whitespace_or_control_characters_is_refused(bad):
    error = layout.instance_name_error(bad)
    assert error and error.startswith("instance %r is not a valid instance name" % bad)
    with pytest.raises(ValueError, match="not a valid instance name"):
        layout.instance_paths(bad)


def test_a_forged_line_never_reaches_deployment_env():
    with pytest.raises(ValueError, match="not a valid instance name"):
        layout.deployment_env_text(FORGED, "a" * 64)


def test_deployment_env_reads_back_as_the_id_and_instance_and_keeps_its_old_bytes():
    text = layout.deployment_env_text("qwen3.6-27b_a", "f" * 64)
    assert text == ("# Written by llmops.serving.deployment_record; loaded by the unit.\n"
                    "LLMOPS_DEPLOYMENT_ID=%s\nLLMOPS_INSTANCE=qwen3.6-27b_a\n" % ("f" * 64))
    assert ref.env_file_assignments(text) == [("LLMOPS_DEPLOYMENT_ID", "f" * 64), ("LLMOPS_INSTANCE", "qwen3.6-27b_a")]


@pytest.mark.parametrize("module", [deployment_record, deployment_restore])
def test_the_modules_refuse_an_instance_name_with_a_trailing_newline(module, tmp_path):
    unit = tmp_path / "unit.service"
    unit.write_text("[Service]\nExecStart=/x\n")
    args = {"instance": "qwen36\n", "state_dir": str(tmp_path / "state"), "env_file": str(tmp_path / "deployment.env")}
    if module is deployment_record:
        args["files"] = [str(unit)]
    result, failed = run_module(module.main, args)
    assert failed and "not a valid instance name" in result["msg"]
    assert not (tmp_path / "deployment.env").exists()
