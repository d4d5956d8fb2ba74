#!/usr/bin/env bash
# Installs the AArch64 cross compiler and user-mode QEMU (Debian packages) for the aarch64 preset
# (cmake/toolchains/aarch64-linux-gnu.cmake), idempotent.
set -euo pipefail
need_apt=()
command -v aarch64-linux-gnu-g++ >/dev/null || need_apt+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
