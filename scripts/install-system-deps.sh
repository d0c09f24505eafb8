#!/usr/bin/env bash
# Install the Debian packages the OS providers and their tests need (idempotent).
# Runs apt-get only when something is missing; needs root (CI runs as root).
set -euo pipefail
pkgs=(bubblewrap firejail slirp4netns passt nftables iptables iproute2 uidmap
      qemu-system-x86 busybox-static linux-image-amd64 curl socat netcat-openbsd
      hyperfine python3-venv python3-tk patchelf)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  echo "run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
