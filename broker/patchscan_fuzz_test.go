package broker

import (
	"testing"
)

// FuzzScanPatch: scanPatch never panics on any input, never reports a
// negative size, and counts no more for a text-only patch than the patch
// holds (text cannot amplify; only binary hunks can, and they are what it
// reads the declared sizes of). Seeds in testdata/fuzz/FuzzScanPatch: a
// text patch, a binary literal, a small delta bomb, malformed headers.
func FuzzScanPatch(f *testing.F) {
	small, _ := deltaBomb("lib/b.bin", 64, 3)
	f.Add(small)
	f.Add([]byte("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"))
	f.Fuzz(func(t *testing.T, patch []byte) {
		s, err := scanPatch(patch)
		if err != nil {
			return
		}
		if s.ResultBytes < 0 || s.LargestHunk < 0 {
			t.Fatalf("negative size: %+v", s)
		}
		if !s.Binary && s.ResultBytes > int64(len(patch)) {
			t.Fatalf("text patch of %d bytes counted %d", len(patch), s.ResultBytes)
		}
	})
}

// TestScanPatchDeclaredSizes: the scanner reads the sizes git will
// allocate — a literal's, a delta's target — and refuses headers it could
// read differently from git.
func TestScanPatchDeclaredSizes(t *testing.T) {
	bomb, total := deltaBomb("lib/b.bin", 1000, 5000)
	s, err := scanPatch(bomb)
	if err != nil || !s.Binary || s.ResultBytes != 1000+int64(total) {
		t.Fatalf("bomb: %+v %v (want %d)", s, err, 1000+total)
	}
	for _, bad := range []string{
		"GIT binary patch\nliteral +5\nBzzzzz\n\n", "GIT binary patch\nliteral  5\n\n", "GIT binary patch\nliteral 99999999999999999999\n\n",
		"GIT binary patch\nhuge 5\n\n", "GIT binary patch\nliteral 5\n!zzz\n\n", "Binary files a/x and b/x differ\n",
		"GIT binary patch\ndelta 5\nBzzzzz\n\n",
	} {
		if _, err := scanPatch([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
