package rootfs

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzOCILayer feeds arbitrary bytes to the layer applier, one layer on
// top of a fixed lower one: it must never panic, and whatever it accepts
// is a tree of clean names (no "", ".", ".." or "/" in a name, nothing
// beneath a non-directory) whose files are the builder's own blobs.
func FuzzOCILayer(f *testing.F) {
	for _, ms := range envLayers {
		f.Add(layerTar(f, ms))
	}
	f.Add(layerTar(f, []member{{name: "a/../../b", typ: tar.TypeReg}}))
	f.Add(layerTar(f, []member{{name: "l", typ: tar.TypeSymlink, link: "/"}, reg("l/x", 0o644, "x")}))
	f.Add(layerTar(f, []member{{name: "h", typ: tar.TypeLink, link: "etc/app/keep"}, reg(".wh..wh..opq", 0o644, "")}))
	f.Add(layerTar(f, []member{{name: "d", typ: tar.TypeChar}}))
	f.Add([]byte{})
	lower := layerTar(f, envLayers[0])
	f.Fuzz(func(t *testing.T, data []byte) {
		blobs := t.TempDir()
		u := &unpacker{t: newTree(), blobs: blobs, lim: ociLimits{Entries: 256, FileBytes: 1 << 16, Bytes: 1 << 20, Layers: 4}}
		if err := u.apply(strings.NewReader(string(lower))); err != nil {
			t.Fatal(err)
		}
		if err := u.apply(strings.NewReader(string(data))); err != nil {
			return
		}
		err := u.t.walk(func(p string, n *treeNode) error {
			if p != "/" {
				for _, c := range strings.Split(p[1:], "/") {
					if c == "" || c == "." || c == ".." {
						t.Fatalf("unclean path %q in the tree", p)
					}
				}
			}
			if n.kind != kindDir && len(n.children) > 0 {
				t.Fatalf("%s is a %s with children", p, n.kind)
			}
			if n.kind == kindFile {
				if filepath.Dir(n.src) != blobs {
					t.Fatalf("%s's content is read from %s, not a blob", p, n.src)
				}
				if _, err := os.Lstat(n.src); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
