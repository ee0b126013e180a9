#!/usr/bin/env bash
# Builds the static, stripped, pure-Go launcher and proves it is one.
# usage: scripts/build_launcher.sh [OUT] [-X main.configPath=...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/autonomic-launcher}
ldx=${2:-}
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -buildid= ${ldx}" -o "$out" ./launcher
file "$out" | grep -q "statically linked" || { echo "build_launcher: $out is not statically linked" >&2; file "$out" >&2; exit 1; }
go version -m "$out" | grep -q "CGO_ENABLED=0" || { echo "build_launcher: $out was not built with CGO_ENABLED=0" >&2; exit 1; }
echo "build_launcher: $out static, CGO_ENABLED=0, sha256 $(sha256sum "$out" | cut -d' ' -f1)"
