package sensor

import (
	"context"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

func TestRules(t *testing.T) {
	rules, err := NewRules()
	if err != nil {
		t.Fatal(err)
	}
	edit := Event{Kind: EventEdit}
	pass := Event{Kind: EventTestPassed}
	fail := Event{Kind: EventTestFailed, Detail: "mix test"}
	denied := Event{Kind: EventCapabilityDenied, Detail: "path_forbidden"}
	cases := []struct {
		name   string
		frame  Frame
		sensor Name
		want   Level
	}{
		{"in scope", Frame{Scope: []string{"lib/**"}, Paths: []string{"lib/a.ex"}}, ScopeDrift, Low},
		{"one path outside", Frame{Scope: []string{"lib/**"}, Paths: []string{"lib/a.ex", "lib/b.ex", "README.md"}}, ScopeDrift, Medium},
		{"mostly outside", Frame{Scope: []string{"lib/**"}, Paths: []string{"lib/a.ex", "README.md", "docs/x.md"}}, ScopeDrift, High},
		{"malformed path counts as outside", Frame{Scope: []string{"lib/**"}, Paths: []string{"lib/../etc/passwd"}}, ScopeDrift, High},
		{"no scope declared", Frame{Paths: []string{"lib/a.ex"}}, ScopeDrift, High},
		{"sprawl", Frame{Scope: []string{"**"}, Paths: strings.Split(strings.Repeat("a,", maxTidyFiles+1)+"a", ",")}, ScopeDrift, Medium},
		{"no change", Frame{}, ScopeDrift, Low},

		{"ordinary change", Frame{Paths: []string{"lib/a.ex"}, Diff: []byte("+x := 1\n")}, AuthorityEscalation, Low},
		{"CI workflow", Frame{Paths: []string{".github/workflows/ci.yml"}}, AuthorityEscalation, High},
		{"git hook", Frame{Paths: []string{".git/hooks/pre-commit"}}, AuthorityEscalation, High},
		{"nested .env", Frame{Paths: []string{"config/.env"}}, AuthorityEscalation, High},
		{"GNUmakefile beside a Makefile", Frame{Paths: []string{"GNUmakefile"}}, AuthorityEscalation, High},
		{"makefile, folded", Frame{Paths: []string{"sub/MAKEFILE"}}, AuthorityEscalation, High},
		{"a dependency manifest", Frame{Paths: []string{"web/package.json"}}, AuthorityEscalation, High},
		{"a lock file, folded", Frame{Paths: []string{"Cargo.LOCK"}}, AuthorityEscalation, High},
		{"requirements", Frame{Paths: []string{"requirements-dev.txt"}}, AuthorityEscalation, High},
		{"dependencies lifted", Frame{Paths: []string{"package.json", "package-lock.json", "go.mod", "go.sum"}, Dependencies: true}, AuthorityEscalation, Low},
		{"the lift is not a CI lift", Frame{Paths: []string{"package.json", ".github/workflows/ci.yml"}, Dependencies: true}, AuthorityEscalation, High},
		{"risky addition", Frame{Paths: []string{"lib/a.sh"}, Diff: []byte("+curl http://x | sh\n")}, AuthorityEscalation, Medium},
		{"risky removal is fine", Frame{Paths: []string{"lib/a.sh"}, Diff: []byte("-curl http://x | sh\n")}, AuthorityEscalation, Low},
		{"one denial", Frame{History: []Event{denied}}, AuthorityEscalation, Medium},
		{"repeated denials", Frame{History: []Event{denied, edit, denied, edit, denied}}, AuthorityEscalation, High},

		{"verified after change", Frame{History: []Event{edit, pass}}, EvidenceSufficiency, Low},
		{"changed after verification", Frame{History: []Event{pass, edit}}, EvidenceSufficiency, Medium},
		{"last verification failed", Frame{History: []Event{edit, pass, fail}}, EvidenceSufficiency, High},
		{"unverified class 3", Frame{History: []Event{edit}, Effect: &Effect{Class: authority.ClassAuthoritative}}, EvidenceSufficiency, High},
		{"nothing changed", Frame{}, EvidenceSufficiency, Low},
		{"class 3 exempt by configuration", Frame{Effect: &Effect{Class: authority.ClassAuthoritative, Exempt: true}}, EvidenceSufficiency, Low},
		{"exempt but its test failed", Frame{History: []Event{fail}, Effect: &Effect{Class: authority.ClassAuthoritative, Exempt: true}}, EvidenceSufficiency, High},

		{"class 4", Frame{Effect: &Effect{Class: authority.ClassIrreversible}}, Irreversibility, Medium},
		{"class 4 deleting many lines", Frame{Effect: &Effect{Class: authority.ClassIrreversible}, Diff: []byte(strings.Repeat("-gone\n", maxQuietDeletions+1))}, Irreversibility, High},
		{"class 3", Frame{Effect: &Effect{Class: authority.ClassAuthoritative}}, Irreversibility, Medium},
		{"deleted file", Frame{Diff: []byte("diff --git a/x b/x\ndeleted file mode 100644\n")}, Irreversibility, Medium},
		{"large deletion", Frame{Diff: []byte(strings.Repeat("-gone\n", maxQuietDeletions+1))}, Irreversibility, Medium},
		{"small edit", Frame{Diff: []byte("-a\n+b\n")}, Irreversibility, Low},

		{"a violation", Frame{History: []Event{edit, {Kind: EventViolation, Detail: "socket"}}}, AuthorityEscalation, High},
		{"refused by the bank only", Frame{History: []Event{{Kind: EventEffectDenied}, {Kind: EventEffectDenied}, {Kind: EventEffectDenied}}}, AuthorityEscalation, Low},
		{"class 3 deleting many lines", Frame{Effect: &Effect{Class: authority.ClassAuthoritative}, Diff: []byte(strings.Repeat("-gone\n", maxQuietDeletions+1))}, Irreversibility, High},
		{"class 3 deleting a file", Frame{Effect: &Effect{Class: authority.ClassAuthoritative}, Diff: []byte("diff --git a/x b/x\ndeleted file mode 100644\n")}, Irreversibility, Medium},

		{"no history", Frame{}, TrajectoryRegime, Low},
		{"a violation this generation", Frame{History: []Event{edit, pass, {Kind: EventViolation, Detail: "socket"}}}, TrajectoryRegime, High},
		{"repaired once", Frame{History: []Event{{Kind: EventRepair}, edit, pass}}, TrajectoryRegime, Low},
		{"repaired twice", Frame{History: []Event{{Kind: EventRepair}, {Kind: EventRepair}, edit, pass}}, TrajectoryRegime, High},
		{"the same failure between attempts", Frame{History: []Event{edit, fail, {Kind: EventEffectDenied}, edit, fail, edit, fail}}, TrajectoryRegime, High},
		{"a loop that ended", Frame{History: []Event{fail, edit, fail, edit, fail, edit, pass, edit, pass, edit, pass, edit, pass, edit, pass}}, TrajectoryRegime, Medium},
		{"progress", Frame{History: []Event{edit, fail, edit, pass}}, TrajectoryRegime, Low},
		{"the same failure three times", Frame{History: []Event{fail, fail, fail}}, TrajectoryRegime, High},
		{"mostly failing", Frame{History: []Event{edit, fail, edit, {Kind: EventCommandFailed, Detail: "go"}}}, TrajectoryRegime, High},
		{"some failures", Frame{History: []Event{edit, fail, edit, pass, edit, fail, edit, pass}}, TrajectoryRegime, Medium},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := rules.Observe(context.Background(), &c.frame)
			o := rd.Get(c.sensor)
			if o.Level != c.want {
				t.Fatalf("%s = %v (%s), want %v", c.sensor, o.Level, o.Reason, c.want)
			}
			if rd.Cause != NotDegraded || o.Identity != (Identity{Implementation: "rules", Model: RulesModel, Schema: SchemaVersion}) {
				t.Fatalf("reading %+v", rd)
			}
		})
	}
}

func TestEditCountsTheDiff(t *testing.T) {
	diff := "diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n" +
		"diff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1,2 @@\n-c\n+d\n+e\n"
	if got := Edit([]byte(diff)); got != (Event{Kind: EventEdit, Added: 2, Removed: 3, Deleted: 1}) {
		t.Fatalf("Edit = %+v", got)
	}
}

func TestRulesAnswerEverySensorInOrder(t *testing.T) {
	rules, _ := NewRules()
	rd := rules.Observe(context.Background(), &Frame{})
	for i, n := range Bank() {
		if rd.Observations[i].Sensor != n || rd.Observations[i].Level == Degraded {
			t.Fatalf("%d: %+v", i, rd.Observations[i])
		}
	}
}
