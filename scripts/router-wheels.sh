#!/usr/bin/env bash
# The real sglang-router (the version roles/sglang_router pins) and its dependencies as wheels for the containers,
# in .cache/sglang-router-wheels/<version>/ (pypi_wheels in lib.sh). Prints the directory on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^sglang_router_version: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO_ROOT/roles/sglang_router/defaults/main.yml")
[ -n "$version" ] || die "router-wheels: no sglang_router_version in roles/sglang_router/defaults/main.yml"
pypi_wheels "sglang-router-wheels/$version" "sglang-router==$version"
