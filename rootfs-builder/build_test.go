package rootfs

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
)

func loadMinimal(t *testing.T) *Spec {
	t.Helper()
	s, err := LoadSpec("specs/minimal.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func buildMinimal(t *testing.T, opts Options) (string, string) {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "root")
	d, err := Build(context.Background(), loadMinimal(t), dest, opts)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return dest, d
}

// resolveInRoot follows symlinks the way the kernel would after chroot(root),
// without chrooting: absolute targets restart at root.
func resolveInRoot(t *testing.T, root, p string) string {
	t.Helper()
	cur := "/"
	rest := strings.Split(strings.Trim(p, "/"), "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			t.Fatalf("resolving %s inside rootfs: %v", p, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if hops++; hops > 40 {
				t.Fatalf("symlink loop at %s", next)
			}
			target, _ := os.Readlink(filepath.Join(root, next))
			if path.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
			continue
		}
		cur = next
	}
	return cur
}

func TestBuildMinimalAndVerify(t *testing.T) {
	var progress bytes.Buffer
	dest, digest := buildMinimal(t, Options{Progress: &progress, ProgressEvery: 10})
	if err := Verify(dest); err != nil {
		t.Fatalf("verify fresh build: %v", err)
	}
	got, err := ManifestDigest(dest)
	if err != nil || got != digest {
		t.Fatalf("ManifestDigest = %q, %v; Build returned %q", got, err, digest)
	}
	if !strings.Contains(progress.String(), "%)") {
		t.Errorf("no percentage progress line in %q", progress.String())
	}

	// The interpreter of /bin/ls must resolve inside the rootfs, through the
	// reproduced /lib64 -> usr/lib64 and /usr/lib64/ld-linux... symlinks.
	ef, err := elf.Open(filepath.Join(dest, resolveInRoot(t, dest, "/bin/ls")))
	if err != nil {
		t.Fatal(err)
	}
	var interp string
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	ef.Close()
	if interp == "" {
		t.Fatal("/bin/ls has no PT_INTERP")
	}
	real := resolveInRoot(t, dest, interp)
	if fi, err := os.Stat(filepath.Join(dest, real)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("interpreter %s -> %s not a file in rootfs: %v", interp, real, err)
	}
	if fi, err := os.Lstat(filepath.Join(dest, "lib64")); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("/lib64 should be a symlink as on the host")
	}

	for _, m := range mountpoints() {
		fi, err := os.Lstat(filepath.Join(dest, m))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Errorf("mountpoint %s: %v %v", m, fi, err)
		}
		if ents, _ := os.ReadDir(filepath.Join(dest, m)); len(ents) != 0 {
			t.Errorf("mountpoint %s not empty", m)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(dest, "etc/passwd"))
	for _, want := range []string{"root:x:0:0:", "worker:x:1000:1000:worker:/workspace:", "nobody:x:65534:65534:"} {
		if !strings.Contains(string(passwd), want) {
			t.Errorf("/etc/passwd lacks %q", want)
		}
	}
	hosts, _ := os.ReadFile(filepath.Join(dest, "etc/hosts"))
	for _, line := range strings.Split(strings.TrimSpace(string(hosts)), "\n") {
		if !strings.HasSuffix(line, "\tlocalhost") {
			t.Errorf("/etc/hosts line %q is not localhost", line)
		}
	}
	data, _ := os.ReadFile(filepath.Join(dest, ManifestName))
	if strings.Contains(string(data), `"/`+ManifestName+`"`) {
		t.Error("manifest lists itself")
	}
	if _, err := DecodeManifest(data); err != nil {
		t.Errorf("manifest does not decode: %v", err)
	}
	fi, _ := os.Lstat(filepath.Join(dest, "usr/bin/ls"))
	if fi.ModTime().Unix() != EpochUnix {
		t.Errorf("mtime %v, want fixed epoch", fi.ModTime())
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a, da := buildMinimal(t, Options{})
	b, db := buildMinimal(t, Options{})
	if da != db {
		t.Fatalf("two builds differ: %s vs %s", da, db)
	}
	ma, _ := os.ReadFile(filepath.Join(a, ManifestName))
	mb, _ := os.ReadFile(filepath.Join(b, ManifestName))
	if !bytes.Equal(ma, mb) {
		t.Fatal("manifest bytes differ")
	}
}

