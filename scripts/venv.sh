#!/usr/bin/env bash
# Create the project-local virtualenv (.venv) and install the pinned toolchain into it.
# A second run with unchanged requirement files does nothing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

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
