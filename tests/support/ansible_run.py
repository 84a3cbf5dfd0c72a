# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run ``ansible`` and ``ansible-playbook`` with the ansible.posix.json callback and read what they did.

The one way the tests run Ansible from outside a play: the molecule verifiers (call a module on the target, rerun the
converge), the integration tests, the benches, and shell checks through the command line
(``python -m ansible_collections.llmops.serving.tests.support.ansible_run HOST MODULE [ARGS_JSON]``).

Why the json callback: testinfra's host.ansible() reads ansible's --tree output, which in ansible-core 2.19 no longer
carries ``failed``, so a failing module would look like a passing one; the json callback keeps it. Only the json
callback may write to stdout, so the callbacks a configuration enables through ANSIBLE_CALLBACKS_ENABLED (the molecule
base config enables profile_tasks) are left out of these runs: their lines would break the JSON.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

TaskResult = collections.namedtuple("TaskResult", "play task host result duration")

# The fields of a result that carry what the run said (failure and debug messages, command output).
_SAID_FIELDS = ("msg", "stdout", "stderr", "module_stdout", "module_stderr", "exception", "warnings")


def short_name(task_name):
    """A task's own name: the json callback names a role's tasks "<role> : <name>"."""
    return task_name.split(" : ")[-1]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _said(result):
    for field in _SAID_FIELDS:
        yield from _strings(result.get(field))
    for item in result.get("results") or []:  # a loop's results, one per item
        if isinstance(item, dict):
            yield from _said(item)


def _seconds(duration):
    """Seconds between the json callback's start and end stamps (ISO 8601, UTC with a Z)."""
    start, end = (datetime.datetime.fromisoformat(duration[key].rstrip("Z")) for key in ("start", "end"))
    return (end - start).total_seconds()


class AnsibleRun:
    """A finished run: rc, seconds, the json callback's parsed output (None when it printed none) and readers of it."""

    def __init__(self, command, rc, stdout, stderr, seconds):
        self.command = command
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        try:
            self.output = json.loads(stdout)
        except ValueError:
            self.output = None

    @property
    def failed(self):
        return self.rc != 0

    def require_output(self):
        if self.output is None:
            raise AssertionError("%s printed no JSON (rc=%d):\n%s\n%s" % (
                os.path.basename(self.command[0]), self.rc, self.stdout[-3000:], self.stderr[-3000:]))
        return self.output

    @property
    def stats(self):
        """The recap: host -> {ok, changed, failures, unreachable, skipped, rescued, ignored}."""
        return self.require_output()["stats"]

    @property
    def results(self):
        """Every task result in order, as TaskResult(play, task, host, result, duration)."""
        found = []
        for play in self.require_output().get("plays", []):
            for task in play.get("tasks", []):
                for host, result in task.get("hosts", {}).items():
                    found.append(TaskResult(play["play"]["name"], task["task"]["name"], host, result,
                                            task["task"].get("duration") or result.get("duration")))
        return found

    def _named(self, name, host):
        return [item for item in self.results if short_name(item.task) == name and host in (None, item.host)]

    def task_results(self, name, host=None):
        """The results of the tasks called ``name`` (in every play), in order."""
        return [item.result for item in self._named(name, host)]

    def task_seconds(self, name, host=None):
        """How long each task called ``name`` took."""
        return [_seconds(item.duration) for item in self._named(name, host)]

    def failures(self):
        """``"<task> on <host>: <msg>"`` for every failed task result. The json callback does not mark a failure that
        ignore_errors or a rescue let pass, so those are here too (the recap counts them as ignored and rescued)."""
        return ["%s on %s: %s" % (short_name(item.task), item.host, item.result.get("msg")) for item in self.results
                if item.result.get("failed")]

    def changed_tasks(self):
        return ["%s on %s" % (item.task, item.host) for item in self.results if item.result.get("changed")]

    def module_result(self, host):
        """The result of an ad-hoc ``ansible HOST -m MODULE`` run."""
        try:
            return self.require_output()["plays"][0]["tasks"][0]["hosts"][host]
        except (KeyError, IndexError):
            raise AssertionError("%s gave no result for %s (rc %d): %s %s" % (
                " ".join(self.command[1:4]), host, self.rc, self.stdout[-2000:], self.stderr[-2000:])) from None

    @property
    def text(self):
        """What the run said, for text assertions: the task names, the messages and command output of every result,
        and stderr (where ansible reports what goes wrong before or outside a task)."""
        parts = []
        if self.output is None:
            parts.append(self.stdout)
        else:
            for play in self.output.get("plays", []):
                for task in play.get("tasks", []):
                    parts.append(task["task"]["name"])
                    for result in task.get("hosts", {}).values():
                        parts.extend(_said(result))
        parts.append(self.stderr)
        return "\n".join(parts)

    def summary(self, limit=3000):
        """A short account for an assertion message: the failures (or the recap) and the end of stderr."""
        if self.output is None:
            return "rc=%d, no JSON: %s\n%s" % (self.rc, self.stdout[-limit:], self.stderr[-limit:])
        said = "\n".join(self.failures()) or json.dumps(self.output.get("stats"))
        return "rc=%d\n%s\n%s" % (self.rc, said[-limit:], self.stderr[-limit:])