func TestVerifyReportsTampering(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(root string) error
		path   string
		kind   string
	}{
		{"modify byte", func(r string) error {
			f, err := os.OpenFile(filepath.Join(r, "etc/hosts"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("X"), 0)
			return err
		}, "/etc/hosts", "digest"},
		{"chmod", func(r string) error { return os.Chmod(filepath.Join(r, "usr/bin/ls"), 0o777) }, "/usr/bin/ls", "mode"},
		{"setuid", func(r string) error { return os.Chmod(filepath.Join(r, "usr/bin/cat"), 0o755|os.ModeSetuid) }, "/usr/bin/cat", "mode"},
		{"add file", func(r string) error { return os.WriteFile(filepath.Join(r, "usr/bin/evil"), []byte("x"), 0o755) }, "/usr/bin/evil", "extra"},
		{"delete file", func(r string) error { return os.Remove(filepath.Join(r, "etc/group")) }, "/etc/group", "missing"},
		{"truncate", func(r string) error { return os.Truncate(filepath.Join(r, "etc/passwd"), 3) }, "/etc/passwd", "size"},
		{"chown", func(r string) error { return os.Lchown(filepath.Join(r, "etc/passwd"), 1000, 1000) }, "/etc/passwd", "owner"},
		{"retarget symlink", func(r string) error {
			if err := os.Remove(filepath.Join(r, "bin")); err != nil {
				return err
			}
			return os.Symlink("/tmp", filepath.Join(r, "bin"))
		}, "/bin", "digest"},
		{"file replaced by dir", func(r string) error {
			if err := os.Remove(filepath.Join(r, "etc/hosts")); err != nil {
				return err
			}
			return os.Mkdir(filepath.Join(r, "etc/hosts"), 0o755)
		}, "/etc/hosts", "type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kind == "owner" {
				privileged.Require(t) // chown
			}
			dest, _ := buildMinimal(t, Options{})
			if err := tc.tamper(dest); err != nil {
				t.Fatal(err)
			}
			err := Verify(dest)
			var me *MismatchError
			if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
				t.Fatalf("Verify = %v, want a MismatchError", err)
			}
			for _, p := range me.Problems {
				if p.Path == tc.path && p.Kind == tc.kind {
					return
				}
			}
			t.Fatalf("no %s problem for %s in:\n%v", tc.kind, tc.path, err)
		})
	}
}

func TestVerifyRefusesNonCanonicalManifest(t *testing.T) {
	dest, _ := buildMinimal(t, Options{})
	mp := filepath.Join(dest, ManifestName)
	data, _ := os.ReadFile(mp)
	if err := os.WriteFile(mp, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dest); !errors.Is(err, ErrManifest) {
		t.Fatalf("Verify with trailing newline = %v, want ErrManifest", err)
	}
}

func TestDestMustBeFresh(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), loadMinimal(t), dir, Options{}); !errors.Is(err, ErrDest) {
		t.Fatalf("non-empty dest: %v, want ErrDest", err)
	}
	empty := t.TempDir()
	if _, err := Build(context.Background(), loadMinimal(t), empty, Options{}); err != nil {
		t.Fatalf("empty existing dest: %v", err)
	}
}

func TestELFClosureOfLs(t *testing.T) {
	p := newPlanner(context.Background(), DefaultLibraryDirs())
	if err := p.addExecutable("/bin/ls"); err != nil {
		t.Fatal(err)
	}
	var libc, interp bool
	for k, n := range p.nodes {
		if n.kind == kindFile && path.Base(k) == "libc.so.6" {
			libc = true
		}
		if n.kind == kindFile && strings.HasPrefix(path.Base(k), "ld-linux") {
			interp = true
		}
	}
	if !libc || !interp {
		t.Fatalf("closure of /bin/ls: libc=%v interpreter=%v", libc, interp)
	}
	if n := p.nodes["/bin"]; n == nil || n.kind != kindSymlink {
		t.Fatalf("/bin symlink not reproduced: %+v", n)
	}
}

func TestOptionalAndMissing(t *testing.T) {
	spec := &Spec{Version: 1, Name: "t", Executables: []Entry{{Path: "/bin/true"}, {Path: "/nonexistent/tool", Optional: true}}}
	var notes bytes.Buffer
	if _, err := Build(context.Background(), spec, filepath.Join(t.TempDir(), "r"), Options{Notes: &notes}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes.String(), "skipped optional executable /nonexistent/tool") {
		t.Errorf("notes = %q", notes.String())
	}
	spec.Executables[1].Optional = false
	dest := filepath.Join(t.TempDir(), "r")
	if _, err := Build(context.Background(), spec, dest, Options{}); !errors.Is(err, ErrMissing) {
		t.Fatalf("required missing: %v, want ErrMissing", err)
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed build left %s behind", dest)
	}
}

func TestAddFlag(t *testing.T) {
	src := filepath.Join(t.TempDir(), "client")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho client\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := ParseAdd(src + "=/usr/local/bin/autonomic-effect")
	if err != nil {
		t.Fatal(err)
	}
	dest, _ := buildMinimal(t, Options{Add: []Add{a}})
	got, err := os.ReadFile(filepath.Join(dest, "usr/local/bin/autonomic-effect"))
	if err != nil || !strings.Contains(string(got), "echo client") {
		t.Fatalf("added file: %q %v", got, err)
	}
	if err := Verify(dest); err != nil {
		t.Fatal(err)
	}
	// Through the planned /bin -> usr/bin symlink.
	b, _ := ParseAdd(src + "=/bin/client2")
	dest2, _ := buildMinimal(t, Options{Add: []Add{b}})
	if _, err := os.Lstat(filepath.Join(dest2, "usr/bin/client2")); err != nil {
		t.Fatalf("--add through /bin symlink: %v", err)
	}
	for _, bad := range []string{"noequals", "=x", "x="} {
		if _, err := ParseAdd(bad); !errors.Is(err, ErrSpec) {
			t.Errorf("ParseAdd(%q) = %v", bad, err)
		}
	}
	for _, dst := range []string{"/usr/bin/ls", "/etc/passwd", "/tmp/x", "/proc/x", "relative", "/" + ManifestName} {
		_, err := Build(context.Background(), loadMinimal(t), filepath.Join(t.TempDir(), "r"), Options{Add: []Add{{Src: src, Dest: dst}}})
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrSpec) {
			t.Errorf("--add to %s: %v, want a conflict", dst, err)
		}
	}
}
