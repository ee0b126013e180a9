#!/usr/bin/env bash
# Builds the binaries scripts/install.sh installs into DIR (default bin/):
# the static launcher, the kernel command, the rootfs builder, the scenario
# driver and the static in-domain effect client and agent entry.
# usage: scripts/build_binaries.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
dir=${1:-bin}
mkdir -p "$dir"
scripts/build_launcher.sh "$dir/autonomic-launcher"
go build -o "$dir/autonomic" ./kernel/cmd/autonomic
go build -o "$dir/autonomic-rootfs" ./rootfs-builder/cmd/autonomic-rootfs
go build -o "$dir/autonomic-scenario" ./gates/cmd/autonomic-scenario
# The in-domain effect client: static, it runs inside the worker rootfs.
# Both in-domain binaries are layered into cached rootfses keyed by their bytes: built without
# the commit stamped in, a commit that does not change them keeps the cache entries.
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$dir/autonomic-effect" ./broker/cmd/autonomic-effect
# The agent domains' first program (bridges to the relay): static, in the agents rootfs.
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$dir/autonomic-entry" ./entry/cmd/autonomic-entry
