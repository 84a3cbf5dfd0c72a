#!/usr/bin/env bash
# The real sglang-router (the version roles/sglang_router pins) and its dependencies as wheels for Debian 12's
# Python 3.11 on x86_64, downloaded once from PyPI into .cache/sglang-router-wheels/<version>/. The molecule scenario
# and the sandbox mirror install the router from there with --no-index: their containers stay offline.
# Prints the directory on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^sglang_router_version: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO_ROOT/roles/sglang_router/defaults/main.yml")
[ -n "$version" ] || die "router-wheels: no sglang_router_version in roles/sglang_router/defaults/main.yml"
dir="$REPO_ROOT/.cache/sglang-router-wheels/$version"
if [ ! -e "$dir/.complete" ]; then
  mkdir -p "$(dirname "$dir")"
  exec 9>"$(dirname "$dir")/.lock"
  flock 9
  if [ ! -e "$dir/.complete" ]; then
    log "router wheels: downloading sglang-router==$version and its dependencies from PyPI"
    tmp=$(mktemp -d "$(dirname "$dir")/.download.XXXXXX")
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --only-binary :all: \
      --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      --dest "$tmp" "sglang-router==$version" 2> >(grep -v 'is ignored: it is neither' >&2)
    touch "$tmp/.complete"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
fi
printf '%s\n' "$dir"
