#!/usr/bin/env bash
# `make demo` after install: (1) a tour of one real domain through the
# sudoers rule — what a worker can and cannot see and do, then destroyed
# and proven gone; (2) the reference coding-agent scenario: the kernel runs
# as a service (user autonomic, managed PostgreSQL, the launcher through
# sudo), and the normal and the hostile episode run through its API, each
# printed as a timeline with its checks. Idempotent: a second run reuses
# the cluster, keys and repository and adds two episodes to the ledger.
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
report=$(mktemp)
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
(exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && echo "network: OPEN" || echo "AF_INET:       refused"
cd /workspace && make -s test && echo "build+test:    ok in /workspace"
echo "edited by the worker" >> README.md && git status --short
' 2>"$report"
cat "$report"
# What the launcher's monitor reported, not what the worker believes.
violations=$(grep -c '"nr":' "$report" || true)
echo "violations:    $violations reported by the launcher ($(grep -o '"syscall": *"[^"]*"' "$report" | sort -u | tr -d '"' | tr '\n' ' '))"
rm -f "$report"
[ "$violations" -ge 1 ] || { echo "the AF_INET attempt was not reported as a violation"; exit 1; }

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

# ---- (2) the reference scenario ----------------------------------------
demo=/var/lib/autonomic/demo
# Its own configuration: an operator's /etc/autonomic/autonomic.json is never touched.
cfg=/etc/autonomic/demo.json
# Long-running processes start in the background as the service account
# with nothing of root's environment. The background subshell execs setpriv,
# which execs env, which execs the command: $! is the process itself.
spawn_as_service() {
	exec setpriv --reuid=autonomic --regid=autonomic --init-groups -- \
		env -i HOME=/var/lib/autonomic PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "$@"
}
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait "${pids[@]}" 2>/dev/null || true; }
trap stop_all EXIT

say "The reference scenario: kernel state in $demo"
install -d -o autonomic -g autonomic -m 0750 "$demo" "$demo/runs"
if [ ! -s "$demo/policy.pub" ]; then
	rm -f "$demo/policy.pem"
	as_kernel autonomic effect keygen --out "$demo/policy.pem" >"$demo/policy.pub.new"
	mv "$demo/policy.pub.new" "$demo/policy.pub"
	echo "operator policy key created: $demo/policy.pem (public key in policy_keys as 'demo')"
else
	echo "operator policy key reused: $demo/policy.pem"
fi

say "The poisoned fixture model (rates everything safe) on loopback, as user autonomic"
rm -f "$demo/model.url"
spawn_as_service autonomic-scenario model --listen 127.0.0.1:0 --addr-file "$demo/model.url" >"$demo/model.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$demo/model.url" ] && break; sleep 0.1; done
model=$(cat "$demo/model.url")
echo "model endpoint: $model"

# The main job needs the agents rootfs, which install.sh builds only where npm is reachable.
# AUTONOMIC_DEMO_OFFLINE=1 (a host-matrix guest: no network, its agents rootfs carried in):
# the main job runs on the reference repository as seeded, whose tests need no registry.
offline=${AUTONOMIC_DEMO_OFFLINE:-}
agents= allowed_nets=
if grep -q '"agents"' /etc/autonomic/launcher.json; then
	say "A fixture model for Codex (OpenAI Responses, the 'fix the reference repository' script) on loopback"
	rm -f "$demo/agent-model.url"
	# --test: after its fix Codex runs make test (online, its Node test needs a dependency from npm).
	spawn_as_service autonomic-scenario agent-model --wire responses --test --addr-file "$demo/agent-model.url" >"$demo/agent-model.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do [ -s "$demo/agent-model.url" ] && break; sleep 0.1; done
	agents=$(cat "$demo/agent-model.url")
	echo "agent model upstream: $agents"

	if [ -z "$offline" ]; then
		say "Egress: the package registries an episode may fetch from, as this host resolves them"
		# The proxy pins only public unicast addresses by default. Where this
		# site resolves the registries into a reserved range (a gateway or
		# mirror), the demo's own configuration lists exactly those addresses in
		# egress.allowed_nets, and says so; an operator's configuration is never
		# changed, and a host where they resolve publicly gets none.
		site_nets=$(as_kernel autonomic egress nets)
		allowed_nets=$(printf '%s\n' $site_nets | sed '/^$/d; s/.*/"&"/' | paste -sd, -)
		if [ -n "$allowed_nets" ]; then
			echo "WARNING: the registries resolve to reserved addresses on this host; this demo's kernel allows exactly $(echo $site_nets) in egress.allowed_nets" >&2
		else
			echo "no registry resolves to a reserved address here: egress.allowed_nets stays empty (public unicast only)"
		fi
	fi
