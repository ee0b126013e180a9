// Package agentrootfs gives tests and tools the agents rootfs (the one the
// agent profiles name): built from rootfs-builder/specs/agents.json with
// autonomic-entry added, taken from the content-addressed cache when
// present.
//
// Invariant: a returned tree has been verified against its manifest in this
// call (a fresh build self-checks; a cached one is verified in full), so
// its digest stands for it.
package agentrootfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// SpecPath is the agents rootfs spec, relative to the module root.
const SpecPath = "rootfs-builder/specs/agents.json"

// EntryCommand is autonomic-entry's package, relative to the module root.
const EntryCommand = "entry/cmd/autonomic-entry"

// Build returns the agents rootfs directory and its identity from cacheDir
// ("" for rootfs.DefaultRootfsCache), building it there when absent (about
// 1.5 min and 1 GB the first time: npm fetches the agents). When the module
// has EntryCommand, it is built static and added at
// /usr/local/bin/autonomic-entry; withEntry reports whether it was.
func Build(ctx context.Context, moduleRoot, cacheDir string) (dir, digest string, withEntry bool, err error) {
	spec, err := rootfs.LoadSpec(filepath.Join(moduleRoot, SpecPath))
	if err != nil {
		return "", "", false, err
	}
	var adds []rootfs.Add
	if _, err := os.Stat(filepath.Join(moduleRoot, EntryCommand)); err == nil {
		tmp, err := os.MkdirTemp("", "autonomic-entry-")
		if err != nil {
			return "", "", false, err
		}
		defer os.RemoveAll(tmp)
		bin := filepath.Join(tmp, "autonomic-entry")
		// -trimpath: the same source gives the same bytes in any checkout,
		// so worktrees share one cache entry.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./"+EntryCommand)
		cmd.Dir, cmd.Env = moduleRoot, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", false, fmt.Errorf("building autonomic-entry: %v\n%s", err, out)
		}
		adds = append(adds, rootfs.Add{Src: bin, Dest: "/usr/local/bin/autonomic-entry"})
	}
	dir, digest, _, err = rootfs.BuildCached(ctx, spec, cacheDir, rootfs.Options{Add: adds})
	return dir, digest, len(adds) > 0, err
}
