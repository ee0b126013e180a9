package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
)

// tarball builds an npm package tarball whose every lifecycle script would
// leave a marker file if npm ran it.
func tarball(t *testing.T, name, version, marker string) []byte {
	t.Helper()
	scripts := map[string]string{}
	for _, s := range []string{"preinstall", "install", "postinstall", "prepare"} {
		scripts[s] = fmt.Sprintf("echo %s >> %s", s, marker)
	}
	pj, _ := json.Marshal(map[string]any{"name": name, "version": version, "bin": map[string]string{"tool": "bin/tool"}, "scripts": scripts})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		mode int64
		body string
	}{{"package/package.json", 0o644, string(pj)}, {"package/bin/tool", 0o755, "#!/bin/sh\necho tool " + version + "\n"}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestNPMInstallAgainstLocalRegistry runs the real npm client against a
// loopback registry: the pinned version is installed though a newer one is
// "latest", no lifecycle script runs, the manifest records npm's integrity
// of the tarball, and the cached install is sealed (root-owned, unwritable
// by the account npm ran as).
func TestNPMInstallAgainstLocalRegistry(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		privileged.Skip(t, "npm not found")
	}
	work, err := os.MkdirTemp("", "npm-registry-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o777) // the marker is writable by whoever npm runs as
	marker := filepath.Join(work, "scripts-ran")
	const name = "autonomic-test-tool"
	tarballs := map[string][]byte{}
	versions := map[string]any{}
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch {
		case r.URL.Path == "/"+name:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"name": name, "dist-tags": map[string]string{"latest": "1.0.1"}, "versions": versions})
		case strings.HasPrefix(r.URL.Path, "/"+name+"/-/"):
			v := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"+name+"/-/"+name+"-"), ".tgz")
			if b, ok := tarballs[v]; ok {
				w.Write(b)
				return
			}
			http.NotFound(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	integrity := map[string]string{}
	for _, v := range []string{"1.0.0", "1.0.1"} {
		b := tarball(t, name, v, marker)
		tarballs[v] = b
		s512 := sha512.Sum512(b)
		s1 := sha1.Sum(b)
		integrity[v] = "sha512-" + base64.StdEncoding.EncodeToString(s512[:])
		versions[v] = map[string]any{"name": name, "version": v, "bin": map[string]string{"tool": "bin/tool"},
			"scripts": map[string]string{"postinstall": "echo postinstall >> " + marker},
			"dist":    map[string]any{"tarball": fmt.Sprintf("%s/%s/-/%s-%s.tgz", srv.URL, name, name, v), "integrity": integrity[v], "shasum": hex.EncodeToString(s1[:])}}
	}
	t.Setenv("npm_config_registry", srv.URL+"/")

	cache := filepath.Join(work, "cache")
	n := &NPM{Packages: []NPMPackage{{Name: name, Version: "1.0.0"}}, Files: []NPMFile{{From: name + "/bin/tool", To: "/usr/local/bin/tool"}}}
	dest := filepath.Join(work, "root")
	var progress bytes.Buffer
	if _, err := Build(context.Background(), npmSpec(t, n), dest, Options{NPMCache: cache, Progress: &progress}); err != nil {
		t.Fatalf("build: %v\nregistry saw %v\n%s", err, paths, progress.String())
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("npm ran lifecycle scripts of the package: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "usr/local/bin/tool")); string(b) != "#!/bin/sh\necho tool 1.0.0\n" {
		t.Fatalf("placed tool = %q, want the pinned 1.0.0", b)
	}
	data, _ := os.ReadFile(filepath.Join(dest, ManifestName))
	m, err := DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Packages) != 1 || m.Packages[0] != (Package{Name: name, Version: "1.0.0", Integrity: integrity["1.0.0"]}) {
		t.Fatalf("manifest packages %+v, want %s@1.0.0 %s", m.Packages, name, integrity["1.0.0"])
	}
	install := filepath.Join(cache, n.key())
	err = filepath.WalkDir(install, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := os.Lstat(p)
		st := fi.Sys().(*syscall.Stat_t)
		if os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0) {
			t.Errorf("%s owned by %d:%d after sealing", p, st.Uid, st.Gid)
		}
		if d.Type()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s is %v: writable by group or others", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(install, ".home")); err == nil {
		t.Error("npm's private HOME and tarball cache were kept in the install")
	}

	// A second build takes the install from the cache: no registry traffic.
	mu.Lock()
	before := len(paths)
	mu.Unlock()
	if _, err := Build(context.Background(), npmSpec(t, n), filepath.Join(work, "root2"), Options{NPMCache: cache}); err != nil {
		t.Fatal(err)
	}
	if len(paths) != before {
		t.Errorf("cached install still asked the registry: %v", paths[before:])
	}
}
