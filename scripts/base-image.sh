#!/usr/bin/env bash
# Build the systemd base image that the molecule scenarios run in, from Debian packages only
# (debootstrap + docker import): no registry is needed. Skips the build when the image exists.
#
# The tag is a digest of this script, so a change to the package list builds a new image.
# BASE_IMAGE_SUITE=trixie builds the Debian 13 image (Python 3.13) beside the default Debian 12 one.
# Set MOLECULE_IMAGE to use another image instead (for example one pulled from a registry).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SUITE=${BASE_IMAGE_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=systemd,systemd-sysv,python3,python3-apt,python3-venv,dbus,procps,iproute2,sudo,ca-certificates,curl
digest=$(sha256sum "$0" | cut -c1-12)
IMAGE="llmops-serving-systemd:${SUITE}-${digest}"

if [ "${1:-}" = "--name" ]; then
  echo "$IMAGE"
  exit 0
fi
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "base image: $IMAGE present"
  exit 0
fi
need_root "debootstrap"
rootfs=$(mktemp -d /var/tmp/llmops-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
log "base image: debootstrap $SUITE into $rootfs (about a minute)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 \
  || { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
rm -f "$rootfs.log"
# A container has no console or hardware clock to wait for; these units only slow the boot.
for unit in systemd-firstboot.service getty.target console-getty.service systemd-udevd.service \
            systemd-udev-trigger.service systemd-modules-load.service sys-kernel-debug.mount \
            systemd-remount-fs.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
echo "$MIRROR $SUITE main" | sed 's/^/deb /' >"$rootfs/etc/apt/sources.list"
log "base image: importing as $IMAGE"
tar -C "$rootfs" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' \
  --change 'ENV container=docker' \
  - "$IMAGE" >/dev/null
# :latest is the default image's (molecule's platform falls back to it): the Debian 12 one.
[ "$SUITE" = bookworm ] && docker tag "$IMAGE" llmops-serving-systemd:latest
log "base image: $IMAGE built"
