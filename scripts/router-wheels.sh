#!/usr/bin/env bash
# The real router (the package and version roles/sglang_router pins: smg, or sglang-router) and its dependencies as
# wheels for the containers, in .cache/router-wheels/<package>-<version>/ (pypi_wheels in lib.sh). Prints the
# directory on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

defaults="$REPO_ROOT/roles/sglang_router/defaults/main.yml"
package=$(sed -n 's/^sglang_router_package: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$defaults")
version=$(sed -n 's/^sglang_router_version: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$defaults")
[ -n "$package" ] && [ -n "$version" ] || die "router-wheels: no sglang_router_package or sglang_router_version in $defaults"
pypi_wheels "router-wheels/$package-$version" "$package==$version"
