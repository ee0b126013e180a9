package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// TestShadowHidesWhatTheLayerHolds: a setup layer's archive read as a
// Shadow hides exactly the paths a verification would not see through it —
// its files, symlinks and whiteouts, anything below one of them or below
// an opaque directory, and a file where it has a directory — and nothing
// beside or below its plain directories; bytes that are not its digest,
// or past the entry cap, read as nothing.
func TestShadowHidesWhatTheLayerHolds(t *testing.T) {
	b, d := archive(t,
		entry{name: "node_modules/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "node_modules/is-number/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "node_modules/is-number/index.js", typ: tar.TypeReg, data: "module.exports = 1\n"},
		entry{name: "node_modules/.bin", typ: tar.TypeSymlink, link: "x"},
		entry{name: "build/", typ: tar.TypeDir, pax: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y"}},
		entry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "src/gen.c", typ: tar.TypeReg, data: "int x;\n"},
		entry{name: "old", typ: tar.TypeChar},
	)
	s, err := ReadShadow(bytes.NewReader(b), d, 100)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 8 || s.Digest() != d || s.Bytes() != int64(len(b)) {
		t.Fatalf("%d entries, %d bytes, digest %s", s.Len(), s.Bytes(), s.Digest())
	}
	if w := (Limits{}).Widen(s); w.ArchiveBytes != 64<<20+int64(len(b)) || w.Entries != 100_000+8 {
		t.Errorf("widened limits %+v", w)
	}
	for p, want := range map[string]bool{
		"node_modules/is-number/index.js": true, "node_modules/.bin": true, "node_modules/.bin/tool": true,
		"build/out.o": true, "build": true, "old": true, "old/file": true, "src/gen.c": true, "src": true, "node_modules": true,
		"node_modules/is-number/README.md": false, "src/calc.sh": false, "README": false, "buildx": false, "olds": false,
	} {
		if s.Hides(p) != want {
			t.Errorf("Hides(%q) = %v, want %v", p, !want, want)
		}
	}
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 1
	if _, err := ReadShadow(bytes.NewReader(bad), d, 100); !errors.Is(err, ErrDigest) {
		t.Errorf("tampered layer: %v, want ErrDigest", err)
	}
	if _, err := ReadShadow(bytes.NewReader(b), d, 7); err == nil || !strings.Contains(err.Error(), "more than 7 entries") {
		t.Errorf("entry cap: %v", err)
	}
	esc, ed := archive(t, entry{name: "../x", typ: tar.TypeReg, data: "x"})
	if _, err := ReadShadow(bytes.NewReader(esc), ed, 100); err == nil {
		t.Error("an entry climbing out was read")
	}
}

// TestBlobIDs: the lockfiles' blob ids at a commit, exactly the paths
// asked for (a prefix or a directory of the same name is not one), and
// a path that climbs out is refused before git runs.
func TestBlobIDs(t *testing.T) {
	_, src := baseClone(t)
	base := strings.TrimSpace(testbed.Git(t, src, "rev-parse", "HEAD"))
	ids, err := BlobIDs(context.Background(), "", src, base, []string{"README", "src", "missing.lock", "tests/test_calc.sh"})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(testbed.Git(t, src, "rev-parse", base+":README"))
	if len(ids) != 2 || ids["README"] != want || ids["tests/test_calc.sh"] == "" {
		t.Fatalf("blob ids %v, want README %s and tests/test_calc.sh", ids, want)
	}
	for _, p := range []string{"../x", "/etc/passwd", "a/../b", ""} {
		if _, err := BlobIDs(context.Background(), "", src, base, []string{p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("path %q: %v", p, err)
		}
	}
}

// FuzzReadShadow: any archive (hashed, so the digest passes and the
// parser is what runs) is read without a panic, and what it reads hides
// only clean relative paths. Seeds: testdata/fuzz/FuzzReadShadow.
func FuzzReadShadow(f *testing.F) {
	b, _ := archive(f, entry{name: "node_modules/", typ: tar.TypeDir}, entry{name: "node_modules/a.js", typ: tar.TypeReg, data: "a"},
		entry{name: "gone", typ: tar.TypeChar}, entry{name: "b/", typ: tar.TypeDir, pax: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y"}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		sum := sha256.Sum256(data)
		s, err := ReadShadow(bytes.NewReader(data), hex.EncodeToString(sum[:]), 64)
		if errors.Is(err, ErrDigest) {
			t.Fatal("the archive's own digest was refused")
		}
		if err != nil {
			return
		}
		for p := range s.entries {
			if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "../") || p == ".." {
				t.Fatalf("entry %q", p)
			}
		}
	})
}
