#!/usr/bin/env bash
# `make sandbox` / `make sandbox-down`: the whole deployment on this machine, without GPU or Proxmox.
#
# up:   the node's stand-ins (GPU kit: two GPUs per container, their nodes in /dev; a stand-in root for the node's files), the site
#       mirror, an SSH key and the API key, the Proxmox VE simulator with the bridge llmsbx0 (10.213.0.1/24, no route
#       beyond this machine), the Hugging Face Hub stand-in on that bridge (simulators/hf_hub: the model the example
#       downloads with the real `hf`; its request log and fault switches in .build/sandbox/hf-hub); then `ansible-playbook -i inventories/example -i inventories/sandbox deploy.yml` (the
#       example's configuration, with the overlay of what only the sandbox needs) and the verification summary. The
#       secrets reach the example's lookups as a user's do, from the environment: PVE_ROOT_PASSWORD (pve-sim's) and
#       SGLANG_API_KEY (made here).
#       Rerunning it is a rerun of the deployment (changed=0 when nothing changed).
# down: the containers, the Hub stand-in, the simulator (and the bridge it made), the kit's /dev/nvidia* nodes and .build/sandbox; nothing else
#       (the template cache .build/pve-sim-cache is shared with the tests and kept).
# Extra arguments after `up` go to ansible-playbook (e.g. scripts/sandbox.sh up --tags service).
# SANDBOX_CONTAINERS=N (default 2, the example's) adds llm-qwen-c, -d, ... to the overlay (scripts/sandbox-inventory.py);
# SANDBOX_MODEL_NODES=M (default 0, else at least 2) adds M containers after those that run one model across them.
# SANDBOX_PVE_RELEASE=9|8 (default 9): the Proxmox VE release pve-sim runs (its version, kernel, defaults and cgroup
# rules) with that release's containers: Debian 13 on 9 (the example's template), Debian 12 on 8 (the overlay gives
# every container debian-12-standard); SANDBOX_MODEL_NODES_DEBIAN=12|13 gives the multi-node model's containers another
# Debian release than the others.
# prepare: everything `up` does before the playbook (the tests and the bench run ansible-playbook themselves).
# summary: the verification summary of the last run.
# playbook PLAYBOOK [args]: any playbook on the running sandbox, as `up` runs deploy.yml (e.g. playbooks/verify.yml).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SANDBOX_DIR="$REPO_ROOT/.build/sandbox"
PVE_STATE="$SANDBOX_DIR/pve-sim"
TEMPLATE_CACHE="${PVE_SIM_TEMPLATE_CACHE:-$REPO_ROOT/.build/pve-sim-cache}"
PVE_RELEASE=${SANDBOX_PVE_RELEASE:-9}
# Two GPUs per container (scripts/sandbox-inventory.py assigns them in inventory order).
GPUS_PER_CONTAINER=2
# Must match the overlay inventories/sandbox (pve_container_api_port, pve_container_net0). The kit and the mirror's installer have
# the same driver version (the roles read it from the node, as on a real one).
API_LISTEN=127.0.0.1:18006
# The example's node: its inventory name is the Proxmox node name (pve_container_node: "{{ llmops_pve_node }}").
NODE=pve1
BRIDGE=llmsbx0=10.213.0.1/24
DRIVER_VERSION=580.95.05
UVM_MAJOR=508
# The Hub stand-in, where the containers reach it (the overlay's sglang_hf_endpoint); LFS files come from its "CDN".
HUB_DIR="$SANDBOX_DIR/hf-hub"
HUB_HOST=10.213.0.1
HUB_PORT=18090
HUB_CDN_PORT=18091
EXAMPLE="$REPO_ROOT/inventories/example"
OVERLAY="$REPO_ROOT/inventories/sandbox"

pve_sim() {
  PYTHONPATH="$REPO_ROOT/simulators/pve_sim${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m pve_sim "$@"
}

hf_hub_sim() {
  PYTHONPATH="$REPO_ROOT/simulators/hf_hub${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m hf_hub_sim "$@"
}

