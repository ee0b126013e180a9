package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// entry is one planted archive entry, written as the launcher's archiver
// would (or as a hostile one might).
type entry struct {
	name     string
	typ      byte
	mode     int64
	data     string
	link     string
	size     int64 // header size when it must lie; 0: len(data)
	pax      map[string]string
	devmajor int64
}

func archive(t testing.TB, es ...entry) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1, 0),
			Format: tar.FormatPAX, PAXRecords: e.pax, Devmajor: e.devmajor}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// baseClone is a prepared workspace of a small repository with a
// subdirectory, an executable and a symlink.
func baseClone(t testing.TB) (Clone, string) {
	t.Helper()
	src := t.TempDir()
	testbed.Git(t, src, "init", "-q", "-b", "main")
	os.MkdirAll(filepath.Join(src, "src"), 0o755)
	os.MkdirAll(filepath.Join(src, "tests"), 0o755)
	os.WriteFile(filepath.Join(src, "src", "calc.sh"), []byte("#!/bin/sh\necho $(($2 + $3 + 1))\n"), 0o755)
	os.WriteFile(filepath.Join(src, "tests", "test_calc.sh"), []byte("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n"), 0o644)
	os.WriteFile(filepath.Join(src, "README"), []byte("no newline at end"), 0o644)
	os.Symlink("README", filepath.Join(src, "link"))
	testbed.Git(t, src, "add", ".")
	testbed.Git(t, src, "commit", "-q", "-m", "base")
	base := testbed.Git(t, src, "rev-parse", "HEAD")
	c := Clone{Repo: src, BaseOID: base, Root: t.TempDir(), ID: "ws", UID: os.Getuid(), GID: os.Getgid()}
	if _, err := Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c, src
}

// applied applies patch to a fresh clone of src at base and returns the
// content of each path listed (or "<gone>").
func applied(t *testing.T, src, base string, patch []byte, paths ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	testbed.Git(t, dir, "clone", "-q", src, "w")
	w := filepath.Join(dir, "w")
	testbed.Git(t, w, "checkout", "-q", base)
	p := filepath.Join(dir, "p.patch")
	os.WriteFile(p, patch, 0o644)
	testbed.Git(t, w, "apply", "--index", p)
	out := map[string]string{}
	for _, q := range paths {
		b, err := os.ReadFile(filepath.Join(w, q))
		if err != nil {
			out[q] = "<gone>"
			continue
		}
		out[q] = string(b)
	}
	return out
}

