package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// BenchmarkHarvest: the host cost of a harvest (issue 23 §5; goal under
// 1 s each), run outside any cgroup in the kernel's account.
//
//   - copyups: a formatter's run over a 4,000-file repository that copied
//     every file up and changed one. Unchanged copy-ups are told by
//     hashing here; per_file_cat_file beside it is the cost this replaced
//     (one git process per copied-up file), for the ratio.
//   - node_modules: 20,000 files under an ignored node_modules, with npm's
//     .bin symlinks, beside a one-line change.
func BenchmarkHarvest(b *testing.B) {
	const files = 4000
	c, src := largeClone(b, files, 2048)
	es := copyUps(b, src, files)
	es[len(es)-1].data += "changed\n"
	ar, digest := archive(b, es...)
	lim := Limits{ArchiveBytes: 256 << 20, ChangeBytes: 64 << 20}
	b.Run("copyups", func(b *testing.B) {
		for b.Loop() {
			ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, lim, Admit{})
			if err != nil || len(ch.Paths) != 1 {
				b.Fatal(ch.Paths, err)
			}
		}
	})
	b.Run("per_file_cat_file", func(b *testing.B) {
		g := runner{dir: filepath.Join(c.Root, c.ID)}
		tree, err := baseTree(context.Background(), g, c.BaseOID)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			for _, e := range tree {
				if _, err := g.run(context.Background(), "cat-file", "blob", e.oid); err != nil {
					b.Fatal(err)
				}
			}
		}
	})

	_, nmSrc := largeClone(b, 10, 64)
	os.WriteFile(filepath.Join(nmSrc, ".gitignore"), []byte("node_modules/\n"), 0o644)
	testbed.Git(b, nmSrc, "add", ".gitignore")
	testbed.Git(b, nmSrc, "commit", "-q", "-m", "ignore")
	nm, _ := prepared(b, nmSrc)
	mods := []entry{{name: "node_modules/", typ: tar.TypeDir, mode: 0o755}, {name: "node_modules/.bin/", typ: tar.TypeDir, mode: 0o755}}
	for p := range 200 {
		pkg := fmt.Sprintf("node_modules/pkg%03d", p)
		mods = append(mods, entry{name: pkg + "/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "node_modules/.bin/tool" + fmt.Sprint(p), typ: tar.TypeSymlink, link: "../" + pkg[len("node_modules/"):] + "/cli.js"})
		for f := range 99 {
			mods = append(mods, entry{name: fmt.Sprintf("%s/f%02d.js", pkg, f), typ: tar.TypeReg, data: "module.exports = 1\n"})
		}
	}
	mods = append(mods, entry{name: "pkg000/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "pkg000/f00000.go", typ: tar.TypeReg, data: "// fixed\n"})
	nmAr, nmDigest := archive(b, mods...)
	b.Run("node_modules", func(b *testing.B) {
		for b.Loop() {
			ch, err := Harvest(context.Background(), bytes.NewReader(nmAr), nmDigest, nm, lim, Admit{})
			if err != nil || len(ch.Paths) != 1 || ch.Ignored.Count < 20000 {
				b.Fatal(ch.Paths, ch.Ignored.Count, err)
			}
		}
	})
}
