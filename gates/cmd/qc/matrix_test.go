package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/hosts"
	"github.com/autonomic-kernel/autonomic/internal/source"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestMatrixSection: release_ready's host condition holds only when every
// guest of the matrix is in hosts.json and passed with no gate failed.
func TestMatrixSection(t *testing.T) {
	here := hostFacts{Kernel: "6.18.0", Limits: []protocol.Limit{{Name: "pids", Reason: "hybrid"}}}
	gs := []gateResult{{Name: "overlay_rollback", Status: "passed"}}
	write := func(m hosts.Matrix) string {
		p := filepath.Join(t.TempDir(), "hosts.json")
		b, _ := json.Marshal(m)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tree := source.Tree{Commit: "c1", SHA256: "s1"}
	good := hosts.Host{Name: hosts.Guests[0].Name, Kernel: "6.1.0-57-amd64", Passed: true,
		Gates: []hosts.Gate{{Name: "overlay_rollback", Status: "passed"}}}
	out, ok := matrix(here, gs, write(hosts.Matrix{Tree: tree, Hosts: []hosts.Host{good}}), tree)
	if !ok || len(out) != 2 || out[0].Name != "this-machine" || out[0].Kernel != "6.18.0" || out[0].Limits[0].Enforced || out[1].Kernel != "6.1.0-57-amd64" {
		t.Fatalf("a passing guest: ok=%v %+v", ok, out)
	}
	if _, ok := matrix(here, gs, filepath.Join(t.TempDir(), "missing.json"), tree); ok {
		t.Error("no hosts.json, yet the matrix is ok")
	}
	if _, ok := matrix(here, gs, write(hosts.Matrix{Tree: tree, Hosts: []hosts.Host{{Name: "another", Passed: true}}}), tree); ok {
		t.Error("the guest missing from hosts.json, yet the matrix is ok")
	}
	// The matrix of another tree says nothing of this one.
	for _, other := range []source.Tree{{Commit: "c0", SHA256: "s1"}, {Commit: "c1", SHA256: "s0"}, {Commit: "c1", SHA256: "s1", Dirty: true}, {}} {
		if _, ok := matrix(here, gs, write(hosts.Matrix{Tree: other, Hosts: []hosts.Host{good}}), tree); ok {
			t.Errorf("hosts.json of tree %+v read as this tree's (%+v)", other, tree)
		}
	}
	if _, ok := matrix(here, gs, write(hosts.Matrix{Tree: tree, Hosts: []hosts.Host{good}}), source.Tree{Commit: "c1", SHA256: "s1", Dirty: true}); ok {
		t.Error("a dirty tree read a matrix as its own")
	}
	failed := good
	failed.Passed = false
	if _, ok := matrix(here, gs, write(hosts.Matrix{Tree: tree, Hosts: []hosts.Host{failed}}), tree); ok {
		t.Error("a failed guest, yet the matrix is ok")
	}
	gateFailed := good
	gateFailed.Gates = []hosts.Gate{{Name: "overlay_rollback", Status: "failed"}}
	if _, ok := matrix(here, gs, write(hosts.Matrix{Tree: tree, Hosts: []hosts.Host{gateFailed}}), tree); ok {
		t.Error("a gate failed in the guest, yet the matrix is ok")
	}
}
