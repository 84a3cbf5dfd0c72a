#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection laid out as ansible_collections/llmops/serving
# (ansible-test only works from such a path). No Docker image: each sanity test gets a virtualenv
# managed by ansible-test (--venv) for the Python that runs it. Extra arguments go to ansible-test,
# for example `scripts/sanity.sh --test validate-modules`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

py_version=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# A tree per run, so that runs started side by side do not trample each other.
mkdir -p "$REPO_ROOT/.build"
work=$(mktemp -d "$REPO_ROOT/.build/sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree="$work/ansible_collections/llmops/serving"
mkdir -p "$tree"
# What git tracks plus new files it does not ignore: the tree a commit would hold.
(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard) \
  | grep -zv '^collections/' \
  | (cd "$REPO_ROOT" && xargs -0 cp --parents -d -t "$tree" 2>/dev/null || true)
# ansible-test decides what is "in the collection" from git when it finds a repository.
git -C "$tree" init -q && git -C "$tree" add -A >/dev/null
# ansible-test bootstraps pip into its virtualenvs with get-pip.py from ci-files.testing.ansible.com, which
# only PyPI-connected machines cannot reach; an equivalent built on ensurepip + the package index stands in,
# unless a real one is already cached.
pip_version=$("$VENV/bin/python" -c 'from ansible_test._internal.python_requirements import get_venv_packages as g
from ansible_test._internal.host_configs import NativePythonConfig as c
print(g(c(version="3", path=""))["pip"])')
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -f "$cache" ]; then
  mkdir -p "$(dirname "$cache")"
  cp "$REPO_ROOT/scripts/get_pip_offline.py" "$cache"
fi
cd "$tree"
PATH="$VENV/bin:$PATH" ansible-test sanity --venv --python "$py_version" --color no "$@"
