#!/usr/bin/env bash
# The slow tier: installs the real pinned SGLang (sglang==0.5.23 and its dependencies, torch 2.14.1 included, about
# 11 GB in .build/slow-sglang-venv; several minutes) and checks the sglang role's flag validator against SGLang's own
# parser. Not part of `make test`. Rerunning reuses the venv (pip then installs nothing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PATH="$VENV/bin:$PATH"
exec pytest -q -p no:cacheprovider --rootdir "$REPO_ROOT" -c /dev/null --import-mode=importlib --durations=5 tests/slow "$@"
