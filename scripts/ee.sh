#!/usr/bin/env bash
# The execution environment (execution-environment.yml, ansible-builder 3).
#   scripts/ee.sh            write the build context to .build/ee/context (ansible-builder create); needs no network
#   scripts/ee.sh build [BASE_IMAGE]
#                            also build the image with docker; BASE_IMAGE (an image already on this machine) replaces
#                            the definition's base image when its registry cannot be reached. Without a registry and
#                            without PyPI in the build this fails; docs/execution-environment.md says where.
# Both build the collection tarball first (the image installs the collection from it).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PATH="$VENV/bin:$PATH"

out="$REPO_ROOT/.build/ee"
version=$(awk '/^version:/{print $2}' galaxy.yml)
mkdir -p "$out/dist"
ansible-galaxy collection build --force --output-path "$out/dist" . >/dev/null
# execution-environment.yml names the tarball without its version, so the definition does not change with each release.
cp "$out/dist/llmops-serving-$version.tar.gz" "$out/llmops-serving.tar.gz"
rm -rf "$out/context"
ansible-builder create -f execution-environment.yml -c "$out/context" --output-filename Containerfile >/dev/null
log "execution environment: build context in ${out#"$REPO_ROOT"/}/context"

if [ "${1:-}" = build ]; then
  base=${2:-}
  args=(-f execution-environment.yml -c "$out/context" --output-filename Containerfile --container-runtime docker
        -t "llmops-serving-ee:$version" -v 3)
  [ -n "$base" ] && args+=(--build-arg "EE_BASE_IMAGE=$base")
  # A Debian base (such as the molecule image) has apt-get and python3 where the definition's CentOS base has dnf
  # and python3.11.
  if [ -n "$base" ] && docker run --rm --entrypoint /bin/sh "$base" -c 'command -v apt-get' >/dev/null 2>&1; then
    args+=(--build-arg PKGMGR=/usr/bin/apt-get --build-arg "PYPKG=python3 python3-venv" --build-arg PYCMD=/usr/bin/python3)
  fi
  ansible-builder build "${args[@]}"
fi
