#!/usr/bin/env bash
# The test tiers behind `make test`: lint, sanity, unit, package, molecule, ansible-core, integration, in that order
# (integration beside molecule and ansible-core, see below).
# `scripts/test.sh` runs them all; `scripts/test.sh unit molecule` runs the named ones.
# Each tier prints one summary line with its time; the run fails when any tier fails, and
# a tier that finds nothing to run fails too (a green run must have tested something).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PATH="$VENV/bin:$PATH"
export ANSIBLE_CONFIG="$REPO_ROOT/ansible.cfg"
export PY_COLORS=0 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

ALL_TIERS=(lint sanity unit package molecule ansible-core integration)
summary=()
failed=0

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
run_pytest() {
  "$VENV/bin/pytest" "$@"
  local rc=$?
  [ $rc -eq 5 ] && echo "pytest collected no tests in: $*" >&2
  return $rc
}

tier_lint() {
  yamllint --strict . && ansible-lint --profile production --offline && python3 scripts/check-argument-specs.py
}

tier_sanity() {
  scripts/sanity.sh
}

# The unit tier runs on both cores (pytest-xdist): its tests wait on ansible-playbook and module processes, each its
# own temporary directory and loopback port (UNIT_JOBS=1: one process). The ansible-core tier's unit runs use one
# (ANSIBLE_CORE_UNIT_JOBS): they run beside the integration tier, which needs the other core.
UNIT_JOBS=${UNIT_JOBS:-2}
ANSIBLE_CORE_UNIT_JOBS=${ANSIBLE_CORE_UNIT_JOBS:-1}

tier_unit() {
  run_pytest -q --durations=5 -n "$UNIT_JOBS" tests/unit
}

# The sanity and unit tiers again on each newer ansible-core release the collection supports (requirements/ansible-core/:
# one file per release, with its controller Python; .venv holds the oldest, 2.19). The unit tests of the simulators, the
# stand-ins and the scripts (tests/unit/simulators, standins, scripts) use no ansible-core of their own (the scripts'
# tests call .venv's) and run once, in the unit tier.
ansible_core_releases() {
  local file
  for file in "$REPO_ROOT"/requirements/ansible-core/[0-9]*.txt; do
    [ -e "$file" ] && basename "$file" .txt
  done | sort -V
}

# On the newest release, also the collection as users get it: built, installed and documented by that ansible-galaxy
# and ansible-doc, deploy.yml parsed (a minute). The sandbox and the Proxmox roles' playbooks run on the oldest, in the
# integration tier (test_pve_roles.py also passes on the newest, run by hand: 4 more minutes the budget does not have).
NEWEST_RELEASE_INTEGRATION=(tests/integration/test_collection_packaging.py)

# Their virtualenvs are made in the background from the start of a run that has tiers before this one (downloads and
# installs, a minute or more each on a fresh machine, mostly waiting on the network), so the tier starts with them.
ansible_core_venvs_pid=""
ansible_core_venvs_log=""
make_ansible_core_venvs_in_background() {
  ansible_core_venvs_log=$(mktemp)
  (
    for release in $(ansible_core_releases); do
      scripts/venv.sh --ansible-core "$release" >/dev/null || exit 1
    done
  ) >"$ansible_core_venvs_log" 2>&1 &
  ansible_core_venvs_pid=$!
}

