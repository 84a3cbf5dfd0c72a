#!/usr/bin/env bash
# Create the project-local virtualenv (.venv) and install the pinned toolchain into it.
# A second run with unchanged requirement files does nothing.
#
# scripts/venv.sh --ansible-core RELEASE: the virtualenv .venv-ansible-core-RELEASE for the sanity and unit tiers on
# another ansible-core release (requirements/ansible-core/RELEASE.txt, whose `# controller-python: X.Y` line names the
# Python it runs on: python X.Y from PATH, else pyenv's newest X.Y). Prints the virtualenv's path on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# The interpreter for Python X.Y: pythonX.Y on PATH, else pyenv's newest X.Y.Z build (sort -V: 3.12.10 after 3.12.9).
python_for() {
  local want=$1 found
  # A pyenv shim is on PATH whether or not that version is selected: only an interpreter that runs counts.
  if "python$want" -c 'import venv' >/dev/null 2>&1; then
    command -v "python$want"
    return 0
  fi
  found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$found" ] || die "no Python $want for this ansible-core release: install python$want (Debian 13's python3 is \
3.13; or pyenv install $want) and rerun"
  printf '%s\n' "$found"
}

if [ "${1:-}" = --ansible-core ]; then
  release=${2:?usage: scripts/venv.sh --ansible-core RELEASE}
  requirements="$REPO_ROOT/requirements/ansible-core/$release.txt"
  [ -f "$requirements" ] || die "no requirements/ansible-core/$release.txt (releases: $(cd "$REPO_ROOT/requirements/ansible-core" \
&& ls [0-9]*.txt | sed 's/\.txt$//' | tr '\n' ' '))"
  want=$(sed -n 's/^# controller-python: *\([0-9.]*\)$/\1/p' "$requirements")
  [ -n "$want" ] || die "$requirements names no '# controller-python: X.Y'"
  VENV="$REPO_ROOT/.venv-ansible-core-$release"
  stamp="$VENV/.requirements-$(cat "$requirements" "$REPO_ROOT/requirements/ansible-core/tests.txt" | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ -x "$VENV/bin/ansible-test" ]; then
    printf '%s\n' "$VENV"
    exit 0
  fi
  python=$(python_for "$want")
  if [ ! -x "$VENV/bin/python" ]; then
    log "virtualenv: creating $VENV with $("$python" --version)"
    "$python" -m venv "$VENV"
  fi
  log "virtualenv: installing requirements/ansible-core/$release.txt"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  (cd "$REPO_ROOT/requirements/ansible-core" && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$release.txt" >&2)
  rm -f "$VENV"/.requirements-*
  touch "$stamp"
  printf '%s\n' "$VENV"
  exit 0
fi

PYTHON=${PYTHON:-python3}
stamp_of_requirements() {
  cat "$REPO_ROOT"/requirements/*.txt | sha256sum | cut -c1-16
}
stamp="$VENV/.requirements-$(stamp_of_requirements)"
if [ -f "$stamp" ] && [ -x "$VENV/bin/ansible-playbook" ]; then
  log "virtualenv: up to date ($VENV)"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "virtualenv: creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
log "virtualenv: installing requirements/dev.txt (pinned by requirements/constraints.txt)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r "$REPO_ROOT/requirements/dev.txt" -c "$REPO_ROOT/requirements/constraints.txt"
rm -f "$VENV"/.requirements-*
touch "$stamp"
log "virtualenv: ready"
