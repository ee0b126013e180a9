package verify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestVerifierChecksCommittedBytes: the check runs on exactly the bytes
// the adapter commits. A base whose .gitattributes asks for CRLF, and a
// patch that adds its own (eol=crlf, ident), would otherwise hand the check
// converted files while the commit holds the raw blobs: the check here
// fails on a CR or an expanded $Id$.
func TestVerifierChecksCommittedBytes(t *testing.T) {
	dir := t.TempDir()
	git := gitIn(t, dir)
	git("init", "-q", "-b", "main")
	_ = os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("base.txt text eol=crlf\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "base.txt"), []byte("one\ntwo\n"), 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	patch := []byte("diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+$Id$\n+x\n" +
		"diff --git a/.gitattributes b/.gitattributes\n--- a/.gitattributes\n+++ b/.gitattributes\n@@ -1 +1,2 @@\n base.txt text eol=crlf\n+new.txt text eol=crlf ident\n")
	root := t.TempDir()
	// Fails on a CR in either file or an expanded ident.
	check := []string{"/bin/sh", "-c", `cr=$(printf '\r'); ! grep -q "$cr" base.txt new.txt && grep -qx '[$]Id[$]' new.txt`}
	r := &Runner{Domains: &domain.UnsafeLocal{WorkspacesRoot: root}, WorkspacesRoot: root, OwnerUID: os.Geteuid(), OwnerGID: os.Getegid(),
		Targets: map[string]Target{"repo": {Repo: dir, Argv: check}}}
	e := store.Effect{ID: uuid.New(), Revision: 1, Epoch: 1, Kind: "git_commit", TargetID: "repo",
		Target: json.RawMessage(`{"base_oid":"` + base + `","ref":"refs/heads/main","message":"m"}`)}
	verdict, body, err := r.Verify(context.Background(), e, patch)
	if err != nil {
		t.Fatal(err)
	}
	var b Body
	_ = json.Unmarshal(body, &b)
	if verdict != store.VerdictAllow {
		t.Fatalf("the check saw converted files: %s %+v", verdict, b)
	}
}
