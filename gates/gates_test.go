package gates

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// runGate runs the gate's tests, each package once, and requires every
// named test to have run and passed: a test that skipped, or that no longer
// exists, fails the gate.
func runGate(t *testing.T, name string) {
	t.Helper()
	privileged.Require(t)
	var g *Gate
	for _, x := range Table() {
		if x.Name == name {
			g = &x
		}
	}
	if g == nil {
		t.Fatalf("no gate %q", name)
	}
	if len(g.Tests) == 0 {
		t.Fatalf("gate %s has no test yet", name)
	}
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range g.Tests {
		cmd := exec.Command("go", "test", "-count=1", "-v", "-timeout", "15m", "-run", "^("+strings.Join(r.Tests, "|")+")$", r.Package)
		cmd.Dir = mod
		out, err := cmd.CombinedOutput()
		for _, tn := range r.Tests {
			if !regexp.MustCompile(`(?m)^--- PASS: ` + tn + ` `).Match(out) {
				t.Errorf("%s %s did not pass", r.Package, tn)
			}
		}
		if err != nil || t.Failed() {
			t.Fatalf("%s: %v\n%s", r.Package, err, tail(out, 60))
		}
		// The whole transcript is the gate's evidence; qc hashes it.
		t.Logf("%s: %s passed; transcript:\n%s", r.Package, strings.Join(r.Tests, ", "), out)
	}
	if g.Scope != "" {
		t.Logf("scope: %s", g.Scope)
	}
}

// tail is the last n lines of a failed run, after every line a test
// failed on (a file:line: report, a --- FAIL): a long log printed at the end
// must not push the reason out of the gate's evidence.
func tail(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	var why []string
	for _, l := range lines {
		if FailureLine.MatchString(l) {
			why = append(why, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(append(why, lines...), "\n")
}

func TestGateTableIsComplete(t *testing.T) {
	want := []string{"linux_namespaces_cgroup_seccomp_overlay", "old_process_fork_cleanup", "overlay_rollback",
		"postgresql_epoch_commit_race", "stale_epoch_race", "broker_crash_after_external_mutation_reconciliation",
		"git_authoritative_commit_reconciliation", "db_outage_blocks_authority", "af_unix_effect_broker", "sensor_poisoning",
		"semantic_outage_degradation", "backpressure_load", "class4_human_horizon", "coding_agent_violation_repair_epoch2",
		"real_agent_inference_relay", "queue_takeover_exactly_once", "real_repositories"}
	got := Table()
	if len(got) != len(want) {
		t.Fatalf("%d gates, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.Name != want[i] {
			t.Errorf("gate %d is %s, want %s", i, g.Name, want[i])
		}
	}
}

func Test_linux_namespaces_cgroup_seccomp_overlay(t *testing.T) {
	runGate(t, "linux_namespaces_cgroup_seccomp_overlay")
}
func Test_old_process_fork_cleanup(t *testing.T)     { runGate(t, "old_process_fork_cleanup") }
func Test_overlay_rollback(t *testing.T)             { runGate(t, "overlay_rollback") }
func Test_postgresql_epoch_commit_race(t *testing.T) { runGate(t, "postgresql_epoch_commit_race") }
func Test_stale_epoch_race(t *testing.T)             { runGate(t, "stale_epoch_race") }
func Test_broker_crash_after_external_mutation_reconciliation(t *testing.T) {
	runGate(t, "broker_crash_after_external_mutation_reconciliation")
}
func Test_git_authoritative_commit_reconciliation(t *testing.T) {
	runGate(t, "git_authoritative_commit_reconciliation")
}
func Test_db_outage_blocks_authority(t *testing.T)  { runGate(t, "db_outage_blocks_authority") }
func Test_af_unix_effect_broker(t *testing.T)       { runGate(t, "af_unix_effect_broker") }
func Test_sensor_poisoning(t *testing.T)            { runGate(t, "sensor_poisoning") }
func Test_semantic_outage_degradation(t *testing.T) { runGate(t, "semantic_outage_degradation") }
func Test_backpressure_load(t *testing.T)           { runGate(t, "backpressure_load") }
func Test_class4_human_horizon(t *testing.T)        { runGate(t, "class4_human_horizon") }
func Test_coding_agent_violation_repair_epoch2(t *testing.T) {
	runGate(t, "coding_agent_violation_repair_epoch2")
}
func Test_real_agent_inference_relay(t *testing.T)  { runGate(t, "real_agent_inference_relay") }
func Test_queue_takeover_exactly_once(t *testing.T) { runGate(t, "queue_takeover_exactly_once") }
func Test_real_repositories(t *testing.T)           { runGate(t, "real_repositories") }
