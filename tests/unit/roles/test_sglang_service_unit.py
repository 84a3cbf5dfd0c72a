# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service's unit, environment file and input check, rendered by ansible's Templar from the role's defaults and
vars, read back with the reference readers of systemd 252's rules (tests/unit/plugins/module_utils/systemd_reference):
hostile values reach the server exactly as given, or the role refuses them naming the variable; none adds a directive."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.llmops.serving.tests.unit.plugins.module_utils import systemd_reference as ref
from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO
from ansible_collections.llmops.serving.tests.unit.roles.templar import render as render_with

ROLE = "roles/sglang_service"
ROLE_VARS = (ROLE + "/defaults/main.yml", ROLE + "/vars/main.yml")
PWNED = "ExecStartPre=+/bin/touch /tmp/pwned"
PRUNER = "/usr/local/libexec/llmops-serving/sglang-log-prune"
LAUNCHER = "/usr/local/libexec/llmops-serving/sglang-launch"
# What the sglang role publishes in the same play: the virtualenv of its install request, which the server runs from.
PUBLISHED = {"sglang_venv": "/opt/sglang/envs/0.5.23-0123456789ab"}


def render(text, variables, var_files):
    return render_with(text, dict(PUBLISHED, **(variables or {})), var_files)


def template(name):
    with open(os.path.join(REPO, ROLE, "templates", name), encoding="utf-8") as handle:
        return handle.read()


def render_unit(**variables):
    return render(template("sglang.service.j2"), dict({"ansible_managed": "Ansible managed"}, **variables), ROLE_VARS)