def program(name):
    """The ansible program next to this Python (the project's virtualenv), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else (shutil.which(name) or name)


def run_env(environment=None):
    """os.environ plus ``environment``, with the json callback as the only one that writes to stdout."""
    env = dict(os.environ, **(environment or {}))
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    # Modules run with connection local, and the programs ansible starts, come from the same virtualenv.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run(name, args, environment=None, cwd=None, timeout=300):
    """Run ``ansible`` or ``ansible-playbook`` with ``args``; an AnsibleRun, whatever its rc."""
    command = [program(name)] + [str(arg) for arg in args]
    started = time.monotonic()
    finished = subprocess.run(command, cwd=cwd, env=run_env(environment), capture_output=True, text=True, timeout=timeout, check=False)
    return AnsibleRun(command, finished.returncode, finished.stdout, finished.stderr, time.monotonic() - started)


def inventory_args(inventory):
    """``-i`` for one inventory source, or for each of a list (later sources win, as in ansible-playbook)."""
    sources = [inventory] if isinstance(inventory, str) else list(inventory or [])
    return [arg for source in sources for arg in ("-i", str(source))]


def ansible_playbook(playbook, *args, inventory=None, extra_vars=None, **options):
    """``ansible-playbook [-i INVENTORY]... PLAYBOOK [-e EXTRA_VARS_JSON] ARGS...``; ``options`` as for run()."""
    command = inventory_args(inventory) + [playbook]
    if extra_vars is not None:
        command += ["-e", json.dumps(extra_vars)]
    return run("ansible-playbook", command + list(args), **options)


def ansible_module(host, module, module_args=None, extra_args=(), inventory=None, **options):
    """``ansible [-i INVENTORY]... HOST -m MODULE [-a ARGS_JSON] EXTRA_ARGS...``; ``options`` as for run()."""
    command = inventory_args(inventory) + [host, "-m", module]
    if module_args is not None:
        command += ["-a", json.dumps(module_args)]
    return run("ansible", command + list(extra_args), **options)


# -- in a molecule verifier: the scenario's inventory and converge playbook ----------------------------------------

def molecule_inventory():
    """The inventory directory molecule wrote for the scenario (host_vars and group_vars included)."""
    return os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])


def molecule_platform():
    """The name of the scenario's one platform (its host in molecule's inventory)."""
    # ansible's own dependency; imported here because only the molecule helpers need it.
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as handle:
        hosts = list(yaml.safe_load(handle)["all"]["hosts"])
    if len(hosts) != 1:
        raise AssertionError("expected one platform in %s, found %s" % (os.environ["MOLECULE_INVENTORY_FILE"], hosts))
    return hosts[0]


def call_module(host, module, **module_args):
    """Run a collection module on a testinfra host's target; (result, failed)."""
    name = host.backend.host
    result = ansible_module(name, module, module_args, inventory=molecule_inventory(), timeout=120).module_result(name)
    return result, bool(result.get("failed"))


def rerun_converge(extra_vars=None, timeout=300):
    """Run the scenario's converge playbook again from the controller, with extra variables; an AnsibleRun."""
    playbook = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")
    return ansible_playbook(playbook, inventory=molecule_inventory(), extra_vars=extra_vars or {}, timeout=timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run one module with `ansible` and the json callback; print HOST's result as JSON.")
    parser.add_argument("host")
    parser.add_argument("module")
    parser.add_argument("module_args", nargs="?", help="the module's arguments as a JSON object")
    parser.add_argument("-i", "--inventory")
    parser.add_argument("-c", "--connection")
    options = parser.parse_args(argv)
    extra = ["-c", options.connection] if options.connection else []
    module_args = json.loads(options.module_args) if options.module_args else None
    finished = ansible_module(options.host, options.module, module_args, extra, inventory=options.inventory)
    try:
        print(json.dumps(finished.module_result(options.host)))
    except AssertionError as error:
        sys.stderr.write("%s\n" % error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
