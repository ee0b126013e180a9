package broker

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
)

// TestArtifactCrashStates walks the directory states a crash can leave
// inside the publication sequence (seed 001) and checks that Reconcile
// proves each one, removing only its own recovery name.
func TestArtifactCrashStates(t *testing.T) {
	body := []byte("artifact")
	for _, tc := range []struct {
		name              string
		recovery, final   []byte // nil: absent
		want              Outcome
		wantFinal, wantRc bool
	}{
		{"nothing written", nil, nil, NotCommitted, false, false},
		{"empty reservation", []byte{}, nil, NotCommitted, false, false},
		{"partial recovery", body[:3], nil, NotCommitted, false, false},
		{"complete recovery, not linked", body, nil, NotCommitted, false, false},
		{"linked, recovery not yet unlinked", body, body, Committed, true, false},
		{"published", nil, body, Committed, true, false},
		{"name taken by other bytes, our recovery present", body, []byte("theirs"), NotCommitted, true, false},
		{"name holds other bytes, no recovery", nil, []byte("theirs"), Unknown, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := &Artifact{Targets: map[string]ArtifactTarget{"rel": {Dir: dir}}}
			r := Request{EffectID: uuid.New(), Revision: 1, TargetID: "rel", Target: []byte(`{"name":"x.bin"}`), Payload: body, PayloadDigest: Digest(body)}
			if tc.recovery != nil {
				_ = os.WriteFile(filepath.Join(dir, recoveryName(r)), tc.recovery, 0o644)
			}
			if tc.final != nil {
				_ = os.WriteFile(filepath.Join(dir, "x.bin"), tc.final, 0o644)
			}
			got := a.Reconcile(context.Background(), r)
			if got.Outcome != tc.want {
				t.Fatalf("outcome %v, want %v (%v)", got.Outcome, tc.want, got.Err)
			}
			_, err := os.Stat(filepath.Join(dir, "x.bin"))
			if (err == nil) != tc.wantFinal {
				t.Fatalf("final name present=%v", err == nil)
			}
			if _, err := os.Stat(filepath.Join(dir, recoveryName(r))); (err == nil) != tc.wantRc {
				t.Fatal("recovery name left behind")
			}
		})
	}
}

func TestArtifactContentIdempotent(t *testing.T) {
	dir := t.TempDir()
	a := &Artifact{Targets: map[string]ArtifactTarget{"rel": {Dir: dir}}}
	body := []byte("same")
	for i := range 2 {
		r := Request{EffectID: uuid.New(), Revision: 1, TargetID: "rel", Target: []byte(`{"name":"x.bin"}`), Payload: body, PayloadDigest: Digest(body)}
		if res := a.Commit(context.Background(), r); res.Outcome != Committed {
			t.Fatalf("publication %d: %v", i, res.Err)
		}
	}
	other := []byte("different")
	r := Request{EffectID: uuid.New(), Revision: 1, TargetID: "rel", Target: []byte(`{"name":"x.bin"}`), Payload: other, PayloadDigest: Digest(other)}
	if res := a.Commit(context.Background(), r); res.Outcome != NotCommitted {
		t.Fatal("create-only name overwritten")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x.bin")); string(b) != "same" {
		t.Fatal(string(b))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries left", len(ents))
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"lib/**", "lib/a.go", true}, {"lib/**", "lib/x/y/z.go", true}, {"lib/**", "lib", true}, {"lib/**", "libx/a", false},
		{"**/*secret*", "a/b/my_secret.txt", true}, {"**/*secret*", "secret", true}, {".env", ".env", true}, {".env", "a/.env", false},
		{"test/**", "test/x_test.go", true}, {"*.go", "a/b.go", false}, {"a/*/c", "a/b/c", true}, {"[", "[", false},
	} {
		if got := matchGlob(tc.pat, tc.name); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v", tc.pat, tc.name, got)
		}
	}
}
