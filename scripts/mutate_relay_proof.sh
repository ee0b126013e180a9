#!/usr/bin/env bash
# Mutation checks of the inference relay's containment proof (issue 13 §6,
# gates/relayproof): the proof must pass on this tree and FAIL, on the
# assertion the mutation targets, with each guard removed:
#
#   route     the relay's route check (kernel/relay checkRoute) admits any
#             method and path
#   key       the real provider key is placed in the worker's environment
#             (an --env of autonomic-entry, the way a spec would carry it)
#   netns     the domain shares the host's network namespace (the launcher
#             without CLONE_NEWNET): the loopback bridge is bound where the
#             host reaches it, and so are the host's listeners
#   seccomp   the agent profile lets connect, sendmsg and sendmmsg through
#             unexamined (ALLOW instead of NOTIFY): nothing refuses or
#             reports a connection to the world
#   mounts    the domain's /workspace is a host directory beyond its
#             workspace (the workspaces root's parent, where the testbed
#             keeps a host secret)
#   env       no layer scrubs the environment: the kernel starts the
#             launcher with its own environment (not PATH and LANG only),
#             and the launcher hands the worker its own as well as the
#             spec's allowlisted keys. Either layer alone still holds the
#             proof; both are removed to show the proof sees a leak.
#   models    the relay's model allowlist admits any model
#   headers   the relay forwards every header the worker sent, not its
#             short list
#   egress    the egress proxy's allow list admits any host
#
# Each run copies the working tree (without .git) to a temporary directory,
# applies one small edit there, checks the edit took, and runs the proof in
# the copy. Production code never carries a mutation. Root only (the proof
# makes real domains); ~30 s a run once the agents rootfs is cached.
#
#   scripts/mutate_relay_proof.sh [route|key|netns|seccomp|mounts|env|models|headers|egress|baseline]...   (default: all)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="$PATH:/usr/local/go/bin"
if [ "$(id -u)" -ne 0 ]; then
	echo "mutate_relay_proof: needs root (the proof makes real domains)" >&2
	exit 2
fi

test_re='^TestContainmentProof$/^codex$'
work=$(mktemp -d /tmp/autonomic-mutate-XXXXXX)
trap 'rm -rf "$work"' EXIT

# mutate NAME: apply NAME's edit in the current directory; print the
# assertion its failure must show.
mutate() {
	case "$1" in
	baseline) echo "" ;;
	route)
		sed -i '/^func checkRoute(/a\	if p, q, _ := strings.Cut(requestURI, "?"); true { // MUTATION: no route check\n\t\treturn p, q, nil\n\t}' kernel/relay/admit.go
		grep -q 'MUTATION: no route check' kernel/relay/admit.go
		echo "is not the inference route"
		;;
	key)
		sed -i 's|^\textraEnv := \[\]string(nil)$|\textraEnv := []string{"--env", "OPENAI_API_KEY=" + realKey.value} // MUTATION: key in the worker|' gates/relayproof/proof_test.go
		grep -q 'MUTATION: key in the worker' gates/relayproof/proof_test.go
		echo "the real provider key is visible inside the domain"
		;;
	netns)
		sed -i 's/unix.CLONE_NEWPID | unix.CLONE_NEWNET |/unix.CLONE_NEWPID | \/* MUTATION: host netns *\//' launcher/create.go
		grep -q 'MUTATION: host netns' launcher/create.go
		echo "reached the domain's inference bridge"
		;;
	seccomp)
		python3 - <<'PY'
import json
p = 'seccomp/profiles/agent.json'
d = json.load(open(p))
n = 0
for r in d['syscalls']:
    if r['names'] == ['connect', 'sendmsg', 'sendmmsg'] and r['action'] == 'SCMP_ACT_NOTIFY':
        r['action'] = 'SCMP_ACT_ALLOW'; r['comment'] = 'MUTATION: connect unexamined'; n += 1
