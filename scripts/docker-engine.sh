#!/usr/bin/env bash
# Make sure a Docker engine answers. Start dockerd in the background when none runs
# (machines without systemd as PID 1 have nobody else to start it).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if docker info >/dev/null 2>&1; then
  log "docker engine: running"
  exit 0
fi
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  log "docker engine: starting docker.service"
  systemctl start docker
else
  need_root "starting dockerd"
  log "docker engine: starting dockerd (log: /var/log/dockerd.log)"
  setsid dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
fi
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { log "docker engine: ready"; exit 0; }
  sleep 1
done
tail -n 20 /var/log/dockerd.log >&2 || true
die "the Docker engine did not answer within 60 s"
