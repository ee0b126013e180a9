#!/usr/bin/env bash
# Installs Autonomic on this host: the launcher (root, static) and its sudoers
# rule, the kernel command, the worker rootfs and the launcher configuration.
# Idempotent. Needs root. Run scripts/provision_host.sh first.
#   scripts/install.sh                  builds the binaries into bin/ here
#   scripts/install.sh --prebuilt DIR   installs the binaries in DIR, built
#       elsewhere by scripts/build_binaries.sh DIR (a host without Go, e.g.
#       a guest of the host matrix)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
export PATH=$PATH:/usr/local/go/bin

bin=bin
if [ "${1:-}" = --prebuilt ]; then
	bin=${2:?usage: install.sh [--prebuilt DIR]}
	for b in autonomic-launcher autonomic autonomic-rootfs autonomic-scenario autonomic-effect autonomic-entry; do
		[ -x "$bin/$b" ] || { echo "install: $bin/$b missing" >&2; exit 1; }
	done
else
	scripts/build_binaries.sh bin
fi

install -d -o root -g root -m 0755 /usr/local/libexec /etc/autonomic
install -o root -g root -m 0755 "$bin/autonomic-launcher" /usr/local/libexec/autonomic-launcher
install -o root -g root -m 0755 "$bin/autonomic" "$bin/autonomic-rootfs" "$bin/autonomic-scenario" /usr/local/bin/
visudo -cqf sudoers.d/autonomic
install -o root -g root -m 0440 sudoers.d/autonomic /etc/sudoers.d/autonomic
# The kernel's systemd unit (enabled by the operator once
# /etc/autonomic/autonomic.json exists: systemctl enable --now autonomic).
install -d -m 0755 /etc/systemd/system
install -o root -g root -m 0644 config/systemd/autonomic.service /etc/systemd/system/autonomic.service
if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# Root's state (domains, uid slots, checkpoints) and the kernel's state. The kernel's group
# only traverses root's to read checkpoints/ (0750, archives 0640: the harvest), which the
# kernel's configuration names as episode.checkpoints_dir.
install -d -o root -g autonomic -m 0710 /var/lib/autonomic-launcher
install -d -o root -g root -m 0755 /var/lib/autonomic-rootfs
install -d -o autonomic -g autonomic -m 0750 /var/lib/autonomic
install -d -o autonomic -g autonomic -m 0755 /var/lib/autonomic/workspaces
install -d -o autonomic -g autonomic -m 0750 /var/lib/autonomic/sockets
# The kernel's own copies of the repositories it writes (autonomic repo add).
install -d -o autonomic -g autonomic -m 0750 /var/lib/autonomic/repos
# The API socket's directory: the unit's RuntimeDirectory makes it under
# systemd; for `runuser -u autonomic -- autonomic serve` (and every boot of
# a host without the unit) tmpfiles.d and this line do, since the kernel's
# account cannot create directories in /run.
install -d -o root -g root -m 0755 /etc/tmpfiles.d
printf 'd /run/autonomic 0750 autonomic autonomic -\n' >/etc/tmpfiles.d/autonomic.conf
install -d -o autonomic -g autonomic -m 0750 /run/autonomic

