package relayproof

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// TestMutationsFailTheProof runs scripts/mutate_relay_proof.sh: with the
// relay's route check removed, the real key in the worker's environment,
// the domain in the host's network namespace, the agent seccomp profile
// letting connect through unexamined, a host directory as the workspace,
// no environment scrubbing, the relay's model allowlist open, and the
// relay forwarding every header, and the egress proxy admitting any host,
// the proof (TestContainmentProof with Codex, run in a mutated copy of this
// tree) must fail on the assertion each mutation targets. ~20 s a mutation.
func TestMutationsFailTheProof(t *testing.T) {
	privileged.Require(t)
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"route", "key", "netns", "seccomp", "mounts", "env", "models", "headers", "egress"} {
		t.Run(m, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(mod, "scripts/mutate_relay_proof.sh"), m)
			cmd.Dir = mod
			out, err := cmd.CombinedOutput()
			t.Logf("%s", out)
			if err != nil || !strings.Contains(string(out), "== "+m+": fails as it must") {
				t.Errorf("mutation %s: %v", m, err)
			}
		})
	}
}
