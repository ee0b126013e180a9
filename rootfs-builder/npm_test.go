package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testIntegrity = "sha512-1IOFzL2Xg86tLdw6kDo3GoKbkQENgQi7TI6rlEvN132R7ngSw7SNOIQoTcnKzSZZ8kf9N9GynCweSoaFbqk2Eg=="

func TestDecodeSpecNPM(t *testing.T) {
	ok := `{"version":1,"name":"x","npm":{"packages":[{"name":"@openai/codex","version":"0.171.0"}],"files":[{"from":"@openai/codex/bin/codex","to":"/usr/local/bin/codex"}]}}`
	if _, err := DecodeSpec([]byte(ok)); err != nil {
		t.Fatalf("valid npm spec: %v", err)
	}
	cases := []struct{ name, npm, want string }{
		{"range", `{"packages":[{"name":"a","version":"^1.0.0"}],"files":[{"from":"a/x","to":"/x"}]}`, "not an exact version"},
		{"tag", `{"packages":[{"name":"a","version":"latest"}],"files":[{"from":"a/x","to":"/x"}]}`, "not an exact version"},
		{"bad name", `{"packages":[{"name":"../a","version":"1.0.0"}],"files":[{"from":"a/x","to":"/x"}]}`, "not an npm package name"},
		{"twice", `{"packages":[{"name":"a","version":"1.0.0"},{"name":"a","version":"1.0.1"}],"files":[{"from":"a/x","to":"/x"}]}`, "listed twice"},
		{"no packages", `{"packages":[],"files":[{"from":"a/x","to":"/x"}]}`, "packages is empty"},
		{"no files", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[]}`, "files is empty"},
		{"escaping from", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"../etc/passwd","to":"/x"}]}`, "below node_modules"},
		{"absolute from", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"/etc/passwd","to":"/x"}]}`, "below node_modules"},
		{"unclean from", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"a/../../x","to":"/x"}]}`, "below node_modules"},
		{"relative to", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"a/x","to":"x"}]}`, "absolute clean"},
		{"root to", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"a/x","to":"/"}]}`, "absolute clean"},
		{"same to", `{"packages":[{"name":"a","version":"1.0.0"}],"files":[{"from":"a/x","to":"/x"},{"from":"a/y","to":"/x"}]}`, "named twice"},
		{"unknown field", `{"packages":[{"name":"a","version":"1.0.0","integrity":"x"}],"files":[{"from":"a/x","to":"/x"}]}`, "unknown field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSpec([]byte(`{"version":1,"name":"x","npm":` + tc.npm + `}`))
			if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeSpec = %v, want ErrSpec with %q", err, tc.want)
			}
		})
	}
}

// fakeInstall writes a finished install into the npm cache under n's key:
// the cache-hit path, which reads and checks the lock like a fresh install.
func fakeInstall(t *testing.T, cache string, n *NPM, lock map[string]any, files map[string]string) {
	t.Helper()
	dir := filepath.Join(cache, n.key())
	for rel, content := range files {
		p := filepath.Join(dir, "node_modules", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"lockfileVersion": 3, "packages": lock})
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func npmSpec(t *testing.T, n *NPM) *Spec {
	s := loadMinimal(t)
	s.NPM = n
	return s
}

func TestBuildNPMRecordsPackages(t *testing.T) {
	cache := t.TempDir()
	n := &NPM{
		Packages: []NPMPackage{{Name: "@scope/tool", Version: "1.2.3"}},
		Files:    []NPMFile{{From: "@scope/tool-linux-x64/bin/tool", To: "/usr/local/bin/tool"}},
	}
	fakeInstall(t, cache, n, map[string]any{
		"":                                   map[string]any{"name": "x"},
		"node_modules/@scope/tool":           map[string]any{"version": "1.2.3", "integrity": testIntegrity},
		"node_modules/@scope/tool-linux-x64": map[string]any{"name": "@scope/tool", "version": "1.2.3-linux-x64", "integrity": testIntegrity, "optional": true},
		// Listed in the lock for another platform, never installed here.
		"node_modules/@scope/tool-win32-x64": map[string]any{"version": "1.2.3", "integrity": testIntegrity, "optional": true},
	}, map[string]string{
		"@scope/tool/package.json":                "{}",
		"@scope/tool-linux-x64/package.json":      "{}",
		"@scope/tool-linux-x64/bin/tool":          "#!/bin/sh\necho tool 1.2.3\n",
		"@scope/tool-linux-x64/bin/unused-helper": "not copied",
	})
	dest := filepath.Join(t.TempDir(), "root")
	digest, err := Build(context.Background(), npmSpec(t, n), dest, Options{NPMCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(dest); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dest, ManifestName))
	if digestBytes(data) != digest {
		t.Fatal("digest is not of manifest.json")
	}
	m, err := DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{
		{Name: "@scope/tool", Version: "1.2.3", Integrity: testIntegrity},
		{Name: "@scope/tool", Version: "1.2.3-linux-x64", Integrity: testIntegrity},
	}
	if len(m.Packages) != len(want) || m.Packages[0] != want[0] || m.Packages[1] != want[1] {
		t.Fatalf("manifest packages = %+v, want %+v", m.Packages, want)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "usr/local/bin/tool")); err != nil || !strings.Contains(string(b), "tool 1.2.3") {
		t.Fatalf("npm file not placed: %q, %v", b, err)
	}
	for _, absent := range []string{"usr/local/bin/unused-helper", "node_modules"} {
		if _, err := os.Lstat(filepath.Join(dest, absent)); err == nil {
			t.Errorf("%s entered the rootfs; only named npm files may", absent)
		}
	}
}

