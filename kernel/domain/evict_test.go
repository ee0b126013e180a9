package domain_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// TestEvictKeepsLiveDomainRootfs: a rootfs cache entry that a live domain
// runs on is kept by the builder's eviction though nothing names it and
// keep is 0 (the launcher's root mount shows in the domain's mountinfo),
// and is evicted once the domain is destroyed.
func TestEvictKeepsLiveDomainRootfs(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	cache := t.TempDir()
	spec, err := rootfs.LoadSpec("../../rootfs-builder/specs/minimal.json")
	if err != nil {
		t.Fatal(err)
	}
	dir, digest, _, err := rootfs.BuildCached(ctx, spec, cache, rootfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cache, 0o755); err != nil { // the domain's root must traverse it
		t.Fatal(err)
	}
	name := newID("rootfs")
	if err := bed.NameRootfs(name, dir, digest); err != nil {
		t.Fatal(err)
	}
	// The bed is shared: leave no missing rootfs in its preflight.
	t.Cleanup(func() { bed.NameRootfs(name, bed.Rootfs, bed.RootfsDigest) })
	id := newID("d")
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Rootfs: name, Argv: []string{"/bin/sh", "-c", "sleep 600"}})
	if err != nil {
		t.Fatalf("create on %s: %v", dir, err)
	}
	defer r.Close()
	res, err := rootfs.Evict(cache, rootfs.EvictOptions{})
	if err != nil || len(res.Evicted) != 0 || res.Kept[dir] != "mounted" {
		t.Fatalf("evict with a live domain on %s: %v %+v", dir, err, res)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err = rootfs.Evict(cache, rootfs.EvictOptions{})
	if err != nil || len(res.Evicted) != 1 || res.Evicted[0] != dir || !strings.HasPrefix(dir, cache+string(filepath.Separator)) {
		t.Fatalf("evict after destroy: %v %+v", err, res)
	}
	// Later creates naming it now get the catalogue's fix, not a crash.
	if _, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, Rootfs: name, Argv: []string{"/bin/true"}, OneShot: true}); err == nil || !strings.Contains(err.Error(), "rootfs_missing") {
		t.Fatalf("create on an evicted rootfs: %v, want rootfs_missing", err)
	}
}