# A rootfs (with the effect client and the agent entry): rebuilt into a fresh directory, kept
# only if its identity (manifest digest) changed. An installed tree is kept only if it verifies
# against its manifest (every file's content, owner and mode), and whatever ends up installed is
# verified. Prints the digest.
install_rootfs() { # NAME SPEC
	local rootfs=/var/lib/autonomic-rootfs/$1 tmp digest
	tmp=$(mktemp -d /var/lib/autonomic-rootfs/.build-XXXXXX)
	rmdir "$tmp"
	digest=$("$bin/autonomic-rootfs" build --quiet --spec "$2" --add "$bin/autonomic-effect"=/usr/local/bin/autonomic-effect \
		--add "$bin/autonomic-entry"=/usr/local/bin/autonomic-entry --dest "$tmp")
	if [ -f "$rootfs/manifest.json" ] && [ "$("$bin/autonomic-rootfs" verify "$rootfs" 2>/dev/null)" = "$digest" ]; then
		rm -rf "$tmp"
	else
		rm -rf "$rootfs.old"
		[ -d "$rootfs" ] && mv "$rootfs" "$rootfs.old"
		mv "$tmp" "$rootfs"
		rm -rf "$rootfs.old"
	fi
	chmod 0755 "$rootfs"
	[ "$("$bin/autonomic-rootfs" verify "$rootfs")" = "$digest" ] || { echo "install: $rootfs does not verify against its manifest" >&2; exit 1; }
	echo "$digest"
}
rootfs=/var/lib/autonomic-rootfs/worker
digest=$(install_rootfs worker rootfs-builder/specs/worker.json)
# The agents' rootfs (agent CLIs from npm at the versions its spec pins), named "agents" in the
# launcher's rootfses table: built into the builder's content-addressed cache, so a re-install with
# the same spec and binaries only re-verifies it (seconds, not the npm install's minutes). The
# launcher uses the cache entry in place (root's, verified against its manifest on every create).
# Optional: `autonomic run` needs it, nothing else does. With --prebuilt (a host-matrix guest, no
# npm registry) it is taken from DIR/rootfs-cache when the payload carries one, else skipped.
rootfs_cache=/var/cache/autonomic/rootfs
rootfses={}
agents_from=
if [ "$bin" != bin ]; then
	[ -d "$bin/rootfs-cache" ] && agents_from=$bin/rootfs-cache
elif command -v npm >/dev/null; then
	agents_from=build
fi
if [ -n "$agents_from" ]; then
	install -d -o root -g root -m 0755 /var/cache/autonomic "$rootfs_cache"
	[ "$agents_from" = build ] || cp -a "$agents_from"/. "$rootfs_cache"/
	# A payload's cache carries the spec it was built from (host_matrix.sh: Codex alone).
	agents_spec=rootfs-builder/specs/agents.json
	[ "$agents_from" = build ] || [ ! -f "$bin/agents.json" ] || agents_spec=$bin/agents.json
	agents=$("$bin/autonomic-rootfs" build --quiet --spec "$agents_spec" --cache "$rootfs_cache" \
		--add "$bin/autonomic-effect"=/usr/local/bin/autonomic-effect --add "$bin/autonomic-entry"=/usr/local/bin/autonomic-entry)
	rootfses="{\"agents\": {\"path\": \"${agents#* }\", \"manifest_sha256\": \"${agents%% *}\"}"
	echo "install: agents rootfs ${agents#* }"
	# The dev environment (rootfs-builder/specs/dev.json: Debian packages by mmdebstrap — Go, Node,
	# Python with pytest and venv, C/C++, make — the agent CLIs on top), named "dev": `autonomic run`
	# runs on it when a target names no environment. Minutes cold, then cached like agents; skipped
	# with AUTONOMIC_DEV=0, and (with a warning: runs then use the agents rootfs) where mmdebstrap
	# is missing or cannot reach the Debian mirror.
	if [ "${AUTONOMIC_DEV:-1}" != 0 ] && [ "$agents_from" = build ]; then
		if ! command -v mmdebstrap >/dev/null; then
			echo "install: mmdebstrap is not installed: the dev environment is skipped (autonomic run uses the agents rootfs)" >&2
		elif dev=$("$bin/autonomic-rootfs" build --quiet --spec rootfs-builder/specs/dev.json --cache "$rootfs_cache" \
			--add "$bin/autonomic-effect"=/usr/local/bin/autonomic-effect --add "$bin/autonomic-entry"=/usr/local/bin/autonomic-entry); then
			rootfses="$rootfses, \"dev\": {\"path\": \"${dev#* }\", \"manifest_sha256\": \"${dev%% *}\"}"
			echo "install: dev rootfs ${dev#* }"
		else
			echo "install: the dev environment did not build (above): skipped; autonomic run uses the agents rootfs" >&2
		fi
	fi
	rootfses="$rootfses}"
