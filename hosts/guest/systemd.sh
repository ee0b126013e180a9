#!/bin/sh
# The kernel as the systemd service a user enables (config/systemd/
# autonomic.service, installed by scripts/install.sh): started for real,
# ready only when its API answers (Type=notify), stopped cleanly. Run as
# root by run.sh's "systemd" step after the reference scenario, whose
# kernel has exited; it reuses that kernel's state_dir and cluster.
set -eu
cfg=/etc/autonomic/autonomic.json
unit=autonomic.service
fail() { echo "systemd: $*" >&2; journalctl -u "$unit" --no-pager -n 40 >&2 || true; exit 1; }

[ -f /etc/systemd/system/$unit ] || fail "install.sh did not install /etc/systemd/system/$unit"
systemd-analyze verify /etc/systemd/system/$unit || fail "systemd-analyze verify failed"
# A configuration whose API socket is in /run/autonomic, which only the
# unit's RuntimeDirectory= makes.
cat >"$cfg" <<JSON
{
  "state_dir": "/var/lib/autonomic",
  "domain": {"backend": "linux", "workspaces_root": "/var/lib/autonomic/workspaces",
             "sockets_root": "/var/lib/autonomic/sockets", "cgroup_parent": "/autonomic"},
  "sensor": {"kind": "rules"},
  "api": {"socket": "/run/autonomic/api.sock"}
}
JSON
chown root:autonomic "$cfg"
chmod 0640 "$cfg"
systemctl daemon-reload
# Type=notify: start returns only after READY=1, or fails.
systemctl start $unit || fail "systemctl start failed"
[ "$(systemctl show -p ActiveState --value $unit)" = active ] || fail "not active after start"
[ -S /run/autonomic/api.sock ] || fail "no API socket in /run/autonomic"
[ "$(stat -c %U /run/autonomic)" = autonomic ] || fail "/run/autonomic is not the service account's"
runuser -u autonomic -- autonomic episode list --config "$cfg" >/dev/null || fail "the API does not answer"
pid=$(systemctl show -p MainPID --value $unit)
[ "$(stat -c %U /proc/"$pid")" = autonomic ] || fail "the kernel does not run as autonomic"
systemctl stop $unit
[ "$(systemctl show -p ActiveState --value $unit)" = inactive ] || fail "not inactive after stop"
[ "$(systemctl show -p Result --value $unit)" = success ] || fail "stopped with result $(systemctl show -p Result --value $unit)"
[ ! -e /run/autonomic ] || fail "/run/autonomic outlived the unit"
rm -f "$cfg"
echo "systemd: $unit verified, started (ready once the API answered), stopped cleanly"
