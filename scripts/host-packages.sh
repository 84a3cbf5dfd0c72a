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
  # node_exporter reads the verdict textfiles in the tests as it does on a target (sglang_monitoring installs the same
  # package there when asked).
  [prometheus-node-exporter]=prometheus-node-exporter
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
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
  log "host packages: all present"
else
  need_root "installing ${missing[*]}"
  log "host packages: installing ${missing[*]}"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The node_exporter package for the container of the molecule scenario `default`, where sglang_monitoring installs and
# starts it: tests reach no package mirror, so the .deb is fetched here, at setup, and the scenario installs it from
# the file.
debs="$REPO_ROOT/.cache/debs"
if ! compgen -G "$debs/prometheus-node-exporter_*.deb" >/dev/null; then
  mkdir -p "$debs"
  log "host packages: downloading prometheus-node-exporter's .deb into ${debs#"$REPO_ROOT"/}"
  (cd "$debs" && { apt-get download -q prometheus-node-exporter >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get download -q prometheus-node-exporter >/dev/null 2>&1; }; }) \
    || die "could not download prometheus-node-exporter's .deb"
fi
