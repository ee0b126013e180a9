package verify

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/store"
)

// noDomains fails any test that reaches a domain: these cases must be
// denied before one is created.
type noDomains struct {
	domain.ExecutionDomain
	t *testing.T
}

func (n noDomains) Create(context.Context, domain.Spec) (*domain.Running, error) {
	n.t.Fatal("a domain was created for an effect that should have been denied first")
	return nil, nil
}

func repo(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=f", "GIT_AUTHOR_EMAIL=f@x.invalid", "GIT_COMMITTER_NAME=f",
			"GIT_COMMITTER_EMAIL=f@x.invalid", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644)
	run("add", ".")
	run("commit", "-q", "-m", "base")
	return dir, run("rev-parse", "HEAD")
}

// TestDeniedBeforeAnyDomain: what is wrong with the effect itself is a
// deny verdict with its reason, reached without creating a domain, and
// leaves no workspace behind.
func TestDeniedBeforeAnyDomain(t *testing.T) {
	dir, base := repo(t)
	root := t.TempDir()
	r := &Runner{Domains: noDomains{t: t}, WorkspacesRoot: root, OwnerUID: os.Geteuid(), OwnerGID: os.Getegid(),
		Targets: map[string]Target{"repo": {Repo: dir, Argv: []string{"/bin/true"}}, "noargv": {Repo: dir}}}
	target := func(base string) json.RawMessage {
		return json.RawMessage(`{"base_oid":"` + base + `","ref":"refs/heads/main","message":"m"}`)
	}
	other := strings.Repeat("e", 40)
	good := "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n"
	for _, c := range []struct {
		name, kind, target string
		tgt                json.RawMessage
		patch              string
		reason             string
	}{
		{"kind", "http_mutation", "repo", target(base), good, "no verification for kind"},
		{"unknown target", "git_commit", "nope", target(base), good, "no verify_argv"},
		{"no argv", "git_commit", "noargv", target(base), good, "no verify_argv"},
		{"bad base", "git_commit", "repo", target("HEAD"), good, "no valid base_oid"},
		{"missing base", "git_commit", "repo", target(other), good, "base is not a commit"},
		{"empty patch", "git_commit", "repo", target(base), "", "empty patch"},
		{"patch does not apply", "git_commit", "repo", target(base), strings.ReplaceAll(good, "-one", "-three"), "does not apply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := store.Effect{ID: uuid.New(), Revision: 3, Epoch: 2, Kind: c.kind, TargetID: c.target, Target: c.tgt}
			verdict, body, err := r.Verify(context.Background(), e, []byte(c.patch))
			if err != nil {
				t.Fatal(err)
			}
			var b Body
			if err := json.Unmarshal(body, &b); err != nil {
				t.Fatal(err)
			}
			if verdict != store.VerdictDeny || !strings.Contains(b.Reason, c.reason) || b.EffectID != e.ID || b.Revision != 3 || b.Epoch != 2 {
				t.Fatalf("verdict %q body %+v", verdict, b)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Fatalf("left %d entries in the workspaces root", len(ents))
			}
		})
	}
}
