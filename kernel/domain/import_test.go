package domain_test

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestImportsDirIsTheLaunchers: the kernel writes an import where the
// launcher reads it. The launcher imports no kernel package, so its
// constant is read from its source.
func TestImportsDirIsTheLaunchers(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../launcher/import.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Names) == 1 && v.Names[0].Name == "importsDir" && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok {
				got, _ = strconv.Unquote(lit.Value)
			}
		}
		return true
	})
	if got != domain.ImportsDir {
		t.Fatalf("launcher reads imports from %q, the kernel writes them to %q", got, domain.ImportsDir)
	}
	if p := domain.ImportPath("/w", strings.Repeat("ab", 32)); p != "/w/imports/"+strings.Repeat("ab", 32)+".tar" {
		t.Fatalf("ImportPath = %s", p)
	}
}

// TestUnsafeLocalCannotImport: no checkpoint store, nothing to import into.
func TestUnsafeLocalCannotImport(t *testing.T) {
	_, err := (&domain.UnsafeLocal{WorkspacesRoot: t.TempDir()}).Import(context.Background(), "d", strings.Repeat("ab", 32))
	if !errors.Is(err, protocol.E(protocol.CodeLauncherFailed)) {
		t.Fatalf("UnsafeLocal import: %v", err)
	}
}

// TestImportRestores: an archive this host no longer has (checkpointed,
// then released, as on a host that never made it), written by the
// kernel's account to ImportPath and imported under another domain id, is
// stored and held, and a create restores it exactly as a local one. The
// launcher leaves the kernel's file as it was.
func TestImportRestores(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	content := []byte("imported " + newID("c") + "\n")
	id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	plantFile(t, d, ctx, id, "f", content)
	cp, err := d.Checkpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	digest := cp.SHA256
	archive, err := os.ReadFile(filepath.Join(bed.State, "checkpoints", digest+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	if res, err := d.Release(ctx, id, digest); err != nil || !res.Deleted || archived(digest) {
		t.Fatalf("release: %+v %v", res, err)
	}

	p := domain.ImportPath(bed.Workspaces, digest)
	if err := os.Mkdir(filepath.Dir(p), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(p)) })
	if err := os.WriteFile(p, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{filepath.Dir(p), p} {
		if err := os.Chown(q, bed.OwnerUID, bed.OwnerGID); err != nil {
			t.Fatal(err)
		}
	}
	holder := newID("im")
	res, err := d.Import(ctx, holder, digest)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if res.DomainID != holder || res.SHA256 != digest || res.Bytes != int64(len(archive)) || res.Entries != 0 {
		t.Fatalf("import answered %+v", res)
	}
	if !archived(digest) {
		t.Fatal("imported archive not in the store")
	}
	if _, err := os.Stat(filepath.Join(bed.State, "holds", holder, digest)); err != nil {
		t.Fatalf("no hold for %s: %v", holder, err)
	}
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, archive) {
		t.Fatalf("the kernel's import file changed: %v", err)
	}

	run, err := d.Create(ctx, domain.Spec{ID: holder, Generation: 1, WorkspaceID: ws, Checkpoint: digest,
		Argv: []string{"/bin/sh", "-c", "cat /workspace/f"}, OneShot: true})
	if err != nil {
		t.Fatalf("create from the imported checkpoint: %v", err)
	}
	ex, err := run.Wait()
	if err != nil || ex.ExitCode == nil || *ex.ExitCode != 0 || run.Started.Restored != digest {
		t.Fatalf("restored worker: %+v %v (restored %q)\n%s", ex, err, run.Started.Restored, run.Output())
	}
	if !bytes.Equal(run.Output(), content) {
		t.Fatalf("restored /workspace/f = %q, want %q", run.Output(), content)
	}
	if res, err := d.Release(ctx, holder, digest); err != nil || !res.Deleted {
		t.Fatalf("release of the import: %+v %v", res, err)
	}
	assertNoTrace(t, holder)
}
