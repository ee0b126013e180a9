#!/usr/bin/env bash
# Installs the Debian packages and the service account Autonomic needs.
# Idempotent: installs only what is missing. Needs root (or sudo).
#   scripts/provision_host.sh              (a host that builds: needs Go)
#   scripts/provision_host.sh --prebuilt   (binaries come built: no Go)
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { echo "provision: run as root (this host has no sudo yet)" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
pkgs=(postgresql libseccomp-dev libseccomp2 pkg-config gcc make git sudo file bubblewrap crun runc iproute2 ca-certificates util-linux systemd)
# The host matrix (hosts/, make test-hosts): Debian guests under QEMU, built
# with debootstrap, booted on Debian's 6.1 kernel. A prebuilt install (a
# guest of the matrix) runs no guests itself.
if [ "${1:-}" != --prebuilt ]; then
	pkgs+=(qemu-system-x86 qemu-utils linux-image-amd64 debootstrap cpio busybox-static e2fsprogs kmod)
	# Debian environments (rootfs specs with "debian") are bootstrapped by
	# mmdebstrap; the OCI-image test runs busybox-static in a domain.
	pkgs+=(mmdebstrap debian-archive-keyring)
	# The web console's test drives Debian's chromium headless (chromedp).
	pkgs+=(chromium)
	# The agents rootfs installs the agent CLIs with npm (install.sh); a
	# host whose Node already brings npm (NodeSource's) keeps its own.
	command -v npm >/dev/null || pkgs+=(nodejs npm)
fi
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
if [ "${1:-}" != --prebuilt ] && ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
	echo "provision: a Go toolchain (>= 1.21, which fetches Go 1.26 from the module proxy) must be on PATH or in /usr/local/go" >&2
	exit 1
fi
