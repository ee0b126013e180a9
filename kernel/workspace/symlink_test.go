package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// TestHarvestSymlinksWhenAllowed: on a target that admits symlinks, a new
// relative link inside the repository, a base link retargeted, and a file
// turned into a link become a patch real git applies to exactly those
// links; a link that climbs out or reaches .git still refuses the change,
// naming the path for the operator; without the option every link does.
func TestHarvestSymlinksWhenAllowed(t *testing.T) {
	c, src := baseClone(t)
	ar, digest := archive(t,
		entry{name: "link", typ: tar.TypeSymlink, link: "tests/test_calc.sh"},
		entry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "src/readme", typ: tar.TypeSymlink, link: "../README"},
		entry{name: "tests/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "tests/test_calc.sh", typ: tar.TypeSymlink, link: "../src/calc.sh"},
	)
	ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{Symlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testbed.Git(t, dir, "clone", "-q", src, "w")
	w := filepath.Join(dir, "w")
	os.WriteFile(filepath.Join(dir, "p"), ch.Patch, 0o644)
	testbed.Git(t, w, "apply", "--index", filepath.Join(dir, "p"))
	for p, want := range map[string]string{"link": "tests/test_calc.sh", "src/readme": "../README", "tests/test_calc.sh": "../src/calc.sh"} {
		if got, err := os.Readlink(filepath.Join(w, p)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q\n%s", p, got, err, want, ch.Patch)
		}
	}
	if st := testbed.Git(t, w, "ls-files", "-s", "src/readme"); !strings.HasPrefix(st, "120000 ") {
		t.Errorf("src/readme is staged as %q", st)
	}
	for name, link := range map[string]string{"out": "../outside", "abs": "/etc/shadow", "meta": ".git/config", "through": "src/../../x"} {
		ar, digest := archive(t, entry{name: name, typ: tar.TypeSymlink, link: link})
		_, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{Symlinks: true})
		var r *Refusal
		if !errors.As(err, &r) || r.Path != name || strings.Contains(r.Reason, link) {
			t.Errorf("%s -> %s: %v", name, link, err)
		}
	}
	if _, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{}); err == nil {
		t.Error("a link harvested on a target without allow_symlinks")
	}
}
