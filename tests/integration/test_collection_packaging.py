"""The collection as users get it: a tarball that installs, modules whose docs render, a playbook that parses."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
FILTERS = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if p.stem != "__init__")


def run(args, env=None, cwd=REPO):
    merged = dict(os.environ, ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.run(args, cwd=cwd, env=merged, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the tarball and install it into an empty collections path."""
    out = tmp_path_factory.mktemp("dist")
    built = run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", str(out), str(REPO)])
    assert built.returncode == 0, built.stderr
    tarball = out / f"llmops-serving-{GALAXY['version']}.tar.gz"
    assert tarball.exists(), built.stdout
    target = tmp_path_factory.mktemp("collections")
    # Only the empty target on the collections path: the checkout's own link must not count as "already installed".
    inst = run([BIN / "ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force", "-p", str(target), str(tarball)],
               env={"ANSIBLE_COLLECTIONS_PATH": str(target)}, cwd=target)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    assert (target / "ansible_collections" / "llmops" / "serving" / "MANIFEST.json").exists(), inst.stdout
    return tarball, target


def test_tarball_holds_the_collection_and_none_of_the_dev_files(installed):
    tarball = installed[0]
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "MANIFEST.json" in names and "galaxy.yml" not in names
    assert any(n.startswith("roles/sglang_service/") for n in names)
    assert all(f"plugins/modules/{m}.py" in names for m in MODULES)
    for dev_path in ("tests/", "molecule/", ".venv/", "collections/", "scripts/", ".ci/", "requirements/"):
        assert not [n for n in names if n.startswith(dev_path)], f"{dev_path} must not ship in the tarball"


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_every_module_of_the_installed_collection(installed, module):
    target = installed[1]
    doc = run([BIN / "ansible-doc", "-t", "module", f"llmops.serving.{module}"],
              env={"ANSIBLE_COLLECTIONS_PATH": str(target)}, cwd=target)
    assert doc.returncode == 0, doc.stderr
    assert str(target) in doc.stdout, "ansible-doc must read the installed copy, not the checkout"
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert section in doc.stdout, f"{module}: no {section} in ansible-doc output"


@pytest.mark.parametrize("plugin", FILTERS)
def test_ansible_doc_renders_every_filter(installed, plugin):
    target = installed[1]
    doc = run([BIN / "ansible-doc", "-t", "filter", f"llmops.serving.{plugin}"],
              env={"ANSIBLE_COLLECTIONS_PATH": str(target)}, cwd=target)
    assert doc.returncode == 0, doc.stderr
    assert "EXAMPLES" in doc.stdout


def test_deploy_playbook_parses_from_the_repository_root():
    check = run([BIN / "ansible-playbook", "deploy.yml", "--syntax-check"])
    assert check.returncode == 0, check.stdout + check.stderr
    assert "playbook: deploy.yml" in check.stdout
