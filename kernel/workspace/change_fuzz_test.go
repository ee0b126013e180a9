package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzHarvest feeds arbitrary archives (hashed, so the digest check
// passes and the parser is what is exercised) to Harvest: it must never
// panic or hang, must keep .git out of every change, must name only plain
// relative paths, and must keep its patch within the limit. Seeds are in
// testdata/fuzz/FuzzHarvest; more are the planted archives of the tests.
func FuzzHarvest(f *testing.F) {
	for _, es := range [][]entry{
		{{name: "src/", typ: tar.TypeDir, mode: 0o755}, {name: "src/calc.sh", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho $(($2 + $3))\n"}},
		{{name: "tests/", typ: tar.TypeDir, pax: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y"}}, {name: "README", typ: tar.TypeChar}},
		{{name: ".git/config", typ: tar.TypeReg, data: "[core]\n\tfsmonitor = x\n"}, {name: "l", typ: tar.TypeSymlink, link: "/proc"}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range es {
			h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode | 0o644, Linkname: e.link, Format: tar.FormatPAX, PAXRecords: e.pax}
			if e.typ == tar.TypeReg {
				h.Size = int64(len(e.data))
			}
			tw.WriteHeader(h)
			tw.Write([]byte(e.data))
		}
		tw.Close()
		f.Add(buf.Bytes())
	}
	// One base clone for every input: Harvest only reads it.
	c, _ := baseClone(f)
	lim := Limits{ArchiveBytes: 1 << 20, FileBytes: 64 << 10, ChangeBytes: 256 << 10, Entries: 256, PatchBytes: 512 << 10}
	f.Fuzz(func(t *testing.T, archive []byte) {
		sum := sha256.Sum256(archive)
		ch, err := Harvest(context.Background(), bytes.NewReader(archive), hex.EncodeToString(sum[:]), c, lim, Admit{})
		if err != nil {
			if errors.Is(err, ErrDigest) {
				t.Fatal("the archive's own digest was refused")
			}
			return
		}
		if len(ch.Patch) > lim.PatchBytes {
			t.Fatalf("patch of %d bytes", len(ch.Patch))
		}
		for _, p := range ch.Paths {
			if gitDir(p) || !plainName(p) || strings.HasPrefix(p, "/") || filepath.Clean(p) != p {
				t.Fatalf("path %q in the change", p)
			}
		}
	})
}
