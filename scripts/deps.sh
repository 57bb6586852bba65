#!/usr/bin/env bash
# Install the Debian 12 packages libxtq builds and tests with.
# Run as root (or through sudo). Idempotent; skips apt when all are present.
set -euo pipefail

PKGS=(build-essential cmake pkg-config git
      libfabric-dev libfabric-bin libhwloc-dev hwloc libpmix-dev
      libopenmpi-dev openmpi-bin
      libmpich-dev mpich
      libhsa-runtime-dev
      clang libclang-rt-14-dev
      gnuplot-nox
      zlib1g-dev dataset-fashion-mnist python3-torch
      iproute2)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#PKGS[@]} packages present"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
