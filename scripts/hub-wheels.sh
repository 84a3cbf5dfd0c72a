#!/usr/bin/env bash
# The real huggingface_hub (its `hf` CLI; the version requirements/constraints.txt pins, which SGLang 0.5.23 accepts
# through transformers: huggingface-hub>=1.31.0,<3.0) and its dependencies as wheels for the containers, in
# .cache/huggingface-hub-wheels/<version>/ (pypi_wheels in lib.sh). The stand-in sglang depends on it as the real one
# does, so the sglang role's `hf download` runs the real client in the sandbox. Prints the directory on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^huggingface_hub==\([^[:space:]]*\).*$/\1/p' "$REPO_ROOT/requirements/constraints.txt")
[ -n "$version" ] || die "hub-wheels: no huggingface_hub==VERSION in requirements/constraints.txt"
pypi_wheels "huggingface-hub-wheels/$version" "huggingface_hub==$version"
