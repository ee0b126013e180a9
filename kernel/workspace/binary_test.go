package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// TestHarvestBinaryWhenAllowed: on a target that admits binary files, a
// new binary file, an edited base binary, a deleted base binary and a NUL
// past git's 8,000-byte window become GIT binary patch sections that real
// git applies to exactly the worker's bytes (it checks each preimage by
// the full index line); the same archive on a target that does not is
// refused, naming the path for the operator and not in the reason.
func TestHarvestBinaryWhenAllowed(t *testing.T) {
	for _, format := range []string{"sha1", "sha256"} {
		t.Run(format, func(t *testing.T) { harvestBinary(t, format) })
	}
}

func harvestBinary(t *testing.T, format string) {
	c, src := baseBinaryClone(t, format)
	img := append([]byte("\x89PNG\r\n\x1a\n\x00"), bytes.Repeat([]byte{0, 1, 2, 250, 251, 252}, 3000)...)
	late := strings.Repeat("a", 9000) + "\x00tail\n"
	ar, digest := archive(t,
		entry{name: "assets/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "assets/same.bin", typ: tar.TypeReg, data: "same\x00bytes"}, // copied up, unchanged
		entry{name: "assets/logo.png", typ: tar.TypeReg, data: string(img)},
		entry{name: "assets/old.bin", typ: tar.TypeChar},
		entry{name: "data.bin", typ: tar.TypeReg, data: "\x00\x01edited\x00"},
		entry{name: "late.txt", typ: tar.TypeReg, data: late},
		entry{name: "notes.txt", typ: tar.TypeReg, data: "text too\n"},
	)
	ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{Binary: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(ch.Paths, ","), "same.bin") {
		t.Errorf("an unchanged copy-up is a change: %v", ch.Paths)
	}
	if n := strings.Count(string(ch.Patch), "GIT binary patch"); n != 4 {
		t.Fatalf("%d binary sections, want 4:\n%s", n, ch.Patch)
	}
	got := applied(t, src, c.BaseOID, ch.Patch, "assets/logo.png", "assets/old.bin", "data.bin", "late.txt", "notes.txt")
	want := map[string]string{"assets/logo.png": string(img), "assets/old.bin": "<gone>", "data.bin": "\x00\x01edited\x00",
		"late.txt": late, "notes.txt": "text too\n"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: applied %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	// git reverses it too (the reverse literal), back to the base.
	dir := t.TempDir()
	testbed.Git(t, dir, "clone", "-q", src, "w")
	w := filepath.Join(dir, "w")
	os.WriteFile(filepath.Join(dir, "p"), ch.Patch, 0o644)
	testbed.Git(t, w, "apply", "--index", filepath.Join(dir, "p"))
	testbed.Git(t, w, "apply", "-R", "--index", filepath.Join(dir, "p"))
	if st := testbed.Git(t, w, "status", "--porcelain"); st != "" {
		t.Errorf("apply then apply -R left %q", st)
	}

	// Not admitted: refused, and the operator learns which path.
	_, err = Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
	var r *Refusal
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "binary") {
		t.Fatalf("binary on a text-only target: %v", err)
	}
	if strings.Contains(r.Reason, ".png") || strings.Contains(r.Reason, ".bin") {
		t.Errorf("the reason quotes a worker-chosen name: %q", r.Reason)
	}
	if !strings.HasPrefix(r.Operator(), r.Reason+": \"") || r.Path == "" {
		t.Errorf("the operator's record does not name the path: %q", r.Operator())
	}
}

// TestRefusalNamesThePathEscaped: the operator's record of a refusal
// names the offending path with every control, format and non-ASCII
// character escaped, so a name cannot redraw the operator's terminal.
func TestRefusalNamesThePathEscaped(t *testing.T) {
	c, _ := baseClone(t)
	name := "evil\x1b]0;pwned\x07\u202e.txt"
	ar, digest := archive(t, entry{name: name, typ: tar.TypeReg, data: "x\n"})
	_, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	op := r.Operator()
	if strings.ContainsAny(op, "\x1b\x07\u202e") || !strings.Contains(op, `evil\x1b]0;pwned\a\u202e.txt`) {
		t.Errorf("operator record %q", op)
	}
	if strings.Contains(r.Reason, "evil") {
		t.Errorf("reason %q quotes the name", r.Reason)
	}
}

// TestCopyUpsAreNotChanges: a formatter run that copies up every file and
// changes one counts only that one against the changed-files cap.
func TestCopyUpsAreNotChanges(t *testing.T) {
	c, src := largeClone(t, 200, 4096)
	es := copyUps(t, src, 200)
	es[8].data += "changed\n" // es[0] is the first directory
	ar, digest := archive(t, es...)
	// 200 files of 4 KiB: 800 KiB copied up, one changed.
	ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{ChangeBytes: 64 << 10}, Admit{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Paths) != 1 || ch.Paths[0] != es[8].name {
		t.Fatalf("paths %v", ch.Paths)
	}
}

// baseBinaryClone is a prepared workspace whose base has binary files.
func baseBinaryClone(t testing.TB, format string) (Clone, string) {
	t.Helper()
	src := t.TempDir()
	testbed.Git(t, src, "init", "-q", "-b", "main", "--object-format="+format)
	os.MkdirAll(filepath.Join(src, "assets"), 0o755)
	os.WriteFile(filepath.Join(src, "assets", "same.bin"), []byte("same\x00bytes"), 0o644)
	os.WriteFile(filepath.Join(src, "assets", "old.bin"), []byte("old\x00binary"), 0o644)
	os.WriteFile(filepath.Join(src, "data.bin"), []byte("\x00\x01\x02"), 0o644)
	os.WriteFile(filepath.Join(src, "late.txt"), []byte("text\n"), 0o644)
	testbed.Git(t, src, "add", ".")
	testbed.Git(t, src, "commit", "-q", "-m", "base")
	return prepared(t, src)
}

func prepared(t testing.TB, src string) (Clone, string) {
	t.Helper()
	base := testbed.Git(t, src, "rev-parse", "HEAD")
	c := Clone{Repo: src, BaseOID: base, Root: t.TempDir(), ID: "ws", UID: os.Getuid(), GID: os.Getgid()}
	if _, err := Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c, src
}

// largeClone is a prepared workspace of n files of size bytes each, in
// directories of 100.
func largeClone(t testing.TB, n, size int) (Clone, string) {
	t.Helper()
	src := t.TempDir()
	testbed.Git(t, src, "init", "-q", "-b", "main")
	for i := range n {
		p := filepath.Join(src, fileName(i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, fileBody(i, size), 0o644)
	}
	testbed.Git(t, src, "add", ".")
	testbed.Git(t, src, "commit", "-q", "-m", "base")
	return prepared(t, src)
}

func fileName(i int) string {
	return fmt.Sprintf("pkg%03d/f%05d.go", i/100, i)
}

func fileBody(i, size int) []byte {
	line := []byte(fmt.Sprintf("// line of file %d\n", i))
	return bytes.Repeat(line, size/len(line)+1)[:size]
}

// copyUps is the upper layer of a worker that copied up n base files of
// largeClone unchanged, directories first, as the launcher sorts them.
func copyUps(t testing.TB, src string, n int) []entry {
	t.Helper()
	var es []entry
	dirs := map[string]bool{}
	for i := range n {
		p := filepath.ToSlash(fileName(i))
		if d := filepath.Dir(p); !dirs[d] {
			dirs[d] = true
			es = append(es, entry{name: d + "/", typ: tar.TypeDir, mode: 0o755})
		}
		b, err := os.ReadFile(filepath.Join(src, p))
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, entry{name: p, typ: tar.TypeReg, data: string(b)})
	}
	return es
}
