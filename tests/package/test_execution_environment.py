# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""execution-environment.yml: `make ee` (ansible-builder create) writes a build context whose Containerfile installs
the pinned ansible-core, the collection from its tarball and, through ansible-builder's own introspection of the
installed collection, the collection's Python and system dependencies."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
CONTEXT = REPO / ".build" / "ee" / "context"


def run(args, **kwargs):
    # As in the image build: no ansible.cfg of this checkout, whose collections_path already holds llmops.serving (an
    # install would then be skipped as done).
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_CONFIG"}
    env.update(PATH="%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(arg) for arg in args], env=env, capture_output=True, text=True, timeout=300, check=False,
                          **kwargs)


def pinned(requirements, name):
    for line in (REPO / "requirements" / requirements).read_text().splitlines():
        if line.startswith(name + "=="):
            return line.strip()
    raise AssertionError("%s is not pinned in requirements/%s" % (name, requirements))


@pytest.fixture(scope="module")
def context():
    done = run([REPO / "scripts" / "ee.sh"], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return CONTEXT


def test_the_containerfile_installs_the_pinned_ansible_and_the_collection(context):
    containerfile = (context / "Containerfile").read_text()
    definition = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert 'ARG EE_BASE_IMAGE="%s"' % definition["images"]["base_image"]["name"] in containerfile
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="(.*)"$', containerfile, re.M).group(1).split()
    assert pinned("runtime.txt", "ansible-core") in refs
    assert any(ref.startswith("ansible-runner==") for ref in refs)
    # galaxy.yml's dependencies come from the ansible package, never from a Galaxy server.
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--no-deps"' in containerfile
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "introspect.py introspect" in containerfile


def test_the_context_carries_the_collection_tarball_the_galaxy_step_installs(context):
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements == {"collections": [{"name": "collections/llmops-serving.tar.gz", "type": "file"}]}
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    with tarfile.open(context / "_build" / "collections" / "llmops-serving.tar.gz") as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
        names = tar.getnames()
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("llmops", "serving", galaxy["version"])
    assert {"meta/execution-environment.yml", "meta/requirements.txt", "meta/bindep.txt"} <= set(names)


def test_the_community_collections_come_from_the_pinned_ansible_package(context):
    python = (context / "_build" / "requirements.txt").read_text().split()
    assert pinned("runtime.txt", "ansible") in python


def test_introspection_of_the_installed_collection_finds_its_python_and_system_dependencies(context, tmp_path):
    installed = run([BIN / "ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force", "-p", tmp_path / "collections",
                     context / "_build" / "collections" / "llmops-serving.tar.gz"], cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The builder stage's own introspection command, with its /build files taken from the context.
    containerfile = (context / "Containerfile").read_text()
    command = re.search(r"^RUN \$PYCMD /output/scripts/introspect.py introspect (.*)$", containerfile, re.M).group(1).split()
    user_files = [arg.replace("=", "=%s/" % (context / "_build"), 1) for arg in command if arg.startswith("--user-")]
    done = run([sys.executable, context / "_build" / "scripts" / "introspect.py", "introspect", *user_files,
                "--write-pip", tmp_path / "pip.txt", "--write-bindep", tmp_path / "bindep.txt", tmp_path / "collections"])
    assert done.returncode == 0, done.stdout + done.stderr
    pip_lines = (tmp_path / "pip.txt").read_text().splitlines()
    bindep_lines = (tmp_path / "bindep.txt").read_text().splitlines()
    ours = [line.split("#")[0].strip() for line in pip_lines if line.endswith("# from collection llmops.serving")]
    assert {re.split(r"[<>=!~ ]", line)[0] for line in ours} == {"paramiko", "proxmoxer", "requests", "urllib3"}
    assert "openssh-client [platform:dpkg]  # from collection llmops.serving" in bindep_lines
    assert any(line.startswith("ansible==") and line.endswith("# from collection user") for line in pip_lines)


def test_meta_requirements_cover_every_third_party_import_of_the_plugins():
    imported = set()
    for path in (REPO / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported if name not in sys.stdlib_module_names}
    third_party -= {"ansible", "ansible_collections", "__future__"}
    required = {re.split(r"[<>=!~ ]", line)[0] for line in (REPO / "meta" / "requirements.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert third_party <= required, third_party - required
