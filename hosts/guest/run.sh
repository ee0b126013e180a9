#!/bin/sh
# The host matrix's payload, run once at boot inside a guest by its
# autonomic-guest unit (as root, under systemd):
#   run.sh RESULTS_DEVICE
# It records the host's facts, installs Autonomic the way a user does
# (provision_host.sh, install.sh, with the binaries built on the matrix's
# host), runs each step and writes every step's log and exit status, as a
# tar archive, to RESULTS_DEVICE (a raw disk the host reads back).
# Progress goes to the console as "AUTONOMIC-STEP" lines.
set -u
payload=$(cd "$(dirname "$0")" && pwd)
dev=${1:?usage: run.sh RESULTS_DEVICE}
res=/run/autonomic-results
src=/opt/autonomic/src
mkdir -p "$res"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root
uptime() { cut -d' ' -f1 /proc/uptime; }

# step NAME DIR CMD...: runs CMD in DIR, its output in NAME.log, its exit
# status and times in NAME.rc ("rc start end" in seconds of uptime). A step
# gets at most $STEP_TIMEOUT seconds (exit 124 then), so that the results
# are written before the host's timeout stops the guest.
STEP_TIMEOUT=480
step() {
	name=$1 dir=$2
	shift 2
	start=$(uptime)
	echo "AUTONOMIC-STEP $name start $start"
	(cd "$dir" && timeout --kill-after=10 "$STEP_TIMEOUT" "$@") >"$res/$name.log" 2>&1 </dev/null
	rc=$?
	end=$(uptime)
	echo "$rc $start $end" >"$res/$name.rc"
	echo "AUTONOMIC-STEP $name rc=$rc end $end"
	save
}

# save writes everything so far to the results disk: a guest stopped by the
# host's timeout still leaves the steps it finished.
save() { tar -C "$res" -cf "$dev" . && sync; }

# The host's facts, as the product finds them.
uname -r >"$res/kernel"
cat /etc/debian_version >"$res/debian_version"
readlink /proc/1/exe >"$res/pid1"
systemctl --version | head -n 1 >"$res/systemd"
findmnt -n -o PROPAGATION / >"$res/root_propagation"
cp /proc/self/mountinfo "$res/mountinfo"
cat /sys/fs/cgroup/cgroup.controllers >"$res/cgroup_controllers" 2>/dev/null
cat /sys/fs/cgroup/cgroup.subtree_control >"$res/cgroup_subtree_control" 2>/dev/null
nproc >"$res/nproc"
grep MemTotal /proc/meminfo >"$res/memtotal"
cp "$payload/manifest" "$res/payload_manifest" 2>/dev/null
echo "AUTONOMIC-STEP facts kernel=$(cat "$res/kernel") propagation=$(cat "$res/root_propagation") controllers=$(cat "$res/cgroup_subtree_control")"

# A diagnostic run (AUTONOMIC_HOSTS_DIAGNOSTIC=private-root on the host)
# makes / private before anything runs, to measure what a launcher that
# keeps its clones private would meet. Such a run never passes the matrix.
if [ "$(cat "$payload/diagnostic" 2>/dev/null)" = private-root ]; then
	mount --make-rprivate /
	echo private-root >"$res/diagnostic"
	echo "AUTONOMIC-STEP diagnostic: / made private (this run cannot pass the matrix)"
fi

# Installed the way a user installs it.
mkdir -p /opt/autonomic
cp -a "$payload/src" "$src"
step provision "$src" scripts/provision_host.sh --prebuilt
step install "$src" scripts/install.sh --prebuilt "$payload/bin"
cat /sys/fs/cgroup/cgroup.subtree_control >"$res/cgroup_subtree_control_installed" 2>/dev/null
step preflight / runuser -u autonomic -- autonomic preflight

# The test binaries built on the host, against testbeds of prebuilt
# launchers (no Go toolchain here). A failed run may leave its testbed's
# configuration behind; the next one needs the path free.
tests() {
	name=$1 pkg=$2 run=$3
	rm -f /run/autonomic-testbed/launcher.json
	step "$name" "$src/$pkg" env AUTONOMIC_REQUIRE_PRIVILEGED=1 AUTONOMIC_TESTBED_PREBUILT="$payload/testbed" \
		AUTONOMIC_MODULE_ROOT="$src" "$payload/tests/$(echo "$pkg" | tr / -).test" -test.v -test.count=1 -test.timeout 12m -test.run "$run"
}
while read -r name pkg run; do
	case $name in '#'* | '') continue ;; esac
	tests "$name" "$pkg" "$run"
done <"$payload/tests/plan"

# The reference scenario end to end: `autonomic serve` as the service
# account, the launcher through sudo, the normal and the hostile episode,
# then the main job: `autonomic run` with the real Codex CLI on the agents
# rootfs the payload carries (offline: the guest has no package registry).
step scenario "$src" env AUTONOMIC_DEMO_OFFLINE=1 scripts/demo.sh
cp /var/lib/autonomic/demo/runs/*.json "$res/" 2>/dev/null
cp /var/lib/autonomic/demo/serve.log "$res/serve.log" 2>/dev/null

# The kernel as the systemd unit install.sh installed: started, ready when
# its API answers, stopped.
step systemd "$src" sh hosts/guest/systemd.sh
journalctl -k -b --no-pager >"$res/kernel.log" 2>&1

echo "$(uptime)" >"$res/uptime_end"
save
echo "AUTONOMIC-STEP results written to $dev"
