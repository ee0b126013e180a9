#!/usr/bin/env bash
# Runs one guest of the host matrix on the checked-out tree:
#   scripts/host_matrix.sh GUEST OUT
# builds (or reuses) the guest's image (scripts/host_image.sh), builds the
# binaries and test binaries on this host, puts them with the source tree
# and hosts/guest/run.sh on a payload disk, boots the guest under QEMU (TCG,
# 2 vCPUs, 3 GiB; its root a qcow2 overlay of the cached image, so the image
# is never written) and reads its results disk back into OUT/results.
# OUT/console.log is the guest's serial console, OUT/matrix.env the
# timings. Exits 0 once the guest powered off and its results were read,
# whatever they say: hosts.TestHostMatrix judges them.
# Needs root, qemu-system-x86_64, qemu-img and what host_image.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
guest=${1:?usage: host_matrix.sh GUEST OUT}
out=${2:?usage: host_matrix.sh GUEST OUT}
vm_timeout=${AUTONOMIC_HOSTS_VM_TIMEOUT:-1200}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/payload" "$out/results"
t0=$(date +%s.%N)
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

img=$(scripts/host_image.sh "$guest")
t_image=$(date +%s.%N)

# The payload: binaries as install.sh wants them, test binaries, prebuilt
# testbed binaries, the source tree (working tree, tracked and untracked
# files git does not ignore) and the guest's script.
p=$out/payload
mkdir -p "$p/bin" "$p/tests" "$p/testbed" "$p/src"
scripts/build_binaries.sh "$p/bin" >/dev/null
# The agents environment for the guest's main job (`autonomic run` with
# Codex; the guest reaches no npm registry): the agents spec with Codex
# alone (all three CLIs are 1.3 GB, costly to carry and to hash under TCG),
# built here against the payload's binaries into the matrix's own cache
# (an install's eviction never sees it; it keeps its newest entry) and
# carried as DIR/rootfs-cache beside its spec DIR/agents.json, which
# install.sh --prebuilt builds from (a cache hit).
python3 - rootfs-builder/specs/agents.json >"$p/bin/agents.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["description"] = "The agents spec with Codex alone, for the host matrix's guests: " + s["description"]
s["npm"]["packages"] = [k for k in s["npm"]["packages"] if k["name"] == "@openai/codex"]
s["npm"]["files"] = [f for f in s["npm"]["files"] if f["from"].startswith("@openai/codex-")]
json.dump(s, sys.stdout, indent=2)
PY
cache=/var/cache/autonomic/host-matrix-rootfs
agents=$("$p/bin/autonomic-rootfs" build --quiet --spec "$p/bin/agents.json" --cache "$cache" \
	--add "$p/bin/autonomic-effect"=/usr/local/bin/autonomic-effect --add "$p/bin/autonomic-entry"=/usr/local/bin/autonomic-entry)
"$p/bin/autonomic-rootfs" evict --cache "$cache" --keep 1 >/dev/null
mkdir -p "$p/bin/rootfs-cache"
cp -a "${agents#* }" "$p/bin/rootfs-cache/"
# internal/testbed.PrebuiltConfigPath (hosts.TestHostMatrix passes it).
cfg=${AUTONOMIC_TESTBED_CONFIG:-/run/autonomic-testbed/launcher.json}
scripts/build_launcher.sh "$p/testbed/autonomic-launcher" "-X main.configPath=$cfg" >/dev/null
CGO_ENABLED=0 go build -trimpath -o "$p/testbed/autonomic-probe" ./internal/testbed/probe
CGO_ENABLED=0 go build -trimpath -o "$p/testbed/autonomic-effect" ./broker/cmd/autonomic-effect
cp hosts/guest/plan "$p/tests/plan"
grep -vE '^\s*(#|$)' hosts/guest/plan | awk '{print $2}' | sort -u | while read -r pkg; do
	go test -c -o "$p/tests/$(echo "$pkg" | tr / -).test" "./$pkg"
done
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -C "$p/src" -xf -
install -m 0755 hosts/guest/run.sh "$p/run.sh"
[ -z "${AUTONOMIC_HOSTS_DIAGNOSTIC:-}" ] || echo "$AUTONOMIC_HOSTS_DIAGNOSTIC" >"$p/diagnostic"
(cd "$p" && find . -type f ! -name manifest -print0 | sort -z | xargs -0 sha256sum) >"$p/manifest"
size=$(($(du -sm "$p" | cut -f1) + 256))
mkfs.ext4 -q -F -L payload -d "$p" "$out/payload.img" "${size}M" >/dev/null
truncate -s 0 "$out/results.img"
truncate -s 256M "$out/results.img"
rm -f "$out/root.qcow2"
qemu-img create -q -f qcow2 -F raw -b "$img/rootfs.img" "$out/root.qcow2"
t_payload=$(date +%s.%N)

# TCG only: KVM guests stall in early boot on the matrix's CI host.
rc=0
timeout --foreground "$vm_timeout" qemu-system-x86_64 \
	-machine q35 -accel tcg,thread=multi -cpu max -smp 2 -m 3G \
	-kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
	-append "console=ttyS0 panic=-1 quiet loglevel=4 systemd.show_status=0" \
	-drive "file=$out/root.qcow2,if=virtio,format=qcow2" \
	-drive "file=$out/payload.img,if=virtio,format=raw,readonly=on" \
	-drive "file=$out/results.img,if=virtio,format=raw" \
	-nic none -display none -monitor none -no-reboot \
	-serial "file:$out/console.log" || rc=$?
t_vm=$(date +%s.%N)

mkdir -p "$out/results"
tar -C "$out/results" -xf "$out/results.img" 2>/dev/null || echo "host_matrix: the guest wrote no results" >&2
# Only what judges the run stays: the console, the results, the manifest.
mv "$p/manifest" "$out/payload.manifest"
rm -rf "$out/root.qcow2" "$out/payload.img" "$out/results.img" "$p"
cp "$img/image.json" "$out/image.json"
cat >"$out/matrix.env" <<ENV
qemu_rc=$rc
image_dir=$img
image_seconds=$(secs "$t0" "$t_image")
payload_seconds=$(secs "$t_image" "$t_payload")
vm_seconds=$(secs "$t_payload" "$t_vm")
total_seconds=$(secs "$t0" "$t_vm")
ENV
cat "$out/matrix.env"
