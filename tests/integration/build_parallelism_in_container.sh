#!/usr/bin/env bash
# Real-mechanism check of llmops.serving.build_parallelism and of the OOM side of flash_attn_build_diagnosis.
#
# A Docker container limited to 4 GiB (--memory 4g --memory-swap 4g) sees the HOST's /proc/meminfo (no lxcfs), exactly
# like an LXC container without lxcfs. Inside it:
#   1. build_parallelism runs over the community.docker.docker connection (AnsiballZ, as a play would run it) and must
#      report a memory limit of about 4 GiB, not the host's, with max_jobs * nvcc_threads * per_thread within the memory
#      it found usable; with the default 5 GiB per nvcc thread it must say that nothing fits (fits=false, a warning).
#   2. A memory hog is run the way a build step runs (a bash script), the cgroup's OOM killer kills it, and
#      flash_attn_build_diagnosis must call that "oom" from the step's output and the cgroup's OOM counter
#      (memory.oom_control on cgroup v1, memory.events on v2, copied before and read after).
#
# Needs root, a running Docker engine and the base image (scripts/base-image.sh builds it). Creates ONE container with
# a unique name and removes it on exit, whatever happens. Prints what it measured.
#   usage: tests/integration/build_parallelism_in_container.sh
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"

LIMIT_BYTES=$((4 * 1024 * 1024 * 1024))
IMAGE=${MOLECULE_IMAGE:-$("$REPO_ROOT/scripts/base-image.sh" --name)}
NAME="llmops-build-parallelism-$$-$(date +%s)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/build-parallelism.XXXXXX")