tier_ansible-core() {
  local release venv start rc=0 found=0 newest
  newest=$(ansible_core_releases | tail -n 1)
  if [ -n "$ansible_core_venvs_pid" ]; then
    # What failed there is made again below, where its failure counts.
    wait "$ansible_core_venvs_pid" || log "ansible-core: the virtualenvs made in the background failed; making them again"
    cat "$ansible_core_venvs_log"
    rm -f "$ansible_core_venvs_log"
    ansible_core_venvs_pid=""
  fi
  for release in $(ansible_core_releases); do
    found=1
    start=$SECONDS
    if ! venv=$(scripts/venv.sh --ansible-core "$release"); then
      summary+=("    ansible-core $release: FAILED: no virtualenv")
      rc=1
      continue
    fi
    log "ansible-core $release ($("$venv/bin/python" --version)): sanity"
    if ! VENV=$venv PATH="$venv/bin:$PATH" scripts/sanity.sh; then
      summary+=("    ansible-core $release: sanity FAILED after $((SECONDS - start)) s")
      rc=1
      continue
    fi
    log "ansible-core $release: unit"
    if ! VENV=$venv PATH="$venv/bin:$PATH" run_pytest -q --durations=5 -n "$ANSIBLE_CORE_UNIT_JOBS" tests/unit --ignore=tests/unit/simulators \
        --ignore=tests/unit/standins --ignore=tests/unit/scripts; then
      summary+=("    ansible-core $release: unit FAILED after $((SECONDS - start)) s")
      rc=1
      continue
    fi
    if [ "$release" = "$newest" ]; then
      log "ansible-core $release: the collection as users get it (tests/integration/test_collection_packaging.py)"
      if ! VENV=$venv PATH="$venv/bin:$PATH" run_pytest -q --durations=5 "${NEWEST_RELEASE_INTEGRATION[@]}"; then
        summary+=("    ansible-core $release: packaging FAILED after $((SECONDS - start)) s")
        rc=1
        continue
      fi
      summary+=("    ansible-core $release ($("$venv/bin/python" --version)): sanity, unit and packaging passed in $((SECONDS - start)) s")
      continue
    fi
    summary+=("    ansible-core $release ($("$venv/bin/python" --version)): sanity and unit passed in $((SECONDS - start)) s")
  done
  if [ $found -eq 0 ]; then
    echo "no ansible-core releases under requirements/ansible-core/" >&2
    return 1
  fi
  return $rc
}

# What users get besides the code: the docs site (antsibull-docs, Sphinx), the execution environment's build context
# (ansible-builder create) and a release (changelog, tarball, its contents) made in a copy of the checkout.
tier_package() {
  scripts/docs.sh && run_pytest -q --durations=5 tests/package
}

# Scenarios run MOLECULE_JOBS at a time (default 2): most of a scenario's time is spent waiting on the container, systemd
# and the simulator, not on a core. The longest ones (measured) start first so the lanes end together; each scenario's
# output is printed whole when it ends, so the log reads one scenario at a time.
MOLECULE_JOBS=${MOLECULE_JOBS:-2}
MOLECULE_LONGEST_FIRST=(sglang_verify sglang_service flash_attn sglang_router sglang flash_attn@debian-13 cuda_toolkit)

# The molecule platforms' GPUs (.config/molecule/config.yml): a GPU kit whose nodes docker passes into every container,
# all but the seventh GPU's (a GPU of the node that a container does not get).
molecule_gpu_kit() {
  PYTHONPATH="$REPO_ROOT/simulators/pve_sim" "$VENV/bin/python" -m pve_sim gpu-kit --root "$REPO_ROOT/.build/molecule-gpu-kit" \
    --uvm-major 508 --gpus 7 --dev-dir /dev/llmops-molecule --real-dev >/dev/null
}

# The scenarios of the roles the sandbox does not run in its Debian 13 containers run a second time on the Debian 13
# image (BASE_IMAGE_SUITE=trixie scripts/base-image.sh, or MOLECULE_IMAGE_DEBIAN_13), as "<scenario>@debian-13"; the
# sandbox covers the other roles on Debian 13. A scenario never runs twice at once (its container and state are named
# after it).
MOLECULE_ON_DEBIAN_13=(flash_attn default)