# The containers are unprivileged: their root (host uid 100000) reaches the sandbox's files (the root disks, the
# mirror) only through directories others may search. pve-sim refuses each start otherwise; say it once, up front.
check_searchable() {
  local dir=$1 mode
  while [ "$dir" != / ]; do
    if [ -d "$dir" ]; then
      mode=$(stat -c %a "$dir")
      (( 8#$mode & 1 )) || die "the sandbox's unprivileged containers cannot reach $SANDBOX_DIR: $dir is not searchable \
for others (mode $mode); chmod o+x $dir, or use a checkout in another place"
    fi
    dir=$(dirname "$dir")
  done
}

prepare_node() {
  local root="$SANDBOX_DIR/node-root"
  local gpus=$((GPUS_PER_CONTAINER * (${SANDBOX_CONTAINERS:-2} + ${SANDBOX_MODEL_NODES:-0})))
  # The node's GPUs: character nodes with NVIDIA's majors in /dev, where a real node has them (gpu-kit refuses on a
  # machine with an NVIDIA driver), the driver's proc files, its GPU memory and the node's nvidia-smi; and stand-ins
  # for the node's nvidia-modprobe (it (re)creates the nodes, the uvm ones with the same major, as on a real node) and
  # udevadm.
  pve_sim gpu-kit --root "$SANDBOX_DIR/gpu-kit" --uvm-major "$UVM_MAJOR" --gpus "$gpus" --driver-version "$DRIVER_VERSION" \
    --kernel "$(pve_sim release "$PVE_RELEASE" --field kernel)" --real-dev --node-root "$root" >/dev/null
  mkdir -p "$root/etc/udev/rules.d" "$root/etc/modules-load.d" "$root/etc/systemd/system" "$root/run/lock/lxc"
}

prepare_secrets() {
  mkdir -p "$SANDBOX_DIR/ssh" "$SANDBOX_DIR/secrets"
  chmod 0700 "$SANDBOX_DIR/ssh" "$SANDBOX_DIR/secrets"
  [ -f "$SANDBOX_DIR/ssh/id_ed25519" ] ||
    ssh-keygen -q -t ed25519 -N '' -C llmops-sandbox -f "$SANDBOX_DIR/ssh/id_ed25519"
  if [ ! -s "$SANDBOX_DIR/secrets/sglang-api-key" ]; then
    (umask 077 && openssl rand -hex 24 >"$SANDBOX_DIR/secrets/sglang-api-key")
  fi
}

# Both Debian releases' templates (scripts/sandbox-inventory.py names them), built once: which one a container gets is
# the inventory's.
ensure_templates() {
  local template
  mkdir -p "$TEMPLATE_CACHE"
  for template in $("$VENV/bin/python" "$REPO_ROOT/scripts/sandbox-inventory.py" --templates); do
    if ! pve_sim template check --output "$TEMPLATE_CACHE/$template" >/dev/null 2>&1; then
      log "sandbox: building the container template $template (debootstrap, about a minute, once)"
      pve_sim template build --output "$TEMPLATE_CACHE/$template"
    fi
  done
}

start_simulator() {
  if pve_sim status --state-dir "$PVE_STATE" >/dev/null 2>&1; then
    log "sandbox: pve-sim already runs ($PVE_STATE)"
    return
  fi
  log "sandbox: starting pve-sim (Proxmox VE $PVE_RELEASE) on $API_LISTEN with bridge $BRIDGE"
  pve_sim start --state-dir "$PVE_STATE" --listen "$API_LISTEN" --node "$NODE" --release "$PVE_RELEASE" --template-cache "$TEMPLATE_CACHE" \
    --bridge "$BRIDGE" --gpu-kit "$SANDBOX_DIR/gpu-kit" --wait 60
}

# The PID in the Hub stand-in's ready file, when that process is still the stand-in.
hub_pid() {
  local pid
  pid=$("$VENV/bin/python" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["pid"]))' "$HUB_DIR/ready" 2>/dev/null) ||
    return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '-m hf_hub_sim serve' || return 1
  printf '%s\n' "$pid"
}

start_hub() {
  if hub_pid >/dev/null; then
    log "sandbox: the Hub stand-in already runs ($HUB_DIR)"
    return
  fi
  mkdir -p "$HUB_DIR"
  hf_hub_sim generate --root "$HUB_DIR/root" >/dev/null
  [ -e "$HUB_DIR/faults.json" ] || echo '{}' >"$HUB_DIR/faults.json"
  rm -f "$HUB_DIR/ready"
  log "sandbox: starting the Hub stand-in on http://$HUB_HOST:$HUB_PORT (its CDN on port $HUB_CDN_PORT)"
  PYTHONPATH="$REPO_ROOT/simulators/hf_hub${PYTHONPATH:+:$PYTHONPATH}" setsid "$VENV/bin/python" -m hf_hub_sim serve --root "$HUB_DIR/root" --host "$HUB_HOST" --port "$HUB_PORT" \
    --cdn-port "$HUB_CDN_PORT" --ready-file "$HUB_DIR/ready" --faults "$HUB_DIR/faults.json" \
    --request-log "$HUB_DIR/requests.jsonl" </dev/null >>"$HUB_DIR/hub.log" 2>&1 &
  local pid=$! tries
  # Ready when both listeners accept (it writes the ready file then); a start that fails says why in its log.
  for tries in $(seq 300); do
    [ -s "$HUB_DIR/ready" ] && return
    kill -0 "$pid" 2>/dev/null || die "the Hub stand-in exited: $(tail -n 5 "$HUB_DIR/hub.log")"
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die "the Hub stand-in was not ready after $((tries / 10)) s: $(tail -n 5 "$HUB_DIR/hub.log")"
}

stop_hub() {
  local pid tries
  pid=$(hub_pid) || return 0
  kill "$pid" 2>/dev/null || return 0
  for tries in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

print_summary() {
  "$VENV/bin/python" - "$SANDBOX_DIR/reports" <<'PY'
import json, pathlib, sys
reports = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
rows = [json.loads(path.read_text()) for path in reports if not path.name.startswith(("rollout-", "router-", "preflight-"))]
routers = [json.loads(path.read_text()) for path in reports if path.name.startswith("router-")]
nodes = [json.loads(path.read_text()) for path in reports if path.name.startswith("preflight-")]
def preflight(scope, host, result):
    """The GPU preflight of a node or a container: its counts, then one line per finding."""
    if not result:
        print("preflight %s %s: not run" % (scope, host))
        return
    print("preflight %s %s: %s error(s), %s warning(s)" % (scope, host, result.get("errors"), result.get("warnings")))
    for line in result.get("summary") or []:
        print("  " + line)
print("\nGPU preflight")
for node in nodes:
    preflight("node", node.get("host"), node)
for row in rows:
    preflight("container", row.get("host"), row.get("preflight"))
print("\nVerification summary (%s)" % sys.argv[1])
def mean(value):
    return "%.2f" % value["mean"] if isinstance(value, dict) and value.get("mean") is not None else "-"
def gpus(row):
    """The GPUs the server holds as the node's nvidia-smi indices ("-" when none was seen)."""
    return ",".join(str(gpu.get("index")) for gpu in row.get("gpus") or []) or "-"
print("%-16s %-10s %-7s %-14s %-6s %-6s %-10s %-7s %-8s %s" % ("host", "instance", "status", "deployment", "pid", "gpus", "accept len", "accept", "probe", "log"))
for row in rows:
    print("%-16s %-10s %-7s %-14s %-6s %-6s %-10s %-7s %-8s %s" % (
        row.get("host"), row.get("instance"), row.get("status"), (row.get("deployment_id") or "-")[:12] + "..",
        row.get("main_pid"), gpus(row), mean(row.get("accept_length")), mean(row.get("acceptance_rate")), row.get("probe_verdict"),
        row.get("log_file")))
    for gpu in row.get("gpus") or []:
        print("  GPU %s: %s (/dev/nvidia%s)" % (gpu.get("index"), gpu.get("uuid"), gpu.get("minor")))
    if row.get("status") != "passed":
        print("  failed at %s: %s" % (row.get("failed_step"), row.get("message")))
for router in routers:
    print("router %s on %s: %s, deployment %s.., PID %s, workers %s" % (
        router.get("unit"), router.get("host"), router.get("status"), (router.get("deployment_id") or "-")[:12],
        router.get("main_pid"), " ".join(router.get("registered") or []) or "-"))
    if router.get("status") != "passed":
        print("  failed at %s: %s" % (router.get("failed_step"), router.get("message")))
failed = [row for row in rows + routers if row.get("status") != "passed"]
sys.exit(1 if failed or not rows else 0)
PY
}

prepare() {
  need_root "the sandbox (LXC containers, a bridge, device nodes)"
  "$REPO_ROOT/scripts/host-packages.sh"
  "$REPO_ROOT/scripts/venv.sh"
  ensure_templates
  mkdir -p "$SANDBOX_DIR"
  check_searchable "$SANDBOX_DIR"
  "$VENV/bin/python" "$REPO_ROOT/scripts/sandbox-inventory.py" "${SANDBOX_CONTAINERS:-2}" \
    --model-nodes "${SANDBOX_MODEL_NODES:-0}" --pve-release "$PVE_RELEASE" \
    ${SANDBOX_MODEL_NODES_DEBIAN:+--model-nodes-debian "$SANDBOX_MODEL_NODES_DEBIAN"} --inventory "$OVERLAY" >/dev/null
  # The router is the real smg from PyPI (downloaded once on this machine; the containers stay offline).
  # The same for huggingface_hub, which the stand-in sglang depends on as the real one does: its `hf` downloads the model.
  router_wheels=$("$REPO_ROOT/scripts/router-wheels.sh")
  hub_wheels=$("$REPO_ROOT/scripts/hub-wheels.sh")
  "$VENV/bin/python" "$REPO_ROOT/scripts/sandbox-mirror.py" "$SANDBOX_DIR/mirror" --driver-version "$DRIVER_VERSION" \
    --proc-version-path /srv/host-proc-driver-nvidia/version --router-wheels "$router_wheels" --hub-wheels "$hub_wheels"
  prepare_node
  prepare_secrets
  start_simulator
  start_hub
}

# ansible-playbook on the example and the overlay, with the secrets in the environment as a user has them.
run_playbook() {
  [ -f "$PVE_STATE/root-password" ] || die "no sandbox in $SANDBOX_DIR: make sandbox first"
  log "sandbox: ansible-playbook -i inventories/example -i inventories/sandbox $*"
  (cd "$REPO_ROOT" && PVE_ROOT_PASSWORD=$(cat "$PVE_STATE/root-password") \
     SGLANG_API_KEY=$(cat "$SANDBOX_DIR/secrets/sglang-api-key") PATH="$VENV/bin:$PATH" \
     ansible-playbook -i "$EXAMPLE" -i "$OVERLAY" "$@")
}

up() {
  prepare
  run_playbook deploy.yml "$@"
  print_summary
}

down() {
  if [ -d "$PVE_STATE/lxc" ]; then
    for config in "$PVE_STATE"/lxc/*/config; do
      [ -e "$config" ] || continue
      name=$(basename "$(dirname "$config")")
      log "sandbox: removing container $name"
      lxc-stop -P "$PVE_STATE/lxc" -n "$name" -k >/dev/null 2>&1 || true
      lxc-destroy -P "$PVE_STATE/lxc" -n "$name" >/dev/null 2>&1 || true
    done
  fi
  stop_hub
  if [ -d "$PVE_STATE" ]; then
    pve_sim stop --state-dir "$PVE_STATE" || true
  fi
  if [ -d "$SANDBOX_DIR/gpu-kit" ]; then
    pve_sim gpu-kit --root "$SANDBOX_DIR/gpu-kit" --remove >/dev/null
  fi
  rm -rf "$SANDBOX_DIR"
  python3 "$REPO_ROOT/scripts/sandbox-inventory.py" 2 --inventory "$OVERLAY" >/dev/null
  log "sandbox: removed"
}

case "${1:-up}" in
  up) shift || true; up "$@" ;;
  prepare) prepare ;;
  down) down ;;
  summary) print_summary ;;
  playbook) shift; [ $# -gt 0 ] || die "usage: sandbox.sh playbook PLAYBOOK [ansible-playbook args]"; run_playbook "$@" ;;
  *) die "usage: sandbox.sh up [ansible-playbook args] | playbook PLAYBOOK [args] | prepare | down | summary" ;;
esac
