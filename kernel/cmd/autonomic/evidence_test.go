package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/api"
)

// TestEvidenceListsTheChangeQuoted: action show's evidence of a git_commit
// names the patch's size and files, each path quoted (a worker chose it:
// no control character reaches the terminal), at most maxEvidencePaths.
func TestEvidenceListsTheChangeQuoted(t *testing.T) {
	var patch strings.Builder
	patch.WriteString("diff --git a/src/\x1b]0;owned\x07.go b/src/\x1b]0;owned\x07.go\n+x\n")
	for i := range maxEvidencePaths + 5 {
		fmt.Fprintf(&patch, "diff --git a/f%d b/f%d\n+y\n", i, i)
	}
	a := api.Action{Reason: "outside the lease", Episode: api.EpisodeView{ID: "E"}, Effect: api.EffectView{Kind: "git_commit"}}
	var out bytes.Buffer
	printEvidence(&out, a, []byte(patch.String()))
	s := out.String()
	for _, want := range []string{fmt.Sprintf("%d bytes of patch, %d files", patch.Len(), maxEvidencePaths+6),
		`"a/src/\x1b]0;owned\a.go b/src/\x1b]0;owned\a.go"`, "and 6 more"} {
		if !strings.Contains(s, want) {
			t.Fatalf("evidence lacks %q:\n%s", want, s)
		}
	}
	if strings.ContainsAny(s, "\x1b\x07") {
		t.Fatalf("a control character reached the output:\n%q", s)
	}
	out.Reset()
	printEvidence(&out, a, nil)
	if !strings.Contains(out.String(), "no longer stored") {
		t.Fatalf("a patch past retention: %s", out.String())
	}
}
