# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What sglang_service renders into the unit, judged by systemd's own parser (issue #12, class 3).

A unit rendered on the controller from the role's own template, defaults and vars with hostile values (quotes,
backslashes, %h, $HOME, ${X}, a lone ';', unicode) is installed under another name: systemd-analyze verify accepts it,
and the argv and environment systemd loaded (read over D-Bus, as systemctl show does) are exactly the ones the role
intended. Values with a newline, carriage return or NUL (the injection of an ExecStartPre=+ that would run as root)
make the converge fail before anything changes, naming the variable; /tmp/pwned never exists.
"""

from __future__ import annotations

import json
import shlex

import pytest

from sglang_checks import UNIT, unit_properties, wait_ready, wait_until

from ansible_collections.llmops.serving.plugins.module_utils.log_header import parse_header_line
from ansible_collections.llmops.serving.tests.support.ansible_run import rerun_converge
from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO, render

ROLE_VARS = ("roles/sglang_service/defaults/main.yml", "roles/sglang_service/vars/main.yml")
UNIT_PATH = "/etc/systemd/system/%s" % UNIT
HOSTILE_UNIT = "llmops-hostile-argv.service"
PWNED = "/tmp/pwned"
INJECTION = "ExecStartPre=+/bin/touch %s" % PWNED

# The "server" prints the argv and environment it was started with into its log (the launcher's stdout), so the test
# reads what systemd really executed.
PRINTER = ["/usr/bin/python3", "-c", "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"]
HOSTILE_BUT_VALID = {
    "sglang_service_instance": "hostile",
    "sglang_service_server_command": PRINTER,
    "sglang_service_served_model_name": "qwen \"3.6\" it's 100% for $USER",
    "sglang_service_model_path": "/models/Q 3.6/%h/${HOME}/back\\slash",
    "sglang_service_extra_args": [";", "\\;", "$HOME", "${X}", "$$", "a b", "%%", "", "日本語 ☃", "--x=\"y\""],
    "sglang_service_environment": {"NOTE": "$HOME %h \"q\" \\ end", "PCT": "100%", "DOLLARS": "$$ ${X}"},
}
HOSTILE_LOG_DIR = "/var/log/llmops-serving/hostile"
HOSTILE_CONFIG_DIR = "/etc/llmops-serving/hostile"


def bus_property(host, unit, interface, name):
    """A property of a unit as systemd holds it, from D-Bus as JSON (exact, unlike systemctl show's text)."""
    loaded = json.loads(host.check_output(
        "busctl --json=short call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager "
        "LoadUnit s %s" % unit))
    path = loaded["data"][0]
    return json.loads(host.check_output(
        "busctl --json=short get-property org.freedesktop.systemd1 %s org.freedesktop.systemd1.%s %s"
        % (path, interface, name)))["data"]


def role_template():
    with open("%s/roles/sglang_service/templates/sglang.service.j2" % REPO, encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture
def hostile_unit(host):
    """The role's unit rendered on the controller with HOSTILE_BUT_VALID, installed as HOSTILE_UNIT with the environment
    files it loads; removed with everything it wrote afterwards. Yields (unit path, the argv the role intended)."""
    text = render(role_template(), dict({"ansible_managed": "Ansible managed"}, **HOSTILE_BUT_VALID), ROLE_VARS)
    intended = render("{{ _sglang_service_argv }}", HOSTILE_BUT_VALID, ROLE_VARS)
    path = "/etc/systemd/system/%s" % HOSTILE_UNIT
    host.check_output("printf %%s %s > %s" % (shlex.quote(text), path))
    host.check_output("mkdir -p %s && printf 'LLMOPS_DEPLOYMENT_ID=%s\\nLLMOPS_INSTANCE=hostile\\n' > %s/deployment.env && "
                      ": > %s/server.env && chmod 600 %s/server.env"
                      % (HOSTILE_CONFIG_DIR, "0" * 64, HOSTILE_CONFIG_DIR, HOSTILE_CONFIG_DIR, HOSTILE_CONFIG_DIR))
    host.check_output("systemctl daemon-reload")
    yield path, intended
    host.run("systemctl stop %s; rm -rf %s %s %s && systemctl daemon-reload && systemctl reset-failed %s"
             % (HOSTILE_UNIT, path, HOSTILE_CONFIG_DIR, HOSTILE_LOG_DIR, HOSTILE_UNIT))


def test_systemd_executes_exactly_the_argv_and_environment_the_role_intended(host, hostile_unit):
    path, intended = hostile_unit
    verify = host.run("systemd-analyze verify --man=no %s" % path)
    assert HOSTILE_UNIT not in verify.stdout + verify.stderr, verify.stdout + verify.stderr
    # systemctl show and D-Bus: one command, no second one split off by a ';', and no ExecStartPre but the pruner.
    assert host.check_output("systemctl show -p ExecStart %s" % HOSTILE_UNIT).count("path=") == 1
    assert host.check_output("systemctl show -p ExecStartPre %s" % HOSTILE_UNIT).count("path=") == 1
    pre = bus_property(host, HOSTILE_UNIT, "Service", "ExecStartPre")
    assert [command[1] for command in pre] == [
        ["/usr/local/libexec/llmops-serving/sglang-log-prune", HOSTILE_LOG_DIR, "10"]]
    shown = host.check_output("systemctl show -p Description --value %s" % HOSTILE_UNIT)
    assert shown == "SGLang server hostile (%s on port 30000)" % HOSTILE_BUT_VALID["sglang_service_served_model_name"]

    # What systemd executed: the launcher exec'd the printer with the argv systemd gave it.
    host.check_output("systemctl start %s" % HOSTILE_UNIT)
    printed = wait_until(lambda: printed_by_the_server(host), 30, "the hostile unit's server to print its argv")
    role_argv = intended[len(PRINTER):]
    assert printed["argv"][:len(role_argv)] == role_argv
    # Metrics are on (the role's default), so the launcher appended the labels of this start.
    invocation = parse_header_line(host.check_output("head -n 1 %s/current.log" % HOSTILE_LOG_DIR))["invocation_id"]
    assert printed["argv"][len(role_argv):] == [
        "--extra-metric-labels",
        json.dumps({"sglang_instance": "hostile", "deployment_id": "0" * 64, "invocation_id": invocation})]
    for name, value in HOSTILE_BUT_VALID["sglang_service_environment"].items():
        assert printed["env"].get(name) == value, name


def printed_by_the_server(host):
    log = host.run("tail -n +2 %s/current.log" % HOSTILE_LOG_DIR)
    try:
        return json.loads(log.stdout) if log.rc == 0 and log.stdout.strip() else None
    except ValueError:
        return None


HOSTILE_INPUTS = [
    ({"sglang_service_served_model_name": "qwen3.6-27b\n" + INJECTION}, "sglang_service_served_model_name"),
    ({"sglang_service_served_model_name": "qwen3.6-27b\r" + INJECTION}, "sglang_service_served_model_name"),
    ({"sglang_service_extra_args": ["--x", "y\0" + INJECTION + "\0"]}, "sglang_service_extra_args[1]"),
    ({"sglang_service_environment": {"SGLANG_SIM_STARTUP_SECONDS": "1\n" + INJECTION}},
     "sglang_service_environment['SGLANG_SIM_STARTUP_SECONDS']"),
    ({"sglang_service_extra_flags": {"context-length": "4096\n" + INJECTION}},
     "sglang_service_extra_flags['context-length']"),
    ({"sglang_service_instance": "molecule\n"}, "sglang_service_instance"),
    ({"sglang_service_device_allow": ["/dev/null rw\n" + INJECTION]}, "sglang_service_device_allow[0]"),
]


@pytest.fixture
def unchanged_unit(host):
    """The unit file and invocation before the case; if the case changed them (the old code did), the scenario's own
    converge puts them back so the other checks run on the deployment they expect."""
    wait_ready(host)
    before = host.file(UNIT_PATH).sha256sum, unit_properties(host)["InvocationID"]
    host.run("rm -f %s" % PWNED)
    yield before
    if (host.file(UNIT_PATH).sha256sum, unit_properties(host)["InvocationID"]) != before:
        assert rerun_converge().rc == 0
        wait_ready(host)
    host.run("rm -f %s" % PWNED)


@pytest.mark.parametrize("extra_vars, variable", HOSTILE_INPUTS, ids=[variable for _vars, variable in HOSTILE_INPUTS])
def test_a_control_character_fails_the_role_naming_the_variable_and_changes_nothing(
        host, unchanged_unit, extra_vars, variable):
    run = rerun_converge(extra_vars)
    # First what matters most: no directive was injected and run as root, and the deployment did not change.
    assert not host.file(PWNED).exists, "an injected ExecStartPre=+ ran as root"
    assert (host.file(UNIT_PATH).sha256sum, unit_properties(host)["InvocationID"]) == unchanged_unit
    failures = run.failures()
    assert run.rc != 0 and failures, run.summary()
    assert failures[0].startswith("Check that every name, path, flag and environment value can be rendered"), failures
    assert variable in failures[0], failures[0]
    assert "contains a" in failures[0] or "is not a valid instance name" in failures[0], failures[0]
    assert "/bin/touch" not in failures[0], "the message names the variable, not its value"
