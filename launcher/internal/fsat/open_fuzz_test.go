package fsat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzOpenAbsolute: whatever path a configuration names, OpenAbsolute opens
// a directory only when no component on the way, intermediate or final, is
// a symlink (the walk done here lexically, as the kernel resolves it), and
// then the descriptor is that directory.
func FuzzOpenAbsolute(f *testing.F) {
	root := f.TempDir()
	for _, d := range []string{"a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "c"), filepath.Join(root, "a/link")); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "out")); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"a/b", "a/link", "a/link/..", "out", "a/../c", "a/b/../../out/..", "a//b/.", "c/../a/link/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		path := root + "/" + rel
		fd, err := OpenAbsolute(path)
		// The lexical walk: every prefix the kernel would look up.
		throughLink, cur := false, "/"
		for _, c := range strings.Split(path, "/") {
			switch c {
			case "", ".":
				continue
			case "..":
				cur = filepath.Dir(cur)
				continue
			}
			cur = filepath.Join(cur, c)
			if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				throughLink = true
				break
			} else if lerr != nil {
				break
			}
		}
		if err != nil {
			return
		}
		defer unix.Close(fd)
		if throughLink {
			t.Fatalf("%q opened through a symlink", path)
		}
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) != nil || unix.Stat(cur, &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			t.Fatalf("%q opened something other than %s", path, cur)
		}
	})
}
