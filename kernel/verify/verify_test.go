package verify

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
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
	run := gitIn(t, dir)
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

// TestVerifyOnUnsafeLocal: on the development backend verify_argv runs as a
// host process in the patched clone; its exit status, a timeout and its
// output decide and are recorded the same way, the clone is removed, and
// the authoritative repository is untouched.
func TestVerifyOnUnsafeLocal(t *testing.T) {
	dir, base := repo(t)
	root := t.TempDir()
	check := func(want string) []string {
		return []string{"/bin/sh", "-c", `echo checking; grep -qx "$0" a.txt`, want}
	}
	r := &Runner{Domains: &domain.UnsafeLocal{WorkspacesRoot: root}, WorkspacesRoot: root, OwnerUID: os.Geteuid(), OwnerGID: os.Getegid(),
		Targets: map[string]Target{
			"passes":  {Repo: dir, Argv: check("two")},
			"fails":   {Repo: dir, Argv: check("three")},
			"overrun": {Repo: dir, Argv: []string{"/bin/sleep", "30"}, Timeout: 200 * time.Millisecond},
		}}
	patch := []byte("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n")
	for _, c := range []struct {
		target, verdict, reason string
		exit                    int
	}{
		{"passes", store.VerdictAllow, "verify_argv passed", 0},
		{"fails", store.VerdictDeny, "verify_argv exited 1", 1},
		{"overrun", store.VerdictDeny, "verify_argv did not finish in time", -1},
	} {
		t.Run(c.target, func(t *testing.T) {
			e := store.Effect{ID: uuid.New(), Revision: 1, Epoch: 1, Kind: "git_commit", TargetID: c.target,
				Target: json.RawMessage(`{"base_oid":"` + base + `","ref":"refs/heads/main","message":"m"}`)}
			verdict, body, err := r.Verify(context.Background(), e, patch)
			if err != nil {
				t.Fatal(err)
			}
			var b Body
			if err := json.Unmarshal(body, &b); err != nil {
				t.Fatal(err)
			}
			if verdict != c.verdict || b.Reason != c.reason || b.BaseOID != base || len(b.TreeOID) != 40 {
				t.Fatalf("verdict %q body %+v", verdict, b)
			}
			switch {
			case c.exit < 0 && b.ExitCode != nil:
				t.Errorf("an overrun recorded exit %d", *b.ExitCode)
			case c.exit >= 0 && (b.ExitCode == nil || *b.ExitCode != c.exit):
				t.Errorf("exit %v, want %d", b.ExitCode, c.exit)
			case c.exit >= 0 && b.OutputBytes != len("checking\n"):
				t.Errorf("output %d bytes, want the check's line", b.OutputBytes)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Errorf("left %d entries in the workspaces root", len(ents))
			}
		})
	}
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("the authoritative repository changed: %q %v", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "one\n" {
		t.Fatalf("a.txt = %q", b)
	}
}

// gitIn runs git in dir with a fixed identity and no configuration but
// the repository's, and returns its trimmed output.
func gitIn(t *testing.T, dir string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
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
}

// TestVerifyDeniesAChangeTheLayerShadows: a change to a path the episode's
// setup layer holds (a file, or one below a directory the layer made
// opaque) is denied before any domain exists — restored over the patched
// clone, the layer's file is what the tests would see.
func TestVerifyDeniesAChangeTheLayerShadows(t *testing.T) {
	dir, base := repo(t)
	root := t.TempDir()
	r := &Runner{Domains: noDomains{t: t}, WorkspacesRoot: root, OwnerUID: os.Geteuid(), OwnerGID: os.Getegid(),
		Targets: map[string]Target{"repo": {Repo: dir, Argv: []string{"/bin/true"}}}}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX},
		{Name: "build/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX, PAXRecords: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y"}}} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	sum := sha256.Sum256(buf.Bytes())
	digest := hex.EncodeToString(sum[:])
	shadow, err := workspace.ReadShadow(bytes.NewReader(buf.Bytes()), digest, 10)
	if err != nil {
		t.Fatal(err)
	}
	layer := &Layer{Checkpoint: digest, Shadow: shadow}
	for name, patch := range map[string]string{
		"a.txt":       "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n",
		"build/out.o": "--- /dev/null\n+++ b/build/out.o\n@@ -0,0 +1 @@\n+x\n",
	} {
		e := store.Effect{ID: uuid.New(), Revision: 1, Epoch: 1, Kind: "git_commit", TargetID: "repo",
			Target: json.RawMessage(`{"base_oid":"` + base + `","ref":"refs/heads/main","message":"m"}`)}
		verdict, body, err := r.VerifyWith(context.Background(), e, []byte(patch), nil, layer)
		if err != nil {
			t.Fatal(err)
		}
		var b Body
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		if verdict != store.VerdictDeny || !strings.Contains(b.Reason, "touches "+name+", which the target's setup layer holds") {
			t.Errorf("%s: verdict %q, reason %q", name, verdict, b.Reason)
		}
	}
}
