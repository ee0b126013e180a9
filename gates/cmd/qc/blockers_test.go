package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestReleaseBlockers: a dirty tree, a missing record of what ran and each
// limit the host does not enforce each block release_ready, by name.
func TestReleaseBlockers(t *testing.T) {
	clean := report{Commit: "abc", Host: hostFacts{Limits: []protocol.Limit{{Name: "pids", Enforced: true}}}}
	if b := blockers(clean); len(b) != 0 {
		t.Fatalf("a clean, enforced run is blocked: %v", b)
	}
	dirty := clean
	dirty.SourceDirty = true
	missing := clean
	missing.Host = host(filepath.Join(t.TempDir(), "built.json"))
	for _, c := range []struct {
		name string
		r    report
		want string
	}{
		{"dirty", dirty, "source_dirty"},
		{"no commit", report{}, "no git commit"},
		{"no record", missing, "no record of what the gates built"},
		{"not enforced", report{Commit: "abc", Host: hostFacts{NotEnforced: []string{"memory_bytes: no controller"}}}, "memory_bytes"},
	} {
		b := blockers(c.r)
		if !slices.ContainsFunc(b, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%s: blockers %v, want one naming %q", c.name, b, c.want)
		}
	}
}
