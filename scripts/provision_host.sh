#!/usr/bin/env bash
# Installs the Debian packages and the service account Autonomic needs.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { echo "provision: run as root (this host has no sudo yet)" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
pkgs=(postgresql libseccomp-dev libseccomp2 pkg-config gcc make git sudo file bubblewrap crun runc iproute2 ca-certificates util-linux)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "provision: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The kernel's unprivileged service account; the launcher is its only way to root.
if ! getent passwd autonomic >/dev/null; then
	useradd --system --user-group --home-dir /var/lib/autonomic --no-create-home --shell /usr/sbin/nologin autonomic
fi
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
	echo "provision: a Go toolchain (>= 1.21, which fetches Go 1.26 from the module proxy) must be on PATH or in /usr/local/go" >&2
	exit 1
fi