// TestHarvestMakesAnExactPatch: an edit, a new file, a deletion (whiteout),
// an opaque directory, a mode change, a file without a final newline, and
// a copied-up file left unchanged become a patch that git applies to
// exactly the worker's tree.
func TestHarvestMakesAnExactPatch(t *testing.T) {
	c, src := baseClone(t)
	ar, digest := archive(t,
		entry{name: "README", typ: tar.TypeReg, data: "no newline at end, now\nand more"},
		entry{name: "new.txt", typ: tar.TypeReg, data: "fresh\n"},
		entry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "src/calc.sh", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho $(($2 + $3))\n"},
		entry{name: "tests/", typ: tar.TypeDir, mode: 0o755, pax: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y"}},
		entry{name: "tests/other.sh", typ: tar.TypeReg, mode: 0o755, data: "x\n"},
	)
	ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("patch:\n%s", ch.Patch)
	got := applied(t, src, c.BaseOID, ch.Patch, "README", "new.txt", "src/calc.sh", "tests/test_calc.sh", "tests/other.sh")
	want := map[string]string{"README": "no newline at end, now\nand more", "new.txt": "fresh\n",
		"src/calc.sh": "#!/bin/sh\necho $(($2 + $3))\n", "tests/test_calc.sh": "<gone>", "tests/other.sh": "x\n"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if strings.Join(ch.Paths, ",") != "README,new.txt,src/calc.sh,tests/other.sh,tests/test_calc.sh" {
		t.Errorf("paths %v", ch.Paths)
	}
	// A whiteout deletes; a copied-up file left as it was is no change.
	ar, digest = archive(t,
		entry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "src/calc.sh", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho $(($2 + $3 + 1))\n"},
		entry{name: "tests/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "tests/test_calc.sh", typ: tar.TypeChar},
	)
	ch, err = Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ch.Paths, ",") != "tests/test_calc.sh" || !strings.Contains(string(ch.Patch), "deleted file mode 100644") {
		t.Fatalf("whiteout: %v\n%s", ch.Paths, ch.Patch)
	}
	// Nothing in the upper layer but directories: nothing to commit.
	ar, digest = archive(t, entry{name: "src/", typ: tar.TypeDir, mode: 0o755})
	if ch, err = Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{}); err != nil || len(ch.Patch) != 0 {
		t.Fatalf("empty change: %q, %v", ch.Patch, err)
	}
}

// TestHarvestRefusesHostileEntries: every planting the issue names either
// is refused with a reason that quotes no worker-chosen name, or (a
// modified .git) is left out of the change. Nothing is followed, opened
// or executed: the harvest only reads the archive's bytes.
func TestHarvestRefusesHostileEntries(t *testing.T) {
	c, _ := baseClone(t)
	ok := entry{name: "new.txt", typ: tar.TypeReg, data: "fine\n"}
	for name, es := range map[string][]entry{
		"symlink to a kernel file": {ok, {name: "k", typ: tar.TypeSymlink, link: "/etc/autonomic/kernel.json"}},
		"symlink to /proc":         {ok, {name: "p", typ: tar.TypeSymlink, link: "/proc/self/environ"}},
		"symlink over a file":      {{name: "README", typ: tar.TypeSymlink, link: "/root/.ssh/id_ed25519"}},
		"hard link":                {ok, {name: "h", typ: tar.TypeLink, link: "/etc/shadow"}},
		"fifo":                     {ok, {name: "f", typ: tar.TypeFifo}},
		"device node":              {ok, {name: "d", typ: tar.TypeChar, devmajor: 1}},
		"block device":             {ok, {name: "b", typ: tar.TypeBlock}},
		"foreign record":           {{name: "s", typ: tar.TypeReg, data: "x", pax: map[string]string{"SCHILY.xattr.security.capability": "x"}}},
		"newline in a name":        {{name: "evil\nname", typ: tar.TypeReg, data: "x\n"}},
		"invalid utf-8 name":       {{name: "bad\xff", typ: tar.TypeReg, data: "x\n"}},
		"zero-width name":          {{name: "a\u200bb", typ: tar.TypeReg, data: "x\n"}},
		"dotdot name":              {{name: "../escape", typ: tar.TypeReg, data: "x\n"}},
		"absolute name":            {{name: "/etc/passwd", typ: tar.TypeReg, data: "x\n"}},
		"binary file":              {{name: "bin", typ: tar.TypeReg, data: "a\x00b"}},
		"NUL past git's 8000":      {{name: "late", typ: tar.TypeReg, data: strings.Repeat("a", 9000) + "\x00b\n"}},
		"replaced base symlink":    {{name: "link", typ: tar.TypeReg, data: "x\n"}},
		"deleted base symlink":     {{name: "link", typ: tar.TypeChar}},
		"file over the limit":      {{name: "big", typ: tar.TypeReg, data: strings.Repeat("x", 4<<20+1)}},
	} {
		ar, digest := archive(t, es...)
		_, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
		var r *Refusal
		if !errors.As(err, &r) {
			t.Errorf("%s: err = %v, want a refusal", name, err)
			continue
		}
		for _, e := range es {
			if len(e.name) >= 6 && strings.Contains(r.Reason, e.name) {
				t.Errorf("%s: the reason quotes a worker-chosen name: %q", name, r.Reason)
			}
		}
	}
	// A modified .git — hooks, fsmonitor, includes, alternates, a gitdir
	// file, a nested repository — is never part of the change.
	ar, digest := archive(t,
		entry{name: ".git/", typ: tar.TypeDir, mode: 0o755},
		entry{name: ".git/config", typ: tar.TypeReg, data: "[core]\n\tfsmonitor = touch /tmp/pwned\n[include]\n\tpath = /etc/shadow\n"},
		entry{name: ".git/hooks/", typ: tar.TypeDir, mode: 0o755},
		entry{name: ".git/hooks/pre-commit", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\ntouch /tmp/pwned\n"},
		entry{name: ".git/hooks/evil", typ: tar.TypeSymlink, link: "/bin/sh"},
		entry{name: ".git/objects/info/alternates", typ: tar.TypeReg, data: "/var/lib/autonomic/other.git/objects\n"},
		entry{name: ".git/fifo", typ: tar.TypeFifo},
		entry{name: "sub/.GIT", typ: tar.TypeReg, data: "gitdir: /etc\n"},
		entry{name: "new.txt", typ: tar.TypeReg, data: "fine\n"},
	)
	ch, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{})
	if err != nil || strings.Join(ch.Paths, ",") != "new.txt" {
		t.Fatalf(".git plantings: %v, %v", ch.Paths, err)
	}
	// A .git replaced by a gitdir file (whiteout + file) is ignored too.
	ar, digest = archive(t, entry{name: ".git", typ: tar.TypeReg, data: "gitdir: /var/lib/autonomic\n"})
	if ch, err = Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{}, Admit{}); err != nil || len(ch.Patch) != 0 {
		t.Fatalf(".git as a gitdir file: %q, %v", ch.Patch, err)
	}
}