def input_errors(**variables):
    """The messages of the role's input check (tasks/validate.yml) for these variables over the defaults."""
    with open(os.path.join(REPO, ROLE, "tasks", "validate.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    expression = next(task["vars"]["_sglang_service_input_errors"] for task in tasks
                      if "_sglang_service_input_errors" in task.get("vars", {}))
    return render(expression, variables, ROLE_VARS)


def directives(unit):
    return [(section, key) for section, key, _value in ref.unit_settings(unit)]


def setting(unit, key):
    return [value for _section, name, value in ref.unit_settings(unit) if name == key]


def test_the_default_unit_runs_the_rendered_argv_and_nothing_else():
    unit = render_unit()
    argv = render("{{ _sglang_service_argv }}", {}, ROLE_VARS)
    assert setting(unit, "ExecStartPre") == ["+%s /var/log/llmops-serving/qwen36 10" % PRUNER]
    assert ref.exec_argv(setting(unit, "ExecStart")[0]) == ("", LAUNCHER, [LAUNCHER] + argv)
    assert "--tool-call-parser" in argv and argv[argv.index("--tool-call-parser") + 1] == "qwen3_coder"
    assert not setting(unit, "LoadCredential"), "no key, no credential"


HOSTILE_BUT_VALID = {
    "sglang_service_served_model_name": "qwen 3.6 \"27b\" at 100% for $USER",
    "sglang_service_model_path": "/models/Qwen 3.6/%h/${HOME}",
    "sglang_service_extra_args": ["--chat-template", "{% if x %}$HOME\\n;", ";", "\\;", "", "'", "日本"],
    "sglang_service_environment": {"SGLANG_NOTE": "a $HOME b %h \"q\" \\ c", "PCT": "100%"},
}


def test_hostile_values_reach_the_server_exactly_as_given():
    unit = render_unit(**HOSTILE_BUT_VALID)
    assert [key for _section, key in directives(unit)].count("ExecStartPre") == 1
    argv = ref.exec_argv(setting(unit, "ExecStart")[0])[2]
    assert argv[argv.index("--served-model-name") + 1] == HOSTILE_BUT_VALID["sglang_service_served_model_name"]
    assert argv[argv.index("--model-path") + 1] == HOSTILE_BUT_VALID["sglang_service_model_path"]
    assert argv[-7:] == ["--chat-template", "{% if x %}$HOME\\n;", ";", "\\;", "", "'", "日本"]
    environment = dict(pair for value in setting(unit, "Environment") for pair in ref.environment_assignments(value))
    assert environment["SGLANG_NOTE"] == HOSTILE_BUT_VALID["sglang_service_environment"]["SGLANG_NOTE"]
    assert environment["PCT"] == "100%"
    description = ref.expand_specifiers(setting(unit, "Description")[0])
    assert description == "SGLang server qwen36 (%s on port 30000)" % HOSTILE_BUT_VALID["sglang_service_served_model_name"]


@pytest.mark.parametrize("variables", [
    {"sglang_service_served_model_name": "m\n" + PWNED},
    {"sglang_service_served_model_name": "m\r" + PWNED},
    {"sglang_service_extra_args": ["x\0" + PWNED + "\0"]},
    {"sglang_service_environment": {"A": "x\n" + PWNED}},
    {"sglang_service_model_path": "/m\n" + PWNED},
    {"sglang_service_read_write_paths": ["/srv\n" + PWNED]},
    {"sglang_service_device_allow": ["/dev/null rw\n" + PWNED]},
])
def test_a_control_character_never_adds_a_directive_to_the_unit(variables):
    try:
        unit = render_unit(**variables)
    except AssertionError as refused:
        # The template fails in the filter that renders the value, naming it.
        assert re.search(r"failed: systemd_\w+: .*sglang_service_\w+.* contains a (newline|carriage return|NUL)",
                         str(refused)), str(refused)[-500:]
        return
    assert setting(unit, "ExecStartPre") == ["+%s /var/log/llmops-serving/qwen36 10" % PRUNER], unit


def test_the_input_check_names_each_variable_that_holds_a_control_character():
    assert input_errors() == []
    errors = input_errors(
        sglang_service_instance="qwen36\n",
        sglang_service_served_model_name="m\n" + PWNED,
        sglang_service_extra_args=["ok", "x\ry"],
        sglang_service_extra_flags={"context-length": "1\n"},
        sglang_service_environment={"A": "\0"},
        sglang_service_secret_environment={"HF_TOKEN": "hf_s3cret\n"},
        sglang_service_api_key="k3y\x7f",
        sglang_service_config_dir="/etc/llm ops",
        sglang_service_user="sglang\n",
        sglang_service_device_allow=["/dev/nvidiactl rw\n"],
    )
    named = [error.split(" contains ")[0].split(": ")[0].split(" must be")[0] for error in errors]
    assert named == [
        "sglang_service_instance", "sglang_service_user", "sglang_service_config_dir",
        "sglang_service_served_model_name", "sglang_service_extra_flags['context-length']", "sglang_service_extra_args[1]",
        "sglang_service_api_key", "sglang_service_environment['A']", "sglang_service_secret_environment['HF_TOKEN']",
        "sglang_service_device_allow[0]"]
    assert not [error for error in errors if "s3cret" in error or "k3y" in error or "pwned" in error]


def test_the_input_check_holds_the_speculative_flags_to_sglangs_rule():
    assert input_errors(sglang_service_speculative_num_draft_tokens=5) == [
        "sglang_service_speculative_num_draft_tokens is 5, but with sglang_service_speculative_eagle_topk 1 SGLang "
        "replaces it by sglang_service_speculative_num_steps + 1 = 4; set it to 4"]
    assert input_errors(sglang_service_speculative_algorithm="", sglang_service_speculative_num_draft_tokens=5) == []


def test_with_an_api_key_the_unit_names_the_credential_and_never_the_key():
    unit = render_unit(sglang_service_api_key="sk-Secret-1")
    assert "sk-Secret-1" not in unit
    assert setting(unit, "LoadCredential") == [
        "sglang-secrets.yaml:/etc/llmops-serving/qwen36/server-secrets.yaml"]
    environment = dict(pair for value in setting(unit, "Environment") for pair in ref.environment_assignments(value))
    assert environment["LLMOPS_SERVER_CONFIG_CREDENTIAL"] == "sglang-secrets.yaml"
    assert "--api-key" not in ref.exec_argv(setting(unit, "ExecStart")[0])[2]


def test_the_secret_environment_file_holds_the_values_exactly_and_not_the_api_key():
    secrets = {"HF_TOKEN": "hf_abc", "ODD": "a \"b\" $c `d` \\ e # f"}
    text = render(template("server.env.j2"), {"ansible_managed": "Ansible managed", "sglang_service_api_key": "sk-1",
                                              "sglang_service_secret_environment": secrets}, ROLE_VARS)
    assert ref.env_file_assignments(text) == sorted(secrets.items())
    assert "sk-1" not in text


@pytest.mark.parametrize("stdout, version", [("systemd 252 (252.38-1~deb12u1)\n+PAM +AUDIT", 252),
                                             ("systemd 246 (246.6)\n", 246), ("", 0)])
def test_the_systemd_version_the_credential_check_compares(stdout, version):
    assert render("{{ _sglang_service_systemd_version }}", {"_sglang_service_systemctl_version": {"stdout": stdout}},
                  ROLE_VARS) == version


def test_the_server_runs_from_the_published_virtualenv_and_the_record_names_it():
    venv = PUBLISHED["sglang_venv"]
    argv = render("{{ _sglang_service_argv }}", {}, ROLE_VARS)
    assert argv[:3] == [venv + "/bin/python", "-m", "sglang.launch_server"]
    assert render("{{ sglang_service_package_environment }}", {}, ROLE_VARS) == venv
    # A program outside the virtualenv (or in a directory that only starts with its name) names no environment: the
    # sglang role may prune every environment no deployment names, so a wrong name here could remove a running one.
    for command in (["/usr/local/bin/sglang-sim"], [venv + "-other/bin/python"]):
        assert render("{{ sglang_service_package_environment }}", {"sglang_service_server_command": command}, ROLE_VARS) == ""