else
	echo "demo: the launcher has no agents rootfs (install.sh skips it without npm): the Codex episode is skipped" >&2
fi
# autonomic run signs with the operator's key under its own id (operator-<first 4 bytes of SHA-256>).
operator_id=operator-$(base64 -d "$demo/policy.pub" | sha256sum | cut -c1-8)

cat >"$cfg.new" <<JSON
{
  "state_dir": "/var/lib/autonomic",
  "store": {"url": "", "database": "autonomic"},
  "domain": {"backend": "linux", "launcher_path": "/usr/local/libexec/autonomic-launcher", "direct": false,
             "workspaces_root": "/var/lib/autonomic/workspaces", "sockets_root": "/var/lib/autonomic/sockets",
             "cgroup_parent": "/autonomic"},
  "sensor": {"kind": "openai_compatible", "endpoint": "$model", "model": "fixture-model-1",
             "allowed_models": ["fixture-model-1"], "timeout_ms": 5000},
  "targets": {"git_commit": {"calc": {"repo": "$demo/calc.git",
             "allowed_refs": ["refs/heads/agent/normal", "refs/heads/agent/hostile", "refs/heads/agent/codex"],
             "allowed_paths": ["src/**", "README.md", "Makefile"], "forbidden_paths": [".env", "config/**", "tests/**"],
             "verify_argv": ["make", "test"], "class": 3}}},
  "automatic_verification": true,
  "max_repairs": 1,
  "episode": {"checkpoints_dir": "/var/lib/autonomic-launcher/checkpoints"},
  "policy_keys": {"demo": "$(cat "$demo/policy.pub")", "$operator_id": "$(cat "$demo/policy.pub")"},
  "inference": {"providers": {"fixture-responses": {"wire_api": "responses", "upstream": "${agents:-http://127.0.0.1:9}",
             "models": ["gpt-5.5"], "prices": {"gpt-5.5": {"input_micro_usd_per_mtok": 1250000, "output_micro_usd_per_mtok": 10000000}}}}},
  "egress": {"allowed_nets": [$allowed_nets]},
  "regulator": {"start_level": "observe", "recover_after": 3, "recover_for_ms": 1000, "health_interval_ms": 250},
  "api": {"socket": "/var/lib/autonomic/api.sock"}
}
JSON
chown root:autonomic "$cfg.new"
chmod 0640 "$cfg.new"
mv "$cfg.new" "$cfg"
echo "kernel configuration: $cfg"

say "autonomic serve, as user autonomic (managed PostgreSQL under /var/lib/autonomic/pg)"
spawn_as_service autonomic serve --config "$cfg" >>"$demo/serve.log" 2>&1 &
serve=$!
pids+=("$serve")
for _ in $(seq 600); do
	as_kernel autonomic episode list --config "$cfg" --limit 1 >/dev/null 2>&1 && break
	kill -0 "$serve" 2>/dev/null || { tail -n 20 "$demo/serve.log"; exit 1; }
	sleep 0.2
done
as_kernel autonomic preflight --config "$cfg" | sed -n '1,12p'

say "The normal and the hostile episode, through the kernel's API"
run="$demo/runs/$(date -u +%Y%m%dT%H%M%SZ).json"
as_kernel autonomic-scenario run --config "$cfg" --repo "$demo/calc.git" --key "$demo/policy.pem" --key-id demo \
	--model "$model" --out "$run"