cleanup() {
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

docker info >/dev/null 2>&1 || die "the Docker engine is not running (docker info failed)"
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is missing: run scripts/base-image.sh first"

log "container $NAME from $IMAGE with --memory 4g --memory-swap 4g"
docker run -d --name "$NAME" --memory 4g --memory-swap 4g "$IMAGE" sleep 900 >/dev/null

# Run one module in the container the way a play does (the tests' shared ansible runner); print its result as JSON.
run_module() {
  (cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT/collections" "$VENV/bin/python" -m ansible_collections.llmops.serving.tests.support.ansible_run \
    -i "$NAME," -c community.docker.docker "$NAME" "llmops.serving.$1" ${2:+"$2"})
}

# ----------------------------------------------------------------------------------------------- 1. build_parallelism
log "build_parallelism with per_thread_gib=1 reserve_gib=0.5"
run_module build_parallelism '{"per_thread_gib": 1, "reserve_gib": 0.5}' >"$WORK/small.json"
log "build_parallelism with the defaults (5 GiB per nvcc thread, 2 GiB reserve)"
run_module build_parallelism >"$WORK/default.json"

"$VENV/bin/python" - "$WORK/small.json" "$WORK/default.json" "$LIMIT_BYTES" <<'EOF'
import json, sys
small, default = (json.load(open(path)) for path in sys.argv[1:3])
limit = int(sys.argv[3])
gib = 1024 ** 3
problems = []
for label, result in (("small", small), ("default", default)):
    if result.get("failed"):
        sys.exit("build_parallelism failed (%s): %s" % (label, result.get("msg")))
memory = small["memory"]
print("measured inside the 4 GiB container:")
print("  /proc/meminfo MemAvailable : %.2f GiB (the host's)" % (memory["meminfo_available_bytes"] / gib))
print("  cgroup v%s limit           : %.2f GiB" % (memory["cgroup_version"], memory["cgroup_limit_bytes"] / gib))
print("  memory.limit_bytes         : %.2f GiB" % (memory["limit_bytes"] / gib))
print("  memory.usable_bytes        : %.2f GiB" % (memory["usable_bytes"] / gib))
print("  cpus                       : %s (%s)" % (small["cpus"]["count"], small["cpus"]["source"]))
print("  per_thread_gib=1 reserve=0.5: max_jobs=%d nvcc_threads=%d env=%s" % (
    small["max_jobs"], small["nvcc_threads"], small["env"]))
print("    reason: %s" % small["reason"])
print("  defaults (5 GiB, 2 GiB)    : max_jobs=%d nvcc_threads=%d fits=%s" % (
    default["max_jobs"], default["nvcc_threads"], default["fits"]))
print("    reason: %s" % default["reason"])
print("    warnings: %s" % default.get("warnings"))

if memory["cgroup_limit_bytes"] != limit:
    problems.append("cgroup limit %r is not the container's %d" % (memory["cgroup_limit_bytes"], limit))
if abs(memory["limit_bytes"] - limit) > 0.05 * gib:
    problems.append("memory.limit_bytes %.2f GiB is not about 4 GiB" % (memory["limit_bytes"] / gib))
if memory["meminfo_available_bytes"] <= limit:
    problems.append("/proc/meminfo shows no more than the limit: this host cannot show that the cgroup wins")
if not memory["usable_bytes"] <= memory["limit_bytes"]:
    problems.append("usable memory exceeds the limit")
if "cgroup v" not in memory["source"]:
    problems.append("the binding memory source is not the cgroup: %s" % memory["source"])
used = small["max_jobs"] * small["nvcc_threads"] * small["per_thread_bytes"]
if not (small["fits"] and used <= memory["usable_bytes"] - small["reserve_bytes"] <= limit):
    problems.append("max_jobs*nvcc_threads*per_thread = %.2f GiB is not within %.2f GiB usable after the reserve" % (
        used / gib, (memory["usable_bytes"] - small["reserve_bytes"]) / gib))
if default["fits"] or (default["max_jobs"], default["nvcc_threads"]) != (1, 1) or not default.get("warnings"):
    problems.append("with 5 GiB per nvcc thread a 4 GiB container must give 1 x 1, fits=false and a warning")
if problems:
    sys.exit("FAILED:\n  " + "\n  ".join(problems))
print("build_parallelism: OK (the cgroup won over /proc/meminfo)")
EOF

# ------------------------------------------------------------------------------- 2. a real OOM kill, then the diagnosis
events=$(docker exec "$NAME" sh -c \
  'if [ -f /sys/fs/cgroup/memory.events ]; then echo /sys/fs/cgroup/memory.events; else echo /sys/fs/cgroup/memory/memory.oom_control; fi')
docker exec "$NAME" cp "$events" /tmp/memory-events.before
kernel_lines_before=$( (dmesg 2>/dev/null || true) | wc -l)
log "memory hog in the container (6 GiB against the 4 GiB limit); its output is the 'build log'"
# A build step's shell script: bash reports a child killed by SIGKILL on its stderr, as it does under ninja or make.
# bytes(1) * n fills every page (memset), so the cgroup limit is really reached.
printf '%s\n' 'python3 -c "x = bytes(1) * (6 << 30)"' 'echo "step exit status $?"' \
  | docker exec -i "$NAME" sh -c 'cat >/tmp/step.sh'
docker exec "$NAME" sh -c 'bash /tmp/step.sh >/tmp/build.log 2>&1' || true
echo "--- build log (the hog's step) ---"
docker exec "$NAME" cat /tmp/build.log
echo "--- $events before / after ---"
docker exec "$NAME" cat /tmp/memory-events.before
docker exec "$NAME" cat "$events"
# The host's kernel log, when this user may read it: the new lines only, handed to the module as a file.
( (dmesg 2>/dev/null || true) | tail -n +"$((kernel_lines_before + 1))" | grep -Ei 'oom|killed process' || true) >"$WORK/kernel.log"
echo "--- new kernel OOM lines on the host ---"
cat "$WORK/kernel.log"
docker cp "$WORK/kernel.log" "$NAME:/tmp/kernel.log" >/dev/null

log "flash_attn_build_diagnosis on the hog's output and the cgroup counters"
run_module flash_attn_build_diagnosis \
  "{\"build_log\": \"/tmp/build.log\", \"cgroup_events\": \"$events\", \"cgroup_events_before\": \"/tmp/memory-events.before\", \"kernel_log\": \"/tmp/kernel.log\"}" \
  >"$WORK/diagnosis.json"
log "flash_attn_build_diagnosis with read_dmesg inside the container (best effort)"
run_module flash_attn_build_diagnosis \
  "{\"build_log\": \"/tmp/build.log\", \"cgroup_events\": \"$events\", \"cgroup_events_before\": \"/tmp/memory-events.before\", \"read_dmesg\": true}" \
  >"$WORK/diagnosis-dmesg.json"

"$VENV/bin/python" - "$WORK/diagnosis.json" "$WORK/diagnosis-dmesg.json" <<'EOF'
import json, sys
results = [json.load(open(path)) for path in sys.argv[1:3]]
problems = []
for result in results:
    if result.get("failed"):
        sys.exit("flash_attn_build_diagnosis failed: %s" % result.get("msg"))
    print("cause=%s cgroup_oom_kills=%s kernel_log_source=%s" % (
        result["cause"], result["cgroup_oom_kills"], result["kernel_log_source"]))
    print("  decisive_line: %s" % result["decisive_line"])
    print("  message: %s" % result["message"])
    if result["cause"] != "oom":
        problems.append("the real OOM kill was classified %r" % result["cause"])
    if result["cgroup_oom_kills"] < 1:
        problems.append("the cgroup counter did not record the kill")
if problems:
    sys.exit("FAILED:\n  " + "\n  ".join(problems))
print("flash_attn_build_diagnosis: OK (a real cgroup OOM kill is called oom)")
EOF
log "done; container $NAME is removed on exit"
