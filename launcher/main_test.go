package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestOneActionTable: protocol's admission table and the launcher's handler
// table name the same actions, so no admitted request lacks a handler and
// no handler is reachable without an admission row.
func TestOneActionTable(t *testing.T) {
	admitted := slices.Sorted(maps.Keys(protocol.LauncherRequestSchema().Kinds))
	handled := slices.Sorted(maps.Keys(handlers()))
	if !slices.Equal(admitted, handled) {
		t.Fatalf("protocol admits %q, the launcher handles %q", admitted, handled)
	}
}
