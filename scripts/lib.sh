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

# The containers' Pythons: Debian 12's 3.11 and Debian 13's 3.13 (the role metadata's platforms).
CONTAINER_PYTHONS=(3.11 3.13)

# Wheels of REQUIREMENT and its dependencies for the containers' Pythons (CONTAINER_PYTHONS on x86_64: a package with
# compiled parts has one wheel per Python, and pip in a container takes only its own), downloaded once from PyPI into
# .cache/CACHE_NAME; the molecule scenarios and the sandbox mirror install from there with --no-index (their containers
# stay offline). Prints the directory on stdout.
pypi_wheels() {
  local cache_name=$1 requirement=$2
  local dir="$REPO_ROOT/.cache/$cache_name" tmp python
  if [ ! -e "$dir/.complete" ] || [ "$(cat "$dir/.complete")" != "${CONTAINER_PYTHONS[*]}" ]; then
    mkdir -p "$(dirname "$dir")"
    exec 9>"$(dirname "$dir")/.lock"
    flock 9
    if [ ! -e "$dir/.complete" ] || [ "$(cat "$dir/.complete")" != "${CONTAINER_PYTHONS[*]}" ]; then
      tmp=$(mktemp -d "$(dirname "$dir")/.download.XXXXXX")
      for python in "${CONTAINER_PYTHONS[@]}"; do
        log "wheels: downloading $requirement and its dependencies for Python $python from PyPI"
        "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --only-binary :all: \
          --python-version "$python" --implementation cp --abi "cp${python/./}" \
          --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
          --dest "$tmp" "$requirement" 2> >(grep -v 'is ignored: it is neither' >&2)
      done
      printf '%s\n' "${CONTAINER_PYTHONS[*]}" >"$tmp/.complete"
      rm -rf "$dir"
      mv "$tmp" "$dir"
    fi
    exec 9>&-
  fi
  printf '%s\n' "$dir"
}