elif [ "$bin" != bin ]; then
	echo "install: $bin carries no rootfs-cache: the agents rootfs is skipped (autonomic run needs it; build it where npm is reachable with autonomic-rootfs build --spec rootfs-builder/specs/agents.json --cache DIR)" >&2
else
	echo "install: npm is not installed: the agents rootfs is skipped (autonomic run needs it)" >&2
fi

cgroup2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
[ -n "$cgroup2" ] || { echo "install: no cgroup v2 mount on this host" >&2; exit 1; }
# The domains' cgroups sit under $cgroup2/autonomic, and the launcher can
# enforce only the controllers the root offers its children. systemd (Debian
# 12's 252) enables memory and pids there but cpu only when a unit asks for a
# CPU weight; this drop-in asks, with the default weight (no change in
# scheduling), so that cpu_millis is enforced. Measured by the host matrix.
if [ "$cgroup2" = /sys/fs/cgroup ] && [ -d /run/systemd/system ] && ! grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control; then
	install -d -m 0755 /etc/systemd/system/system.slice.d
	cat >/etc/systemd/system/system.slice.d/autonomic-cpu.conf <<'UNIT'
# Installed by Autonomic: systemd enables the cpu controller for the root's
# children, so that domains can be held to cpu_millis.
[Slice]
CPUWeight=100
UNIT
	systemctl daemon-reload
	grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo "install: systemd did not enable the cpu controller: cpu_millis is not enforced" >&2
fi
# The uid pool holds 128 live domains (issue 15 §3 runs 100 at once, and a probe beside
# them): 128 ranges of 65536 ids from 0x70000000, far above every account id.
cat >/etc/autonomic/launcher.json.new <<JSON
{
  "state_root": "/var/lib/autonomic-launcher",
  "rootfs": "$rootfs",
  "rootfs_manifest_sha256": "$digest",
  "workspaces_root": "/var/lib/autonomic/workspaces",
  "workspace_owner_uid": $(id -u autonomic),
  "workspace_owner_gid": $(id -g autonomic),
  "broker_sockets_root": "/var/lib/autonomic/sockets",
  "cgroup_parent": "$cgroup2/autonomic",
  "uid_pool": {"base": 1879048192, "count": 128, "size": 65536},
  "worker_uid": 1000,
  "worker_gid": 1000,
  "defaults": {"pids": 512, "memory_bytes": 2147483648, "cpu_millis": 1000, "nproc": 512, "nofile": 4096},
  "max": {"pids": 4096, "memory_bytes": 8589934592, "cpu_millis": 2000, "nproc": 4096, "nofile": 65536},
  "env_allowlist": ["LANG", "LC_ALL", "TERM", "TZ", "GOFLAGS", "GOCACHE", "GOPATH", "CC", "CFLAGS", "AUTONOMIC_EPOCH", "AUTONOMIC_LEASE_ID"],
  "max_checkpoint_bytes": 1073741824,
  "max_checkpoint_entries": 200000,
  "rootfses": $rootfses
}
JSON
chown root:root /etc/autonomic/launcher.json.new
chmod 0644 /etc/autonomic/launcher.json.new
mv /etc/autonomic/launcher.json.new /etc/autonomic/launcher.json
# Every spec or binary change leaves a new ~1.3 GiB entry in the rootfs cache. Once the new
# configuration is in place, the builder evicts the entries it does not name, keeping the two most
# recently built or used (the previous one for a rollback, a test bed's) and any a live domain has
# mounted. Not fatal: the new configuration does not need the old trees. An entry that vanishes
# anyway (a cleared cache) fails creates with rootfs_missing until the next install rebuilds it.
if [ -d "$rootfs_cache" ]; then
	"$bin/autonomic-rootfs" evict --cache "$rootfs_cache" --keep 2 --config /etc/autonomic/launcher.json |
		sed 's/^/install: evicted old rootfs /' ||
		echo "install: evicting old entries of $rootfs_cache failed; they stay (list them: autonomic-rootfs evict --dry-run --cache $rootfs_cache --keep 2 --config /etc/autonomic/launcher.json)" >&2
fi
echo "install: launcher, sudoers rule, kernel and rootfs $digest installed"
