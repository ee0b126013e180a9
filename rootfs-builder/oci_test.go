package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	ocitarball "github.com/google/go-containerregistry/pkg/v1/tarball"
)

// member is one archive member of a test layer.
type member struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func layerTar(t testing.TB, ms []member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Mode: m.mode, Linkname: m.link, Size: int64(len(m.body)), Uid: 1000, Gid: 1000}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if m.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.typ == tar.TypeReg {
			io.WriteString(tw, m.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// testImage is an image of the given layers; it returns the image and its
// manifest digest.
func testImage(t testing.TB, layers ...[]member) (v1.Image, string) {
	t.Helper()
	img := empty.Image
	for _, ms := range layers {
		data := layerTar(t, ms)
		l, err := ocitarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return img, d.String()
}

// saveArchive writes img as a `docker save` archive.
func saveArchive(t testing.TB, img v1.Image) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	ref, _ := name.ParseReference("autonomic.test/env:1")
	if err := ocitarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// saveLayout writes img as an OCI image layout directory.
func saveLayout(t testing.TB, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

func reg(name string, mode int64, body string) member {
	return member{name: name, typ: tar.TypeReg, mode: mode, body: body}
}
func dir(name string) member { return member{name: name, typ: tar.TypeDir, mode: 0o755} }

// envLayers: a base layer, and an upper one that whites out, makes a
// directory opaque, hard-links, replaces and adds.
var envLayers = [][]member{
	{
		dir("usr/"), dir("usr/bin/"), reg("usr/bin/tool", 0o755, "tool v1\n"),
		reg("usr/bin/su", 0o4755, "setuid\n"), reg("usr/bin/sg", 0o2755, "setgid\n"), dir("tmp/"),
		dir("etc/"), dir("etc/app/"), reg("etc/app/conf", 0o644, "secret=1\n"), reg("etc/app/keep", 0o644, "keep\n"),
		reg("etc/shadow", 0o640, "root:$6$x:1::::::\n"), reg("etc/passwd", 0o644, "evil::0:0::/:/bin/sh\n"),
		dir("opt/"), dir("opt/old/"), reg("opt/old/a", 0o644, "a\n"), reg("opt/old/b", 0o644, "b\n"),
		dir("root/"), reg("root/.bashrc", 0o644, "x\n"), dir("proc/"), reg("proc/cpuinfo", 0o644, "fake\n"),
		reg("tmp/left", 0o644, "x\n"), member{name: "usr/bin/sh", typ: tar.TypeSymlink, link: "tool"},
	},
	{
		reg("etc/app/.wh.conf", 0o644, ""),
		reg("opt/old/.wh..wh..opq", 0o644, ""), reg("opt/old/c", 0o644, "c\n"),
		member{name: "usr/bin/tool2", typ: tar.TypeLink, link: "usr/bin/tool"},
		reg("usr/bin/tool", 0o755, "tool v2\n"),
		reg("etc/app/new", 0o600, "new\n"),
	},
}

// An image made here (both on-disk formats) becomes a rootfs whose tree is
// the image's layers applied as a container runtime applies them, minus
// what no rootfs may hold, and whose manifest pins the image.
func TestOCIImageEnvironment(t *testing.T) {
	img, digest := testImage(t, envLayers...)
	for _, src := range []struct{ kind, path string }{{"archive", saveArchive(t, img)}, {"layout", saveLayout(t, img)}} {
		t.Run(src.kind, func(t *testing.T) {
			spec := &Spec{Version: 1, Name: "img", OCI: &OCI{Path: src.path, Digest: digest},
				Symlinks: []SymlinkTo{{Path: "/usr/local/bin/tool", Target: "/usr/bin/tool"}}}
			dest := filepath.Join(t.TempDir(), "rootfs")
			var notes bytes.Buffer
			if _, err := Build(context.Background(), spec, dest, Options{Notes: &notes}); err != nil {
				t.Fatalf("build: %v", err)
			}
			read := func(p string) string {
				b, err := os.ReadFile(filepath.Join(dest, p))
				if err != nil {
					return "<" + err.Error() + ">"
				}
				return string(b)
			}
			for p, want := range map[string]string{
				"usr/bin/tool":  "tool v2\n", // the upper layer's
				"usr/bin/tool2": "tool v1\n", // a hard link to the lower layer's file
				"etc/app/keep":  "keep\n",
				"etc/app/new":   "new\n",
				"opt/old/c":     "c\n",
			} {
				if got := read(p); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			for _, p := range []string{"etc/app/conf", "opt/old/a", "opt/old/b", "etc/shadow", "root", "proc/cpuinfo", "tmp/left"} {
				if _, err := os.Lstat(filepath.Join(dest, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is in the rootfs (%v): whited out, hidden by an opaque directory, denied or beneath a mountpoint", p, err)
				}
			}
			if got := read("etc/passwd"); strings.Contains(got, "evil") {
				t.Errorf("the image's /etc/passwd replaced the builder's: %q", got)
			}
			for _, p := range []string{"usr/bin/su", "usr/bin/sg"} {
				fi, err := os.Lstat(filepath.Join(dest, p))
				if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
					t.Errorf("%s: %v %v, want 0755 without setuid/setgid", p, fi.Mode(), err)
				}
			}
			if l, err := os.Readlink(filepath.Join(dest, "usr/bin/sh")); err != nil || l != "tool" {
				t.Errorf("usr/bin/sh -> %q, %v", l, err)
			}
			if err := Verify(dest); err != nil {
				t.Fatal(err)
			}
			mb, _ := os.ReadFile(filepath.Join(dest, ManifestName))
			m, err := DecodeManifest(mb)
			if err != nil {
				t.Fatal(err)
			}
			if m.Environment == nil || m.Environment.Kind != "oci" || m.Environment.Image != digest {
				t.Fatalf("manifest environment %+v, want the pinned image %s", m.Environment, digest)
			}
			for _, n := range []string{"/etc/shadow left out", "/root left out", "/etc/passwd replaced"} {
				if !strings.Contains(notes.String(), n[:strings.Index(n, " ")]) {
					t.Errorf("no note for %s: %s", n, notes.String())
				}
			}
		})
	}
}

// What an image may not do: each is refused whole, and nothing is left.
func TestOCIImageRefusals(t *testing.T) {
	good := []member{dir("etc/"), reg("etc/x", 0o644, "x\n")}
	for _, c := range []struct {
		name   string
		layers [][]member
		pin    func(string) string
		lim    *ociLimits
	}{
		{"device node", [][]member{good, {member{name: "dev2/null", typ: tar.TypeChar, mode: 0o666}}}, nil, nil},
		{"fifo", [][]member{{member{name: "run2/fifo", typ: tar.TypeFifo, mode: 0o644}}}, nil, nil},
		{"dotdot", [][]member{{reg("etc/../../escape", 0o644, "x")}}, nil, nil},
		{"through a symlink", [][]member{{member{name: "lib", typ: tar.TypeSymlink, link: "/etc"}}, {reg("lib/passwd", 0o644, "x")}}, nil, nil},
		{"hard link to nothing", [][]member{{member{name: "a", typ: tar.TypeLink, link: "missing"}}}, nil, nil},
		{"hard link to a directory", [][]member{good, {member{name: "a", typ: tar.TypeLink, link: "etc"}}}, nil, nil},
		{"empty whiteout", [][]member{good, {reg("etc/.wh.", 0o644, "")}}, nil, nil},
		{"root is a file", [][]member{{reg(".", 0o644, "x")}}, nil, nil},
		{"another pin", [][]member{good}, func(string) string { return "sha256:" + strings.Repeat("0", 64) }, nil},
		{"too many entries", [][]member{good, good}, nil, &ociLimits{Entries: 3, FileBytes: 1 << 20, Bytes: 1 << 20, Layers: 8}},
		{"file too large", [][]member{{reg("big", 0o644, strings.Repeat("x", 100))}}, nil, &ociLimits{Entries: 10, FileBytes: 99, Bytes: 1 << 20, Layers: 8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			img, digest := testImage(t, c.layers...)
			if c.pin != nil {
				digest = c.pin(digest)
			}
			o := &OCI{Path: saveArchive(t, img), Digest: digest}
			var err error
			if c.lim != nil {
				var loaded v1.Image
				if loaded, err = loadOCI(o); err == nil {
					_, err = unpackOCI(loaded, t.TempDir(), *c.lim)
				}
			} else {
				dest := filepath.Join(t.TempDir(), "rootfs")
				_, err = Build(context.Background(), &Spec{Version: 1, Name: "img", OCI: o}, dest, Options{})
				if _, serr := os.Stat(dest); serr == nil {
					t.Errorf("a refused build left %s", dest)
				}
			}
			if !errors.Is(err, ErrImage) {
				t.Fatalf("err = %v, want ErrImage", err)
			}
		})
	}
}

// A layer whose bytes are not the config's diff_id is refused: first a
// swapped blob (the compressed digest no longer matches either), then a
// layout whose manifest, config and index were rewritten consistently
// around a diff_id the layer's bytes do not have — only the builder's own
// check of the uncompressed stream sees that one.
func TestOCILayerMustMatchDiffID(t *testing.T) {
	img, digest := testImage(t, []member{reg("a", 0o644, "original")})
	build := func(dir, digest string) error {
		_, err := Build(context.Background(), &Spec{Version: 1, Name: "img", OCI: &OCI{Path: dir, Digest: digest}}, filepath.Join(t.TempDir(), "r"), Options{})
		return err
	}
	swapped := saveLayout(t, img)
	m, _ := img.Manifest()
	blob := filepath.Join(swapped, "blobs", "sha256", m.Layers[0].Digest.Hex)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := build(swapped, digest); !errors.Is(err, ErrImage) {
		t.Fatalf("a swapped layer blob: %v, want ErrImage", err)
	}

	lied := saveLayout(t, img)
	put := func(v any) v1.Hash {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		h, _, _ := v1.SHA256(bytes.NewReader(b))
		if err := os.WriteFile(filepath.Join(lied, "blobs", "sha256", h.Hex), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return h
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs[0], _, _ = v1.SHA256(strings.NewReader("other bytes"))
	cb, _ := json.Marshal(cfg)
	man := m.DeepCopy()
	man.Config.Digest, man.Config.Size = put(cfg), int64(len(cb))
	mb, _ := json.Marshal(man)
	mh := put(man)
	idx := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{"mediaType": string(man.MediaType), "digest": mh.String(), "size": len(mb)}}}
	ib, _ := json.Marshal(idx)
	if err := os.WriteFile(filepath.Join(lied, "index.json"), ib, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := build(lied, mh.String()); !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "diff_id") {
		t.Fatalf("a layer that is not its diff_id: %v, want ErrImage naming the diff_id", err)
	}
}

// An environment's spec is checked like every spec: one environment, no
// host copies beside it, a pinned digest, Debian names and an http(s)
// mirror without credentials.
func TestEnvironmentSpecValidation(t *testing.T) {
	pin := "sha256:" + strings.Repeat("a", 64)
	for _, c := range []struct {
		doc string
		ok  bool
	}{
		{`{"version":1,"name":"e","oci":{"path":"/i.tar","digest":"` + pin + `"}}`, true},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","packages":["python3-pytest","g++"]}}`, true},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","mirror":"https://mirror.example/debian"}}`, true},
		{`{"version":1,"name":"e","oci":{"path":"/i.tar","digest":"` + pin + `"},"debian":{"suite":"bookworm"}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm"},"executables":[{"path":"/bin/sh"}]}`, false},
		{`{"version":1,"name":"e","oci":{"path":"/i.tar","digest":"` + pin + `"},"library_dirs":["/lib"]}`, false},
		{`{"version":1,"name":"e","oci":{"path":"/i.tar","digest":"sha256:ABC"}}`, false},
		{`{"version":1,"name":"e","oci":{"path":"i.tar","digest":"` + pin + `"}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","packages":["--hook-dir=/tmp"]}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","packages":["hello=2.10"]}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"../x"}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","mirror":"http://user:pw@mirror/debian"}}`, false},
		{`{"version":1,"name":"e","debian":{"suite":"bookworm","mirror":"file:///srv/debian"}}`, false},
	} {
		_, err := DecodeSpec([]byte(c.doc))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrSpec)) {
			t.Errorf("%s: %v, want ok=%v", c.doc, err, c.ok)
		}
	}
}

// A dynamically linked host binary added onto an environment (the agent
// CLIs onto dev) loads the environment's own libraries: where the
// environment has the loader and libc at the paths the binary's closure
// names, the build keeps the environment's and copies no second, host
// one over them (before, the two sources conflicted and dev never built);
// a private key the environment ships (Go's testdata) is left out with a
// note, a certificate beside it kept; the build host's resolv.conf and
// hostname (mmdebstrap copies them) are left out.
func TestAddedBinaryUsesTheEnvironmentsLibraries(t *testing.T) {
	interp, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
	if err != nil {
		t.Skip("no x86-64 loader on this host")
	}
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skip("no x86-64 libc on this host")
	}
	var ms []member
	seen := map[string]bool{}
	for _, p := range []string{interp, libc} {
		rel := strings.TrimPrefix(p, "/")
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				ms = append([]member{dir(d + "/")}, ms...)
			}
		}
	}
	ms = append(ms, reg(strings.TrimPrefix(interp, "/"), 0o755, "the environment's loader\n"), reg(strings.TrimPrefix(libc, "/"), 0o755, "the environment's libc\n"),
		// A package's test key (Go's crypto/tls testdata): left out, noted.
		dir("usr/share/"), dir("usr/share/go/"), reg("usr/share/go/example-key.pem", 0o644, "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"),
		reg("usr/share/go/example-cert.pem", 0o644, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
		// What mmdebstrap copies from the build host.
		dir("etc/"), reg("etc/resolv.conf", 0o644, "nameserver 10.255.255.53\n"), reg("etc/hostname", 0o644, "buildhost\n"))
	img, digest := testImage(t, ms)
	spec := &Spec{Version: 1, Name: "img", OCI: &OCI{Path: saveLayout(t, img), Digest: digest}}
	dest := filepath.Join(t.TempDir(), "rootfs")
	var notes bytes.Buffer
	if _, err := Build(context.Background(), spec, dest, Options{Add: []Add{{Src: "/bin/true", Dest: "/usr/local/bin/tool"}}, Notes: &notes}); err != nil {
		t.Fatalf("build: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dest, "usr/share/go/example-key.pem")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(notes.String(), "example-key.pem left out") {
		t.Errorf("the environment's private key: %v; notes %s", err, notes.String())
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/share/go/example-cert.pem")); err != nil {
		t.Errorf("the environment's certificate: %v", err)
	}
	for _, p := range []string{"etc/resolv.conf", "etc/hostname"} {
		if _, err := os.Lstat(filepath.Join(dest, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the build host's %s is in the rootfs (%v)", p, err)
		}
	}
	for p, want := range map[string]string{interp: "the environment's loader\n", libc: "the environment's libc\n"} {
		if b, err := os.ReadFile(filepath.Join(dest, p)); err != nil || string(b) != want {
			t.Errorf("%s in the rootfs: %q %v, want the environment's", p, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/local/bin/tool")); err != nil {
		t.Errorf("the added binary: %v", err)
	}
}