// TestHarvestBoundsAndDigest: bytes that do not hash to the digest are
// refused whatever they hold; an archive over its cap, a header that
// claims a giant size, and too many entries end the read early with
// bounded memory.
func TestHarvestBoundsAndDigest(t *testing.T) {
	c, _ := baseClone(t)
	ar, digest := archive(t, entry{name: "new.txt", typ: tar.TypeReg, data: "fine\n"})
	other := strings.Repeat("0", 64)
	if _, err := Harvest(context.Background(), bytes.NewReader(ar), other, c, Limits{}, Admit{}); !errors.Is(err, ErrDigest) {
		t.Fatalf("wrong digest: %v", err)
	}
	tampered := append([]byte(nil), ar...)
	tampered[len(tampered)-1] ^= 1
	if _, err := Harvest(context.Background(), bytes.NewReader(tampered), digest, c, Limits{}, Admit{}); !errors.Is(err, ErrDigest) {
		t.Fatalf("tampered archive: %v", err)
	}
	var r *Refusal
	if _, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{ArchiveBytes: 512}, Admit{}); !errors.As(err, &r) {
		t.Fatalf("archive over its cap: %v", err)
	}
	// Each file has its own cap, below what the patch cap would catch.
	ar, digest = archive(t, entry{name: "new.txt", typ: tar.TypeReg, data: strings.Repeat("y\n", 50)})
	if _, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{FileBytes: 10}, Admit{}); !errors.As(err, &r) {
		t.Fatalf("a file over its cap: %v", err)
	}
	var many []entry
	for i := range 20 {
		many = append(many, entry{name: "d" + string(rune('a'+i)) + "/", typ: tar.TypeDir, mode: 0o755})
	}
	ar, digest = archive(t, many...)
	if _, err := Harvest(context.Background(), bytes.NewReader(ar), digest, c, Limits{Entries: 10}, Admit{}); !errors.As(err, &r) {
		t.Fatalf("too many entries: %v", err)
	}
	// A sparse giant: the header claims 1 TiB and the stream holds none of
	// it. Nothing is allocated by the header's word.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "giant", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644, Format: tar.FormatPAX})
	sum := sha256.Sum256(buf.Bytes())
	if _, err := Harvest(context.Background(), bytes.NewReader(buf.Bytes()), hex.EncodeToString(sum[:]), c, Limits{}, Admit{}); err == nil {
		t.Fatal("a giant header was harvested")
	}
	// Real sparse giants, as GNU tar writes them (PAX 1.0 and GNU 'S'):
	// 4 GiB of holes in a few KiB of archive are refused by their size.
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "giant"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(4 << 30)
	f.WriteAt([]byte("end"), 4<<30-3)
	f.Close()
	for _, format := range []string{"pax", "gnu"} {
		raw, err := exec.Command("tar", "-C", dir, "-S", "--format="+format, "-cf", "-", "giant").Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 1<<20 {
			t.Fatalf("%s: tar wrote %d bytes, not a sparse archive", format, len(raw))
		}
		sum := sha256.Sum256(raw)
		if _, err := Harvest(context.Background(), bytes.NewReader(raw), hex.EncodeToString(sum[:]), c, Limits{}, Admit{}); !errors.As(err, &r) {
			t.Errorf("%s sparse giant: %v, want a refusal", format, err)
		}
	}
}
