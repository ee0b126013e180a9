package domain_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	ocitarball "github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// runOn runs sh -c script in a one-shot domain on the named rootfs.
func runOn(t *testing.T, ctx context.Context, d *domain.Linux, rootfsName, script string) string {
	t.Helper()
	ws, _ := workspace(t, nil)
	r, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, Rootfs: rootfsName,
		Argv: []string{"/bin/sh", "-c", script}, OneShot: true})
	if err != nil {
		t.Fatalf("create on %s: %v", rootfsName, err)
	}
	ex, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("on %s: exited %+v: %s", rootfsName, ex, r.Output())
	}
	return string(r.Output())
}

// A Debian environment: bootstrapped by mmdebstrap from the archive (its
// signatures checked against the archive keyring), every installed package
// in the manifest with the version dpkg itself reports inside the domain,
// verified by the launcher before its first use, and run.
func TestDebianEnvironment(t *testing.T) {
	d, _ := setup(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		privileged.Skip(t, "mmdebstrap is not installed (scripts/provision_host.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := newID("debian")
	dest := filepath.Join(bed.Dir, "rootfs-"+name)
	spec := &rootfs.Spec{Version: 1, Name: "debian-test", Debian: &rootfs.Debian{Suite: "bookworm", Packages: []string{"hello"}}}
	digest, err := rootfs.Build(ctx, spec, dest, rootfs.Options{})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	mb, err := os.ReadFile(filepath.Join(dest, rootfs.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := rootfs.DecodeManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Environment == nil || m.Environment.Kind != "debian" || m.Environment.Suite != "bookworm" {
		t.Fatalf("manifest environment %+v", m.Environment)
	}
	versions := map[string]string{}
	for _, p := range m.Environment.Debian {
		versions[p.Name] = p.Version
	}
	if versions["hello"] == "" || versions["base-files"] == "" || versions["dpkg"] == "" {
		t.Fatalf("the manifest lacks installed packages: %d listed, hello=%q", len(versions), versions["hello"])
	}
	if err := bed.NameRootfs(name, dest, digest); err != nil {
		t.Fatal(err)
	}
	out := runOn(t, ctx, d, name, `hello && dpkg-query -W -f '${Version}\n' hello && test ! -e /etc/shadow && echo no-shadow`)
	if want := "Hello, world!\n" + versions["hello"] + "\nno-shadow\n"; out != want {
		t.Fatalf("in the domain: %q, want %q", out, want)
	}
}

// An OCI image built here becomes an environment the launcher runs: its
// shell from the image, a setuid file in it stripped of the bit.
func TestOCIImageEnvironmentRunsInADomain(t *testing.T) {
	d, ctx := setup(t)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		privileged.Skip(t, "busybox-static is not installed (scripts/provision_host.sh installs it)")
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []struct {
		tar.Header
		body []byte
	}{
		{tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bb},
		{tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox"}, nil},
		{tar.Header{Name: "usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755}, []byte("#!/bin/sh\n")},
		{tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("ID=autonomic-test\n")},
	} {
		h.Size = int64(len(h.body))
		if err := tw.WriteHeader(&h.Header); err != nil {
			t.Fatal(err)
		}
		tw.Write(h.body)
	}
	tw.Close()
	data := b.Bytes()
	layer, err := ocitarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	dg, _ := img.Digest()
	archive := filepath.Join(t.TempDir(), "image.tar")
	ref, _ := name.ParseReference("autonomic.test/busybox:1")
	if err := ocitarball.WriteToFile(archive, ref, img); err != nil {
		t.Fatal(err)
	}
	rname := newID("oci")
	dest := filepath.Join(bed.Dir, "rootfs-"+rname)
	digest, err := rootfs.Build(ctx, &rootfs.Spec{Version: 1, Name: "oci-test", OCI: &rootfs.OCI{Path: archive, Digest: dg.String()}}, dest, rootfs.Options{})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if err := bed.NameRootfs(rname, dest, digest); err != nil {
		t.Fatal(err)
	}
	out := runOn(t, ctx, d, rname, `cat /etc/os-release; busybox stat -c %a /usr/bin/su`)
	if strings.TrimSpace(out) != "ID=autonomic-test\n755" {
		t.Fatalf("in the domain: %q", out)
	}
}