if [ -n "$agents" ]; then
	say "The main job: autonomic run — the real Codex CLI fixes the reference repository through the relay"
	# Codex starts from refs/heads/agent/codex, reset each demo to the seeded
	# base (offline) or to it plus one commit (scripts/demo/deps): a Node test that needs
	# is-number from the npm registry. Its tests run in Codex's domain and
	# again in the verification domain, each fetching through its own egress
	# proxy (the second normally from the host's cache).
	if [ -z "$offline" ]; then
		deps=$(as_kernel mktemp -d)
		as_kernel git clone -q "$demo/calc.git" "$deps/w"
		as_kernel cp -r scripts/demo/deps/. "$deps/w/"
		fixed_git() { as_kernel env GIT_AUTHOR_DATE=2026-01-02T00:00:00Z GIT_COMMITTER_DATE=2026-01-02T00:00:00Z git -C "$deps/w" \
			-c user.name="Autonomic fixture" -c user.email=fixture@autonomic.invalid -c core.hooksPath=/dev/null "$@"; }
		fixed_git add -A
		fixed_git commit -q --no-verify -m "tests: a Node test whose dependency (is-number 7.0.0) comes from the npm registry"
		codex_base=$(as_kernel git -C "$deps/w" rev-parse HEAD)
		as_kernel git -C "$deps/w" push -q "$demo/calc.git" "$codex_base:refs/heads/agent/codex" --force
		rm -rf "$deps"
		echo "refs/heads/agent/codex at $codex_base: main + package.json, package-lock.json, tests/calc.test.js, Makefile"
	else
		codex_base=$(as_kernel git -C "$demo/calc.git" rev-parse refs/heads/main)
		as_kernel git -C "$demo/calc.git" update-ref refs/heads/agent/codex "$codex_base"
		echo "refs/heads/agent/codex at $codex_base: main, as seeded (offline: no registry)"
	fi
	main_start=$(date +%s)
	run_log=$(mktemp)
	as_kernel autonomic run --config "$cfg" --key "$demo/policy.pem" --repo "$demo/calc.git" --agent codex \
		"Fix the failing test: src/calc.sh adds one too many. Do not change the tests." | tee "$run_log"
	as_kernel git -C "$demo/calc.git" --no-pager show --stat --format='%h %s%n%n%b' refs/heads/agent/codex
	episode=$(sed -n 's/^episode \([0-9a-f-]\{36\}\):.*/\1/p' "$run_log" | head -n 1)
	rm -f "$run_log"
	# Landed: the ref moved from its base by one commit that carries a committed effect's trailer.
	head=$(as_kernel git -C "$demo/calc.git" rev-parse refs/heads/agent/codex)
	[ "$head" != "$codex_base" ] && [ "$(as_kernel git -C "$demo/calc.git" rev-parse "$head^")" = "$codex_base" ] &&
		as_kernel git -C "$demo/calc.git" log -1 --format=%B "$head" | grep -q '^Autonomic-Effect: ' ||
		{ echo "the main job did not land a commit on refs/heads/agent/codex"; exit 1; }
	echo "main job: landed $head on refs/heads/agent/codex (episode $episode, $(($(date +%s) - main_start)) s)"
	if [ -z "$offline" ]; then
		say "Its dependency fetches, from the ledger (the worker's, then the verification's)"
		fetches=$(as_kernel autonomic events egress "$episode" --config "$cfg")
		echo "$fetches"
		grep -q 'registry.npmjs.org/is-number/-/is-number-7.0.0.tgz  200 ' <<<"$fetches" ||
			{ echo "the ledger has no fetch of the test's dependency"; exit 1; }
		# npm reached the registry over HTTPS: the tunnel was terminated with
		# the episode's CA, and the tarball above is the request read inside it.
		grep -q 'CONNECT registry.npmjs.org  200 ' <<<"$fetches" ||
			{ echo "the dependency did not come through a terminated tunnel"; exit 1; }
	fi
fi

say "Where to look"
echo "this run, each episode's timeline, checks and full ledger (JSON): $run"
echo "kernel log:        $demo/serve.log"
echo "a ledger, live:    sudo -u autonomic autonomic events tail EPISODE_ID -n 1000 --config $cfg"
echo "verify it:         sudo -u autonomic autonomic events verify EPISODE_ID --config $cfg"
echo "an effect:         sudo -u autonomic autonomic effect show EFFECT_ID --config $cfg"
report=artifacts/conformance_report.json
if [ -f "$report" ]; then
	echo "conformance report: $(pwd)/$report (written by make test / scripts/qc)"
else
	echo "conformance report: not yet written here; 'make test' (or scripts/qc --handoff) writes $(pwd)/$report"
fi
say "Demo complete"
