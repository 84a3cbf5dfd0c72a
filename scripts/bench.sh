#!/usr/bin/env bash
# Benchmarks that print figures (not timed tests: these machines are shared, so each compares ratios measured in one run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
rc=0
for bench in tests/bench/bench_*.py; do
  log "benchmark: $bench"
  "$VENV/bin/python" "$bench" || rc=1
done
exit $rc
