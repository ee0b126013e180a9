package source

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Tree is what a report binds itself to.
type Tree struct {
	Commit string `json:"commit"`
	SHA256 string `json:"source_sha256"`
	Dirty  bool   `json:"source_dirty"`
	// Why is set when Dirty: git's changes, or why git could not tell.
	Why string `json:"source_dirty_why,omitempty"`
}

// Of describes the git work tree at dir.
func Of(dir string) Tree {
	var t Tree
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	dirty := func(why string) {
		if !t.Dirty {
			t.Dirty, t.Why = true, why
		}
	}
	if out, err := git("rev-parse", "--verify", "HEAD"); err != nil {
		dirty(err.Error())
	} else {
		t.Commit = strings.TrimSpace(string(out))
	}
	out, err := git("ls-files", "-z")
	if err != nil {
		dirty(err.Error())
		return t
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			dirty("reading " + f + ": " + err.Error())
			continue
		}
		// A tracked file deleted in the work tree shows in git status.
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s\x00%x\n", f, sum)
	}
	t.SHA256 = hex.EncodeToString(h.Sum(nil))
	status, err := git("status", "--porcelain")
	switch {
	case err != nil:
		dirty(err.Error())
	case len(bytes.TrimSpace(status)) > 0:
		dirty("git status --porcelain: " + firstLine(string(status)))
	}
	return t
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// Same reports whether a result recorded for tree a speaks for tree b: the
// same commit and the same tracked content, neither of them dirty.
func Same(a, b Tree) bool {
	return a.Commit != "" && a.Commit == b.Commit && a.SHA256 != "" && a.SHA256 == b.SHA256 && !a.Dirty && !b.Dirty
}
