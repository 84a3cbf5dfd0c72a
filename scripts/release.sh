#!/usr/bin/env bash
# Release the version in galaxy.yml (make release):
#   1. the changelog: antsibull-changelog turns changelogs/fragments/*.yml into a release in changelogs/changelog.yaml
#      and CHANGELOG.rst (the fragments are consumed: keep_fragments is false in changelogs/config.yaml);
#   2. the tarball: ansible-galaxy collection build into .build/dist;
#   3. its contents: the allow-list of tests/integration/test_collection_packaging.py, applied to that tarball.
# It refuses a version that changelogs/changelog.yaml already has, and a release without fragments.
# Run it in a copy to try it: the tests do (tests/package/test_release.py).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PATH="$VENV/bin:$PATH"
export ANSIBLE_CONFIG="$REPO_ROOT/ansible.cfg"

version=$(python3 -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
released=$(python3 -c 'import sys, yaml; print("yes" if sys.argv[1] in (yaml.safe_load(open("changelogs/changelog.yaml")).get("releases") or {}) else "no")' "$version")
[ "$released" = no ] || die "version $version is already released in changelogs/changelog.yaml: raise the version in galaxy.yml first"
compgen -G "changelogs/fragments/*.yml" >/dev/null || die "no changelog fragments in changelogs/fragments: nothing to release"

antsibull-changelog lint
antsibull-changelog release --version "$version"
log "release $version: CHANGELOG.rst and changelogs/changelog.yaml written"

mkdir -p .build/dist
ansible-galaxy collection build --force --output-path .build/dist . >/dev/null
tarball=".build/dist/llmops-serving-$version.tar.gz"
[ -f "$tarball" ] || die "ansible-galaxy built no $tarball"

# The packaging test's own check, on this tarball (its fixture builds one; here the second argument is not used).
PYTHONPATH="$REPO_ROOT/collections" python3 - "$tarball" <<'PY'
import sys
from ansible_collections.llmops.serving.tests.integration.test_collection_packaging import (
    test_tarball_members_are_the_collection_only,
)
test_tarball_members_are_the_collection_only((sys.argv[1], None))
PY
log "release $version: $tarball checked (members are the collection only)"
