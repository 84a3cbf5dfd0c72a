#!/usr/bin/env bash
# Install the Debian/Ubuntu packages the sandbox and the tests need; skip what is already there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Commands each package provides: a package is installed only when its command is missing.
declare -A wanted=(
  [docker.io]=dockerd
  [debootstrap]=debootstrap
  [lxc]=lxc-start
  [python3-venv]=""
  [git]=git
  [make]=make
  [openssl]=openssl
  [zstd]=zstd
  [openssh-client]=ssh-keygen
  [iproute2]=ip
  # promtool checks the verdict textfile and runs the Prometheus rule tests. The package also holds the Prometheus
  # server; on a host with systemd its postinst enables prometheus.service.
  [prometheus]=promtool
)
missing=()
for pkg in "${!wanted[@]}"; do
  cmd=${wanted[$pkg]}
  if [ -n "$cmd" ]; then
    command -v "$cmd" >/dev/null 2>&1 && continue
  else
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' && continue
    # python3 -m venv works without the Debian package when python3 is not Debian's (pyenv).
    [ "$pkg" = python3-venv ] && python3 -c 'import ensurepip' 2>/dev/null && continue
  fi
  missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  log "host packages: all present"
  exit 0
fi
need_root "installing ${missing[*]}"
log "host packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
