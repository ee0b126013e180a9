package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// TestPrepareChecksOutTheExactBaseAndRunsNoHook: the clone is at the base
// OID even after the branch moved on, and a hook planted in the source
// repository never runs.
func TestPrepareChecksOutTheExactBaseAndRunsNoHook(t *testing.T) {
	src := t.TempDir()
	testbed.Git(t, src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("one\n"), 0o644)
	testbed.Git(t, src, "add", "a.txt")
	testbed.Git(t, src, "commit", "-q", "-m", "one")
	base := testbed.Git(t, src, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("two\n"), 0o644)
	testbed.Git(t, src, "commit", "-q", "-am", "two")
	marker := filepath.Join(t.TempDir(), "hook-ran")
	hook := filepath.Join(src, ".git", "hooks", "post-checkout")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A filter the repository asks for: with no configuration to define
	// it, it cannot run.
	os.WriteFile(filepath.Join(src, ".gitattributes"), []byte("* filter=evil\n"), 0o644)
	testbed.Git(t, src, "config", "filter.evil.smudge", "touch "+marker)

	root := t.TempDir()
	p, err := Prepare(context.Background(), Clone{Repo: src, BaseOID: base, Root: root, ID: "ws-1", UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(p, "a.txt"))
	if err != nil || string(b) != "one\n" {
		t.Fatalf("a.txt = %q, %v; want the base's content", b, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a repository hook or filter ran on the host")
	}
	if out := testbed.Git(t, p, "remote"); out != "" {
		t.Errorf("the clone still names a remote: %q", out)
	}
	// The same id again is refused, not reused.
	if _, err := Prepare(context.Background(), Clone{Repo: src, BaseOID: base, Root: root, ID: "ws-1"}); err == nil {
		t.Error("an existing workspace was reused")
	}
	for name, c := range map[string]Clone{
		"bad oid":      {Repo: src, BaseOID: "HEAD", Root: root, ID: "ws-2"},
		"unknown oid":  {Repo: src, BaseOID: strings.Repeat("a", 40), Root: root, ID: "ws-3"},
		"bad id":       {Repo: src, BaseOID: base, Root: root, ID: "../x"},
		"relative dir": {Repo: "rel", BaseOID: base, Root: root, ID: "ws-4"},
	} {
		if _, err := Prepare(context.Background(), c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "ws-3")); !os.IsNotExist(err) {
		t.Error("a failed preparation left its directory behind")
	}
}
