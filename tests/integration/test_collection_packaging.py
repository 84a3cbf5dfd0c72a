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


# What the tarball may hold: the collection and nothing of the workshop around it (simulators, inventories, test
# support, build outputs, the checkout's own ansible.cfg and root playbook).
ALLOWED_TOP_LEVEL = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "meta", "plugins", "roles", "playbooks", "docs",
                     "changelogs"}
# What git tracks of the collection: every such file ships (galaxy.yml's allow-list must not drop one).
SHIPPED_PATHS = ("plugins/", "roles/", "playbooks/", "docs/", "changelogs/fragments/", "meta/")
FORBIDDEN_PARTS = {"__pycache__", ".pytest_cache", "build", "dist"}


def test_tarball_members_are_the_collection_only(installed):
    tarball = installed[0]
    with tarfile.open(tarball) as tar:
        names = [name.rstrip("/") for name in tar.getnames()]
    assert "MANIFEST.json" in names and "galaxy.yml" not in names
    outside = sorted(name for name in names if name.split("/")[0] not in ALLOWED_TOP_LEVEL)
    assert not outside, f"not part of the collection: {outside}"
    built = sorted(name for name in names
                   if FORBIDDEN_PARTS & set(name.split("/")) or name.endswith((".pyc", ".egg-info", ".tar.gz", ".retry")))
    assert not built, f"build outputs in the tarball: {built}"
    changelog = sorted(name for name in names if name.startswith("changelogs/") and not name.startswith("changelogs/fragments"))
    assert changelog == ["changelogs/changelog.yaml", "changelogs/config.yaml"], changelog
    # Everything the collection is made of is there.
    assert all(f"plugins/modules/{m}.py" in names for m in MODULES)
    assert all(f"plugins/filter/{f}.py" in names for f in FILTERS)
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert all(f"roles/{r}/meta/argument_specs.yml" in names for r in roles)
    assert {"playbooks/deploy.yml", "playbooks/verify.yml", "meta/runtime.yml", "LICENSE"} <= set(names)
    # The license the collection declares (galaxy.yml: GPL-3.0-or-later), in full.
    with tarfile.open(tarball) as tar:
        license_text = tar.extractfile("LICENSE").read().decode()
    assert "GNU GENERAL PUBLIC LICENSE" in license_text and "Version 3, 29 June 2007" in license_text
    # Files deleted in the working tree are not part of it (make release consumes the changelog fragments before the
    # release is committed).
    tracked = set(run(["git", "ls-files"]).stdout.split()) - set(run(["git", "ls-files", "--deleted"]).stdout.split())
    if tracked:  # a checkout (not an unpacked release)
        missing = sorted(path for path in tracked if path.startswith(SHIPPED_PATHS) and path not in names
                         and not path.startswith("docs/docsite/rst"))
        assert not missing, f"tracked files of the collection that do not ship: {missing}"


def test_a_stray_directory_in_the_checkout_does_not_ship(tmp_path):
    """The tarball comes from an allow-list: a checkout with a stray virtualenv and build output ships what a clean one
    ships."""
    tracked = run(["git", "ls-files"]).stdout.split()
    members = {}
    for variant in ("clean", "stray"):
        checkout = tmp_path / variant
        for path in tracked:
            source = REPO / path
            if source.is_file() and not source.is_symlink():
                (checkout / path).parent.mkdir(parents=True, exist_ok=True)
                (checkout / path).write_bytes(source.read_bytes())
        if variant == "stray":
            for stray in ("venv/lib/python3.11/site-packages/stray.py", "build/lib/plugins/modules/old.py", "notes/todo.md",
                          "plugins/modules/__pycache__/pve_lxc.cpython-311.pyc", "roles/sglang/.pytest_cache/v/x"):
                (checkout / stray).parent.mkdir(parents=True, exist_ok=True)
                (checkout / stray).write_text("not the collection\n")
        out = tmp_path / ("dist-" + variant)
        built = run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", str(out), str(checkout)], cwd=checkout)
        assert built.returncode == 0, built.stderr
        with tarfile.open(out / f"llmops-serving-{GALAXY['version']}.tar.gz") as tar:
            members[variant] = sorted(name for name in tar.getnames() if name not in ("MANIFEST.json", "FILES.json"))
    assert members["stray"] == members["clean"]
    assert "LICENSE" in members["clean"]


def core_pin(path):
    """The major.minor of the ansible-core a requirements file pins."""
    pinned = [line.split("==", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("ansible-core==")]
    assert len(pinned) == 1, "one ansible-core==X.Y.Z in %s" % path
    return tuple(int(part) for part in pinned[0].split(".")[:2])


def test_requires_ansible_is_the_tested_range():
    """meta/runtime.yml promises exactly the ansible-core releases make test runs: from .venv's (requirements/runtime.txt)
    to the newest of requirements/ansible-core/ (the ansible-core tier), each release file pinning its own."""
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    oldest = core_pin(REPO / "requirements" / "runtime.txt")
    others = dict((path.stem, core_pin(path)) for path in (REPO / "requirements" / "ansible-core").glob("[0-9]*.txt"))
    assert others and all(release == "%d.%d" % pinned for release, pinned in others.items()), others
    newest = max(others.values())
    assert runtime["requires_ansible"] == ">=%d.%d.0,<%d.%d.0" % (oldest + (newest[0], newest[1] + 1)), runtime["requires_ansible"]
    # No gap: every release between the oldest and the newest is tested.
    assert sorted(others.values()) == [(oldest[0], minor) for minor in range(oldest[1] + 1, newest[1] + 1)], others


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
