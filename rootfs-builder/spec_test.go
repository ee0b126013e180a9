package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecodeSpecStrict(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown top field", `{"version":1,"name":"x","extra":1}`, "unknown field"},
		{"unknown entry field", `{"version":1,"name":"x","files":[{"path":"/a","mode":1}]}`, "unknown field"},
		{"duplicate top key", `{"version":1,"name":"x","name":"y"}`, `duplicate key "name"`},
		{"duplicate nested key", `{"version":1,"name":"x","files":[{"path":"/a","path":"/etc/shadow"}]}`, `duplicate key "files[0].path"`},
		{"case-folded key", `{"version":1,"Name":"x"}`, "keys are lowercase"},
		{"kelvin sign key", "{\"version\":1,\"name\":\"x\",\"files\":[{\"path\":\"/a\",\"optional\":true,\"\u212aey\":1}]}", "keys are lowercase"},
		{"trailing data", `{"version":1,"name":"x"} {}`, "trailing"},
		{"not an object", `[1]`, "cannot unmarshal"},
		{"bad utf8", "{\"version\":1,\"name\":\"\xff\"}", "UTF-8"},
		{"wrong version", `{"version":2,"name":"x"}`, "version 2 not supported"},
		{"missing name", `{"version":1}`, "name is required"},
		{"relative path", `{"version":1,"name":"x","executables":[{"path":"bin/sh"}]}`, "not absolute"},
		{"unclean path", `{"version":1,"name":"x","files":[{"path":"/usr/../etc/shadow"}]}`, "not clean"},
		{"root directory", `{"version":1,"name":"x","directories":[{"path":"/"}]}`, "host root"},
		{"bad exclude", `{"version":1,"name":"x","directories":[{"path":"/a","exclude":["["]}]}`, "exclude"},
		{"empty symlink target", `{"version":1,"name":"x","symlinks":[{"path":"/a","target":""}]}`, "target"},
		{"wrong type", `{"version":"1","name":"x"}`, "cannot unmarshal"},
		{"too deep", `{"version":1,"name":"x","files":[[[[[[[[[[]]]]]]]]]]}`, "nested deeper"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSpec([]byte(tc.doc))
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("DecodeSpec = %v, want ErrSpec", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestShippedSpecsDecode(t *testing.T) {
	files, _ := filepath.Glob("specs/*.json")
	if len(files) < 2 {
		t.Fatalf("specs: %v", files)
	}
	for _, f := range files {
		if _, err := LoadSpec(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// The worker spec is resolved (planned) on every run: that checks every
// required tool and its ELF closure exists on this host and that nothing in
// it is denied, without copying ~600 MB. AUTONOMIC_ROOTFS_WORKER=1 also
// builds and verifies it.
func TestWorkerSpecResolves(t *testing.T) {
	spec, err := LoadSpec("specs/worker.json")
	if err != nil {
		t.Fatal(err)
	}
	p := newPlanner(t.Context(), DefaultLibraryDirs())
	if err := p.addSpec(spec); err != nil {
		t.Fatalf("worker spec does not resolve on this host: %v", err)
	}
	for _, must := range []string{"/usr/bin/git", "/usr/bin/make", "/usr/bin/bash", "/usr/lib/git-core/git-remote-http"} {
		if _, ok := p.nodes[must]; !ok {
			t.Errorf("worker plan lacks %s", must)
		}
	}
	t.Logf("worker plan: %d paths, %d notes", len(p.nodes), len(p.notes))
	if os.Getenv("AUTONOMIC_ROOTFS_WORKER") != "1" {
		return
	}
	dest := filepath.Join(t.TempDir(), "worker")
	d, err := Build(t.Context(), spec, dest, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worker rootfs %s", d)
}