func TestBuildNPMRefusesBadInstall(t *testing.T) {
	n := &NPM{
		Packages: []NPMPackage{{Name: "tool", Version: "1.2.3"}},
		Files:    []NPMFile{{From: "tool/bin/tool", To: "/usr/local/bin/tool"}},
	}
	files := map[string]string{"tool/package.json": "{}", "tool/bin/tool": "#!/bin/sh\n"}
	cases := []struct {
		name string
		lock map[string]any
		want error
		msg  string
	}{
		{"other version", map[string]any{"node_modules/tool": map[string]any{"version": "1.2.4", "integrity": testIntegrity}}, ErrNPM, "pinned 1.2.3"},
		{"not installed", map[string]any{}, ErrNPM, "not in the lock"},
		{"no integrity", map[string]any{"node_modules/tool": map[string]any{"version": "1.2.3"}}, ErrNPM, "integrity"},
		{"sha1 integrity", map[string]any{"node_modules/tool": map[string]any{"version": "1.2.3", "integrity": "sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA="}}, ErrNPM, "integrity"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			fakeInstall(t, cache, n, tc.lock, files)
			dest := filepath.Join(t.TempDir(), "root")
			_, err := Build(context.Background(), npmSpec(t, n), dest, Options{NPMCache: cache})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Build = %v, want %v with %q", err, tc.want, tc.msg)
			}
			if _, err := os.Lstat(dest); err == nil {
				t.Error("failed build left its destination")
			}
		})
	}
	t.Run("symlink out of node_modules", func(t *testing.T) {
		cache := t.TempDir()
		fakeInstall(t, cache, n, map[string]any{"node_modules/tool": map[string]any{"version": "1.2.3", "integrity": testIntegrity}},
			map[string]string{"tool/package.json": "{}"})
		bin := filepath.Join(cache, n.key(), "node_modules/tool/bin")
		os.MkdirAll(bin, 0o755)
		if err := os.Symlink("/usr/bin/true", filepath.Join(bin, "tool")); err != nil {
			t.Fatal(err)
		}
		_, err := Build(context.Background(), npmSpec(t, n), filepath.Join(t.TempDir(), "root"), Options{NPMCache: cache})
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "outside node_modules") {
			t.Fatalf("Build = %v, want ErrSpec (outside node_modules)", err)
		}
	})
}

func TestManifestPackagesCanonical(t *testing.T) {
	m := &Manifest{Format: 1, Entries: []ManifestEntry{{Path: "/", Type: "dir", Mode: "0755"}},
		Packages: []Package{{Name: "b", Version: "1.0.0", Integrity: "i"}, {Name: "a", Version: "1.0.0", Integrity: "i"}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"entries":[{"gid":0,"mode":"0755","path":"/","size":0,"type":"dir","uid":0}],"format":1,"packages":[{"integrity":"i","name":"a","version":"1.0.0"},{"integrity":"i","name":"b","version":"1.0.0"}]}`
	if string(b) != want {
		t.Fatalf("Encode = %s\nwant     %s", b, want)
	}
	if _, err := DecodeManifest(b); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"entries":[{"gid":0,"mode":"0755","path":"/","size":0,"type":"dir","uid":0}],"format":1,"packages":[]}`,
		`{"entries":[{"gid":0,"mode":"0755","path":"/","size":0,"type":"dir","uid":0}],"format":1,"packages":[{"integrity":"i","name":"b","version":"1.0.0"},{"integrity":"i","name":"a","version":"1.0.0"}]}`,
		`{"entries":[{"gid":0,"mode":"0755","path":"/","size":0,"type":"dir","uid":0}],"format":1,"packages":[{"integrity":"i","name":"a","version":"1.0.0"},{"integrity":"i","name":"a","version":"1.0.0"}]}`,
	} {
		if _, err := DecodeManifest([]byte(bad)); !errors.Is(err, ErrManifest) {
			t.Errorf("DecodeManifest(%s) = %v, want ErrManifest", bad, err)
		}
	}
}

func TestBuildCachedReusesVerifiedTree(t *testing.T) {
	cache := t.TempDir()
	spec := loadMinimal(t)
	dir, d1, hit, err := BuildCached(context.Background(), spec, cache, Options{})
	if err != nil || hit {
		t.Fatalf("first BuildCached: hit=%v err=%v", hit, err)
	}
	dir2, d2, hit, err := BuildCached(context.Background(), spec, cache, Options{})
	if err != nil || !hit || dir2 != dir || d2 != d1 {
		t.Fatalf("second BuildCached: %s %s hit=%v err=%v; first %s %s", dir2, d2, hit, err, dir, d1)
	}
	other := loadMinimal(t)
	other.Description = "another spec, another key"
	if dir3, _, hit, err := BuildCached(context.Background(), other, cache, Options{}); err != nil || hit || dir3 == dir {
		t.Fatalf("changed spec reused the cache: %s hit=%v err=%v", dir3, hit, err)
	}
	// A tampered cached tree is refused, not served and not rebuilt over.
	if err := os.WriteFile(filepath.Join(dir, "workspace", "planted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := BuildCached(context.Background(), spec, cache, Options{}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("tampered cache: %v, want ErrMismatch", err)
	}
}