tier_molecule() {
  scripts/docker-engine.sh && scripts/base-image.sh && molecule_gpu_kit || return 1
  MOLECULE_IMAGE=${MOLECULE_IMAGE:-$(scripts/base-image.sh --name)}
  export MOLECULE_IMAGE
  local debian_13_image=${MOLECULE_IMAGE_DEBIAN_13:-}
  if [ -z "$debian_13_image" ]; then
    BASE_IMAGE_SUITE=trixie scripts/base-image.sh || return 1
    debian_13_image=$(BASE_IMAGE_SUITE=trixie scripts/base-image.sh --name)
  fi
  local jobs=() rc=0 s job logs
  for job in "${MOLECULE_LONGEST_FIRST[@]}"; do
    s=${job%@*}
    [ -e "molecule/$s/molecule.yml" ] || continue
    [ "$job" = "$s" ] || [[ " ${MOLECULE_ON_DEBIAN_13[*]} " == *" $s "* ]] && jobs+=("$job")
  done
  for s in molecule/*/molecule.yml; do
    [ -e "$s" ] || continue
    s=$(basename "$(dirname "$s")")
    [[ " ${jobs[*]} " == *" $s "* ]] || jobs+=("$s")
  done
  if [ ${#jobs[@]} -eq 0 ]; then
    echo "no molecule scenarios under molecule/" >&2
    return 1
  fi
  for s in "${MOLECULE_ON_DEBIAN_13[@]}"; do
    [ -e "molecule/$s/molecule.yml" ] && [[ " ${jobs[*]} " != *" $s@debian-13 "* ]] && jobs+=("$s@debian-13")
  done
  logs=$(mktemp -d)
  local -A job_of=() started_at=()
  local index started finished
  while [ ${#jobs[@]} -gt 0 ] || [ ${#job_of[@]} -gt 0 ]; do
    started=false
    if [ ${#job_of[@]} -lt "$MOLECULE_JOBS" ]; then
      for index in "${!jobs[@]}"; do
        job=${jobs[$index]}
        s=${job%@*}
        # Not while the same scenario runs (on the other image).
        [[ " ${job_of[*]} " == *" $s "* || " ${job_of[*]} " == *" $s@"* ]] && continue
        unset "jobs[$index]"
        jobs=("${jobs[@]}")
        log "molecule/$job: started"
        if [ "$job" = "$s" ]; then
          molecule test -s "$s" >"$logs/$job.log" 2>&1 &
        else
          MOLECULE_IMAGE=$debian_13_image molecule test -s "$s" >"$logs/$job.log" 2>&1 &
        fi
        job_of[$!]=$job
        started_at[$!]=$SECONDS
        started=true
        break
      done
    fi
    $started && continue
    wait -n -p finished "${!job_of[@]}"
    local status=$?
    job=${job_of[$finished]}
    echo "===== molecule/$job ====="
    cat "$logs/$job.log"
    if [ $status -eq 0 ]; then
      summary+=("    molecule/$job: passed in $((SECONDS - started_at[$finished])) s")
    else
      summary+=("    molecule/$job: FAILED after $((SECONDS - started_at[$finished])) s")
      rc=1
    fi
    unset "job_of[$finished]" "started_at[$finished]"
  done
  rm -rf "$logs"
  return $rc
}

# The sandbox's tests (test_sandbox.py: one sandbox after another, most of the tier's time, mostly waiting on its
# containers) run beside the other integration modules (the Proxmox roles and pve-sim on LXC, the build cap in a
# container, the mirror, the packaging: about 7 minutes). They share nothing: pve-sim names each state directory's
# containers apart, test_pve_sim_lxc.py makes its own bridge on another network, test_pve_roles.py its own device
# directory. The others' output follows the sandbox's. INTEGRATION_JOBS=1: one after the other.
INTEGRATION_JOBS=${INTEGRATION_JOBS:-2}
SANDBOX_TESTS=tests/integration/test_sandbox.py

tier_integration() {
  local others_log others_pid rc others_rc
  scripts/docker-engine.sh && scripts/base-image.sh || return 1
  if [ "$INTEGRATION_JOBS" -lt 2 ]; then
    run_pytest -q --durations=10 tests/integration
    return
  fi
  others_log=$(mktemp)
  run_pytest -q --durations=5 tests/integration --ignore="$SANDBOX_TESTS" >"$others_log" 2>&1 &
  others_pid=$!
  run_pytest -q --durations=10 "$SANDBOX_TESTS"
  rc=$?
  wait "$others_pid"
  others_rc=$?
  log "----- the other integration modules (beside $SANDBOX_TESTS): exit status $others_rc -----"
  cat "$others_log"
  rm -f "$others_log"
  [ $rc -eq 0 ] && [ $others_rc -eq 0 ]
}

tiers=("$@")
[ ${#tiers[@]} -eq 0 ] && tiers=("${ALL_TIERS[@]}")
for tier in "${tiers[@]}"; do
  declare -F "tier_$tier" >/dev/null || die "unknown tier '$tier' (tiers: ${ALL_TIERS[*]})"
done

# The integration tier runs beside the molecule tier when both are asked for (LLMOPS_TEST_SERIAL=1: one after the
# other). Both mostly wait (on containers, systemd, simulators), they share nothing (docker containers by their own
# names, the sandbox on LXC and its own bridge), and together they take about 8 minutes less on 2 cores than in turn.
# The integration tier's output is kept in a file and printed whole after the molecule tier's. The integration tier
# takes about twice as long as the molecule tier, so the ansible-core tier, when asked for, runs after the molecule
# tier in the same lane, beside the integration tier, instead of adding its time to the run.
integration_beside_molecule=false
if [ "${LLMOPS_TEST_SERIAL:-0}" != 1 ] && [[ " ${tiers[*]} " == *" molecule "* ]] && [[ " ${tiers[*]} " == *" integration "* ]]; then
  integration_beside_molecule=true
fi

run_tier() {
  local tier=$1 start=$SECONDS nested_at=${#summary[@]} line
  log "===== tier: $tier ====="
  if "tier_$tier"; then
    line="$tier: passed in $((SECONDS - start)) s"
  else
    line="$tier: FAILED after $((SECONDS - start)) s"
    failed=1
  fi
  summary=("${summary[@]:0:$nested_at}" "$line" "${summary[@]:$nested_at}")
  echo "TIER $line"
}

total_start=$SECONDS
if [[ " ${tiers[*]} " == *" ansible-core "* ]] && [ "${tiers[0]}" != ansible-core ]; then
  make_ansible_core_venvs_in_background
fi
for tier in "${tiers[@]}"; do
  if $integration_beside_molecule && [[ "$tier" = integration || "$tier" = ansible-core ]]; then
    continue
  fi
  if $integration_beside_molecule && [ "$tier" = molecule ]; then
    # Both need the engine and the base image: made once, before either starts.
    scripts/docker-engine.sh && scripts/base-image.sh >/dev/null || die "the Docker engine or the base image failed"
    integration_log=$(mktemp)
    integration_start=$SECONDS
    log "===== tier: integration (beside molecule; its output follows the molecule tier's) ====="
    tier_integration >"$integration_log" 2>&1 &
    integration_pid=$!
    run_tier molecule
    [[ " ${tiers[*]} " == *" ansible-core "* ]] && run_tier ansible-core
    wait "$integration_pid"
    integration_rc=$?
    cat "$integration_log"
    rm -f "$integration_log"
    if [ $integration_rc -eq 0 ]; then
      line="integration: passed in $((SECONDS - integration_start)) s (beside molecule)"
    else
      line="integration: FAILED after $((SECONDS - integration_start)) s (beside molecule)"
      failed=1
    fi
    summary+=("$line")
    echo "TIER $line"
    continue
  fi
  run_tier "$tier"
done

echo
echo "===== summary ($((SECONDS - total_start)) s) ====="
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then
  echo "make test: FAILED"
  exit 1
fi
echo "make test: all tiers passed"
