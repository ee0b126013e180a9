#!/usr/bin/env bash
# The reference run as it stands: a real domain on this host, through the
# sudoers rule, showing what the worker can and cannot see and do, then
# destroyed and proven gone. Run by `make demo` after install.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
as_kernel() { runuser -u autonomic -- "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Host and launcher, as the kernel (user autonomic) sees them through sudo"
as_kernel autonomic preflight || true

ws="demo-$(date +%s)"
root=/var/lib/autonomic/workspaces/$ws
say "The kernel prepares workspace $ws (a git clone, as user autonomic; no repository code runs on the host)"
as_kernel git init -q "$root"
as_kernel cp -r scripts/demo/project/. "$root/"
as_kernel git -C "$root" -c user.name=autonomic -c user.email=kernel@autonomic.invalid add -A
as_kernel git -C "$root" -c user.name=autonomic -c user.email=kernel@autonomic.invalid commit -qm "demo base"
lower_before=$(cd "$root" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)

say "A one-shot domain runs the worker under worker.json + the launcher's floor"
as_kernel autonomic domain run --workspace "$ws" --profile worker -- /bin/bash -c '
echo "whoami:        $(id)"
echo "root dir:      $(ls / | tr "\n" " ")"
echo "mounts:        $(awk "{print \$5}" /proc/self/mountinfo | tr "\n" " ")"
echo "interfaces:    $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"
grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status | tr "\t" " "
echo "processes:     $(ls /proc | grep -E "^[0-9]+$" | tr "\n" " ")"
touch /usr/bin/x 2>/dev/null && echo "rootfs: WRITABLE" || echo "rootfs:        read-only (write refused)"
cat /proc/1/exe >/dev/null 2>&1 && echo "launcher exe: READABLE" || echo "/proc/1/exe:   not readable"
ls /root /home /etc/shadow 2>/dev/null || echo "host secrets:  not present"
(exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && echo "network: OPEN" || echo "AF_INET:       refused (the monitor records a violation)"
cd /workspace && make -s test && echo "build+test:    ok in /workspace"
echo "edited by the worker" >> README.md && git status --short
'

say "The authoritative clone is unchanged: worker writes went to the domain's upper layer, now destroyed"
lower_after=$(cd "$root" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$lower_before" = "$lower_after" ] && echo "lower layer:   unchanged" || { echo "lower layer CHANGED"; exit 1; }

say "A long-running domain: inspect, freeze, thaw, destroy, and prove it gone"
id="demo-live-$(date +%s)"
as_kernel autonomic domain run --id "$id" --workspace "$ws" -- /bin/sh -c '(sleep 600 &); setsid sleep 600 & sleep 600' >/dev/null 2>&1 &
runner=$!
for _ in $(seq 100); do
	n=$(as_kernel autonomic domain inspect "$id" 2>/dev/null | grep -o '"processes": [0-9]*' | grep -o '[0-9]*$' || echo 0)
	[ "${n:-0}" -ge 4 ] && break
	sleep 0.1
done
as_kernel autonomic domain inspect "$id"
as_kernel autonomic domain freeze "$id" | grep -E '"frozen"'
as_kernel autonomic domain thaw "$id" | grep -E '"frozen"'
as_kernel autonomic domain destroy "$id"
wait "$runner" || true
as_kernel autonomic domain inspect "$id"
cgroup2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
[ ! -e "$cgroup2/autonomic/$id" ] && echo "cgroup:        removed (was proven empty before removal)"
[ ! -e "/var/lib/autonomic-launcher/domains/$id" ] && echo "upper layer:   removed"
left=$(ps -eo uid= | awk '$1 >= 1879048192 && $1 < 1879048192 + 64*65536' | wc -l)
echo "processes left in the domain uid pool: $left"
[ "$left" = 0 ]
rm -rf "$root"
say "Demo complete"
