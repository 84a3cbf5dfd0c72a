# Shared helpers for the project's scripts (sourced, not run).
# shellcheck shell=bash

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The repository root, whatever the caller's working directory.
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export REPO_ROOT
VENV="${VENV:-$REPO_ROOT/.venv}"
export VENV

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (apt packages, the Docker engine, LXC)"
}