assert n == 1, n
json.dump(d, open(p, 'w'), indent=2)
PY
		grep -q 'MUTATION: connect unexamined' seccomp/profiles/agent.json
		echo "refused by the agent profile"
		;;
	mounts)
		sed -i '/^func (l \*launcher) openWorkspace(/a\	if fd, err := unix.Open(l.cfg.WorkspacesRoot+"/..", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); true { // MUTATION: a host directory as the workspace\n\t\treturn fd, err\n\t}' launcher/resolve.go
		grep -q 'MUTATION: a host directory as the workspace' launcher/resolve.go
		echo "the host file is visible inside the domain"
		;;
	env)
		sed -i 's|^\tenv, err := l.cfg.WorkerEnv(r.Env, domainroot.WorkerHome)$|\tenv, err := l.cfg.WorkerEnv(r.Env, domainroot.WorkerHome)\n\tenv = append(env, os.Environ()...) // MUTATION: no scrubbing|' launcher/create.go
		grep -q 'MUTATION: no scrubbing' launcher/create.go
		sed -i 's|^\tcmd.Env = \[\]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}$|\tcmd.Env = os.Environ() // MUTATION: the kernel'"'"'s environment|' kernel/domain/linux.go
		grep -q 'MUTATION: the kernel' kernel/domain/linux.go
		grep -q '^	"os"$' kernel/domain/linux.go || sed -i '0,/^import (/s//import (\n\t"os"/' kernel/domain/linux.go
		echo "the kernel environment is visible inside the domain"
		;;
	models)
		sed -i 's/json.Unmarshal(raw, \&c.model) != nil || !ru.models\[c.model\] {/json.Unmarshal(raw, \&c.model) != nil || false \&\& !ru.models[c.model] { \/\/ MUTATION: any model/' kernel/relay/admit.go
		grep -q 'MUTATION: any model' kernel/relay/admit.go
		echo "a model outside the policy was not refused"
		;;
	headers)
		sed -i 's/^\tfor _, h := range forwardHeaders {$/\tfor h := range req.Header { \/\/ MUTATION: every header/' kernel/relay/relay.go
		grep -q 'MUTATION: every header' kernel/relay/relay.go
		echo "carried the worker's header"
		;;
	egress)
		sed -i 's/^\treturn policy.ValidHost(host) \&\& allow\[host\]$/\treturn policy.ValidHost(host) \/\/ MUTATION: any host/' kernel/egress/admit.go
		grep -q 'MUTATION: any host' kernel/egress/admit.go
		echo "egress proxy did not refuse"
		;;
	*)
		echo "unknown mutation $1" >&2
		return 2
		;;
	esac
}

status=0
for m in "${@:-baseline route key netns seccomp mounts env models headers egress}"; do
	for name in $m; do
		dir="$work/$name"
		mkdir -p "$dir"
		# Tests running beside this one write artifacts/ (excluded), which
		# changes the root directory as tar reads it: GNU tar's exit 1
		# ("file changed as we read it") is no failed copy; 2 is.
		{ tar -C "$root" --exclude=.git --exclude=artifacts --warning=no-file-changed -cf - . || [ $? -eq 1 ]; } | tar -C "$dir" -xf -
		want=$(cd "$dir" && mutate "$name") || { echo "== $name: the mutation did not apply" >&2; status=1; continue; }
		echo "== $name: go test -run '$test_re' ./gates/relayproof/ in a mutated copy"
		set +e
		(cd "$dir" && go test -count=1 -p 1 -run "$test_re" ./gates/relayproof/) >"$work/$name.log" 2>&1
		rc=$?
		set -e
		# The assertions that failed (t.Errorf/t.Fatalf lines), shortened:
		# the targeted one first.
		if [ -n "$want" ]; then grep -F "$want" "$work/$name.log" | cut -c1-220 | head -4 || true; fi
		grep -E '^\s+proof_test\.go:[0-9]+: ' "$work/$name.log" | grep -v ' exited ' | cut -c1-220 | head -8 || true
		tail -1 "$work/$name.log"
		if [ "$name" = baseline ]; then
			if [ $rc -ne 0 ]; then
				echo "== baseline: FAILED; the proof must pass unmutated" >&2
				tail -40 "$work/$name.log" >&2
				status=1
			else
				echo "== baseline: passes"
			fi
		elif [ $rc -eq 0 ]; then
			echo "== $name: the proof PASSED with the mutation: it proves nothing about this guard" >&2
			status=1
		elif ! grep -qF "$want" "$work/$name.log"; then
			echo "== $name: the proof failed, but not on \"$want\"" >&2
			tail -40 "$work/$name.log" >&2
			status=1
		else
			echo "== $name: fails as it must (\"$want\")"
		fi
	done
done
exit $status
