package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// What defines a verification — the make files make reads (GNUmakefile,
// makefile and Makefile, in that order, and what they include), npm's
// scripts, the test directories and files, pytest's and Go's
// configuration — is the base's, not the change's: a worker that adds a
// GNUmakefile whose test rule echoes "all tests pass", or rewrites the
// test it was asked to make pass, must not pass verification by it
// (issue 23 §2). Before verify_argv runs, every such path the change
// touched is put back as the base has it (or removed, if the base has no
// such path). A target may lift this (Target.ChangeInputs) when its tasks
// legitimately change their tests or build.

// inputNames are base names, compared case-folded.
var inputNames = map[string]bool{
	"makefile": true, "gnumakefile": true, "package.json": true, "conftest.py": true, "pyproject.toml": true,
	"setup.cfg": true, "setup.py": true, "tox.ini": true, "pytest.ini": true, "noxfile.py": true, "go.mod": true,
	"go.work": true, "cargo.toml": true, "build.rs": true, ".mocharc.js": true, ".mocharc.json": true,
}

// inputSuffixes are name endings, case-folded.
var inputSuffixes = []string{".mk", "_test.go", ".test.js", ".test.ts", ".test.mjs", ".test.cjs", ".spec.js", ".spec.ts",
	".test.jsx", ".test.tsx", "jest.config.js", "jest.config.ts", "vitest.config.js", "vitest.config.ts"}

// inputDirs are directories whose whole content is test input.
var inputDirs = map[string]bool{"test": true, "tests": true, "__tests__": true, "spec": true, "testdata": true, "t": true}

// IsVerificationInput reports whether p (a repository path) defines how
// verification runs.
func IsVerificationInput(p string) bool {
	f := strings.ToLower(p)
	parts := strings.Split(f, "/")
	for _, d := range parts[:len(parts)-1] {
		if inputDirs[d] {
			return true
		}
	}
	base := parts[len(parts)-1]
	if inputNames[base] || strings.HasPrefix(base, "test_") && strings.HasSuffix(base, ".py") {
		return true
	}
	for _, s := range inputSuffixes {
		if strings.HasSuffix(base, s) {
			return true
		}
	}
	return false
}

// maxRestored bounds the paths a decision body lists.
const maxRestored = 32

// baseInputs puts every verification input the change touched in dir's
// index and worktree back as base has it; it returns the paths (the
// first maxRestored) and how many there were.
func (r *Runner) baseInputs(ctx context.Context, dir, base string) ([]string, int, error) {
	out, err := r.git(ctx, dir, nil, "diff", "--cached", "--name-only", "--no-renames", "-z", base)
	if err != nil {
		return nil, 0, err
	}
	var restored []string
	n := 0
	for p := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		if p == "" || !IsVerificationInput(p) {
			continue
		}
		if _, err := r.git(ctx, dir, nil, "cat-file", "-e", base+":"+p); err == nil {
			if _, err := r.git(ctx, dir, nil, "checkout", base, "--", p); err != nil {
				return nil, 0, err
			}
		} else {
			if _, err := r.git(ctx, dir, nil, "rm", "-q", "--cached", "--", p); err != nil {
				return nil, 0, err
			}
			if err := os.Remove(filepath.Join(dir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, 0, err
			}
		}
		if n++; len(restored) < maxRestored {
			restored = append(restored, p)
		}
	}
	return restored, n, nil
}
