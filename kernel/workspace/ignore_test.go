package workspace

import (
	"archive/tar"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// ignoreRepo is a base repository with the given .gitignore files (path →
// content) and tracked files, prepared as a workspace.
func ignoreRepo(t *testing.T, ignores map[string]string, tracked []string) (Clone, string) {
	t.Helper()
	src := t.TempDir()
	testbed.Git(t, src, "init", "-q", "-b", "main")
	write := func(p, data string) {
		os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755)
		if err := os.WriteFile(filepath.Join(src, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range ignores {
		write(p, data)
	}
	for _, p := range tracked {
		write(p, "tracked "+p+"\n")
	}
	testbed.Git(t, src, "add", "-f", ".")
	testbed.Git(t, src, "commit", "-q", "-m", "base")
	base := testbed.Git(t, src, "rev-parse", "HEAD")
	c := Clone{Repo: src, BaseOID: base, Root: t.TempDir(), ID: "ws", UID: os.Getuid(), GID: os.Getgid()}
	if _, err := Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c, src
}

// gitStatus is git's own answer for a worker's files written over a clone
// of the base: which are part of a change (untracked or modified) and
// which the repository ignores.
func gitStatus(t *testing.T, src, base string, files map[string]string) (changed, ignored []string) {
	t.Helper()
	dir := t.TempDir()
	testbed.Git(t, dir, "clone", "-q", src, "w")
	w := filepath.Join(dir, "w")
	testbed.Git(t, w, "checkout", "-q", base)
	for p, data := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(w, p)), 0o755)
		if err := os.WriteFile(filepath.Join(w, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("git", "-c", "core.excludesFile=/dev/null", "status", "--porcelain=v1", "--ignored=matching", "--untracked-files=all", "-z")
	cmd.Dir = w
	outb, err := cmd.Output() // not trimmed: a record may begin with a space
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range strings.Split(string(outb), "\x00") {
		if len(rec) < 4 {
			continue
		}
		p := rec[3:]
		switch rec[:2] {
		case "!!":
			ignored = append(ignored, p)
		default:
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	sort.Strings(ignored)
	return changed, ignored
}

var (
	ignorePatterns = []string{"node_modules/", "*.pyc", "__pycache__/", "/build", "build/", "*.log", "!keep.log", "dist/**",
		"coverage", "**/tmp", "a/**/b", "*.o", "!important.o", "/root.txt", "docs/*.md", "\\#hash", "target/", "*.swp", ".venv/"}
	ignoreDirs  = []string{"", "node_modules", "src", "src/__pycache__", "build", "dist/x", "a/m/n", "docs", "tmp", "lib/tmp", ".venv/lib", "target/debug", "coverage"}
	ignoreFiles = []string{"x.pyc", "keep.log", "other.log", "main.go", "b", "readme.md", "root.txt", "#hash", "mod.o", "important.o", "index.js", "f.swp", "notes"}
)

// TestHarvestHonoursIgnoreRules: differential against git on generated
// trees. For random .gitignore files (at the root and in a subdirectory)
// and random worker files, the harvest's change is exactly what `git
// status` lists as changed over the same files, and what it leaves out is
// exactly what git lists as ignored — tracked files included, which git
// never ignores. An ignored node_modules full of npm's .bin symlinks and a
// __pycache__ of binaries refuse nothing.
func TestHarvestHonoursIgnoreRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(from []string, n int) []string {
		var out []string
		for range n {
			out = append(out, from[rng.IntN(len(from))])
		}
		return out
	}
	for round := range 12 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ignores := map[string]string{".gitignore": strings.Join(pick(ignorePatterns, 3+rng.IntN(5)), "\n") + "\n"}
			if rng.IntN(2) == 0 {
				ignores["src/.gitignore"] = strings.Join(pick(ignorePatterns, 1+rng.IntN(3)), "\n") + "\n"
			}
			// A tracked file under an ignored pattern stays tracked.
			tracked := []string{"src/main.go", "build/keep.txt", "node_modules/vendored.js"}
			c, src := ignoreRepo(t, ignores, tracked)
			files := map[string]string{}
			for range 10 + rng.IntN(20) {
				d := ignoreDirs[rng.IntN(len(ignoreDirs))]
				f := ignoreFiles[rng.IntN(len(ignoreFiles))]
				files[filepath.Join(d, f)] = fmt.Sprintf("content %d\n", rng.IntN(1000))
			}
			files["src/main.go"] = "changed\n"
			var es []entry
			dirs := map[string]bool{}
			names := make([]string, 0, len(files))
			for p := range files {
				names = append(names, p)
			}
			sort.Strings(names)
			for _, p := range names {
				for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
					if !dirs[d] {
						dirs[d] = true
						es = append(es, entry{name: d + "/", typ: tar.TypeDir, mode: 0o755})
					}
				}
				es = append(es, entry{name: p, typ: tar.TypeReg, data: files[p]})
			}
			slices.SortStableFunc(es, func(a, b entry) int { return strings.Compare(a.name, b.name) })
			wantChanged, wantIgnored := gitStatus(t, src, c.BaseOID, files)
			ar, digest := archive(t, es...)
			ch, err := Harvest(context.Background(), strings.NewReader(string(ar)), digest, c, Limits{}, Admit{})
			if err != nil {
				t.Fatalf("harvest: %v\n.gitignore: %q", err, ignores)
			}
			if !slices.Equal(ch.Paths, wantChanged) {
				t.Fatalf("harvested %q\ngit status changed %q\nignores %q", ch.Paths, wantChanged, ignores)
			}
			// What the harvest left out is what git ignores, file by file
			// (git names an ignored directory once, with a slash).
			var gitIgnored, leftOut []string
			for p := range files {
				if !slices.Contains(ch.Paths, p) {
					leftOut = append(leftOut, p)
				}
				for _, q := range wantIgnored {
					if p == q || strings.HasSuffix(q, "/") && strings.HasPrefix(p, q) {
						gitIgnored = append(gitIgnored, p)
						break
					}
				}
			}
			sort.Strings(gitIgnored)
			sort.Strings(leftOut)
			if !slices.Equal(leftOut, gitIgnored) || ch.Ignored.Count < len(leftOut) {
				t.Fatalf("left out %q (count %d), git ignores %q\nignores %q", leftOut, ch.Ignored.Count, gitIgnored, ignores)
			}
		})
	}

	t.Run("node_modules and __pycache__", func(t *testing.T) {
		c, _ := ignoreRepo(t, map[string]string{".gitignore": "node_modules/\n__pycache__/\n*.pyc\n"}, []string{"index.js"})
		ar, digest := archive(t,
			entry{name: "index.js", typ: tar.TypeReg, data: "fixed\n"},
			entry{name: "node_modules/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "node_modules/.bin/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "node_modules/.bin/is-number", typ: tar.TypeSymlink, link: "../is-number/cli.js"},
			entry{name: "node_modules/is-number/index.js", typ: tar.TypeReg, data: "module.exports = 1\n"},
			entry{name: "__pycache__/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "__pycache__/m.cpython-311.pyc", typ: tar.TypeReg, data: "\x00\x01binary"},
			entry{name: "lib/util.pyc", typ: tar.TypeReg, data: "\x00\x02binary"},
		)
		ch, err := Harvest(context.Background(), strings.NewReader(string(ar)), digest, c, Limits{}, Admit{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ch.Paths, []string{"index.js"}) || ch.Ignored.Count < 4 {
			t.Fatalf("paths %q, ignored %+v", ch.Paths, ch.Ignored)
		}
		// The same planted symlink outside an ignored directory still
		// refuses the change.
		ar, digest = archive(t, entry{name: "bin/", typ: tar.TypeDir, mode: 0o755}, entry{name: "bin/x", typ: tar.TypeSymlink, link: "/etc/passwd"})
		if _, err := Harvest(context.Background(), strings.NewReader(string(ar)), digest, c, Limits{}, Admit{}); err == nil {
			t.Fatal("a symlink outside the ignored paths was harvested")
		}
	})
}
