package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildVerifyCLI(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "root")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"build", "--spec", "../../specs/minimal.json", "--dest", dest, "--quiet"}, &out, &errb); code != 0 {
		t.Fatalf("build exit %d: %s", code, errb.String())
	}
	digest := strings.TrimSpace(out.String())
	if len(digest) != 64 {
		t.Fatalf("build printed %q, want a SHA-256", digest)
	}
	if strings.Contains(errb.String(), "paths (") {
		t.Errorf("--quiet still printed progress: %s", errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"verify", dest}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != digest {
		t.Fatalf("verify exit %d, out %q", code, out.String())
	}
	if err := os.WriteFile(filepath.Join(dest, "workspace", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"verify", dest}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "extra: /workspace/x") {
		t.Fatalf("verify of tampered tree: exit %d, %s", code, errb.String())
	}
	for _, args := range [][]string{{}, {"nope"}, {"build"}, {"verify"}, {"build", "--spec", "x", "--dest", dest, "--add", "bad"}} {
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := run(context.Background(), []string{"build", "--spec", "../../specs/minimal.json", "--dest", dest}, &out, &errb); code != 1 {
		t.Errorf("build into non-empty dest: exit %d, want 1", code)
	}
}

func TestBuildCacheCLI(t *testing.T) {
	cache := t.TempDir()
	args := []string{"build", "--spec", "../../specs/minimal.json", "--cache", cache, "--quiet"}
	var out1, out2, errb bytes.Buffer
	if code := run(context.Background(), args, &out1, &errb); code != 0 {
		t.Fatalf("build --cache exit %d: %s", code, errb.String())
	}
	f := strings.Fields(out1.String())
	if len(f) != 2 || len(f[0]) != 64 || !strings.HasPrefix(f[1], filepath.Join(cache, "minimal-")) {
		t.Fatalf("build --cache printed %q, want DIGEST PATH", out1.String())
	}
	errb.Reset()
	if code := run(context.Background(), args, &out2, &errb); code != 0 || out2.String() != out1.String() || !strings.Contains(errb.String(), "cached") {
		t.Fatalf("second build --cache: exit %d, %q vs %q, %s", code, out2.String(), out1.String(), errb.String())
	}
	for _, bad := range [][]string{
		{"build", "--spec", "../../specs/minimal.json", "--cache", cache, "--dest", filepath.Join(t.TempDir(), "x")},
		{"build", "--spec", "../../specs/minimal.json"},
	} {
		if code := run(context.Background(), bad, &out1, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

func TestEvictCLI(t *testing.T) {
	cache := t.TempDir()
	var paths []string
	for _, content := range []string{"one", "two"} {
		src := filepath.Join(t.TempDir(), "x")
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"build", "--spec", "../../specs/minimal.json", "--cache", cache, "--quiet", "--add", src + "=/etc/x"}, &out, &errb); code != 0 {
			t.Fatalf("build: exit %d: %s", code, errb.String())
		}
		paths = append(paths, strings.Fields(out.String())[1])
	}
	cfg := filepath.Join(t.TempDir(), "launcher.json")
	if err := os.WriteFile(cfg, []byte(`{"rootfses": {"agents": {"path": "`+paths[0]+`"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"evict", "--cache", cache, "--keep", "0", "--config", cfg}, &out, &errb); code != 0 || out.String() != paths[1]+"\n" {
		t.Fatalf("evict: exit %d, out %q, %s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(paths[0]); err != nil || !strings.Contains(errb.String(), "kept "+paths[0]+" (referenced)") {
		t.Fatalf("referenced entry: %v, %s", err, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"evict", "--cache", cache, "--keep", "0", "--config", cfg + ".missing"}, &out, &errb); code != 1 || out.Len() != 0 {
		t.Fatalf("evict with a missing config: exit %d, out %q", code, out.String())
	}
	for _, bad := range [][]string{{"evict"}, {"evict", "--cache", cache, "extra"}, {"evict", "--cache", cache, "--keep", "x"}} {
		if code := run(context.Background(), bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
