package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Clone describes one workspace to prepare.
type Clone struct {
	Repo    string // the authoritative repository (its work tree or git dir)
	BaseOID string // the exact commit to check out (40 or 64 lower-case hex)
	Root    string // the launcher's workspaces_root
	ID      string // the workspace id (a protocol.ValidID)
	UID     int    // owner of the prepared tree (the kernel's account)
	GID     int
	Git     string // git binary; default "git" in a fixed PATH
}

var oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// ErrInvalid marks a Clone that names something it may not.
var ErrInvalid = errors.New("workspace: invalid request")

// Prepare clones c.Repo into c.Root/c.ID at c.BaseOID and returns the path.
func Prepare(ctx context.Context, c Clone) (string, error) {
	if !protocol.ValidID(c.ID) {
		return "", fmt.Errorf("%w: id", ErrInvalid)
	}
	if !oidPattern.MatchString(c.BaseOID) {
		return "", fmt.Errorf("%w: base oid", ErrInvalid)
	}
	if c.Root == "" || !filepath.IsAbs(c.Root) || c.Repo == "" || !filepath.IsAbs(c.Repo) {
		return "", fmt.Errorf("%w: root and repo must be absolute", ErrInvalid)
	}
	dst := filepath.Join(c.Root, c.ID)
	// Mkdir, not MkdirAll: an existing directory may hold a previous
	// episode's files, and reusing it would hand them to this one.
	if err := os.Mkdir(dst, 0o755); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dst)
		}
	}()
	g := runner{git: c.Git, dir: dst}
	if _, err := g.run(ctx, "clone", "--quiet", "--no-checkout", "--no-hardlinks", "--template=", "--", c.Repo, dst); err != nil {
		return "", err
	}
	// The base must be a commit the clone holds; "^{commit}" refuses a
	// tree or blob id that happens to exist.
	if _, err := g.run(ctx, "cat-file", "-e", c.BaseOID+"^{commit}"); err != nil {
		return "", fmt.Errorf("%w: base oid is not a commit of the repository", ErrInvalid)
	}
	if _, err := g.run(ctx, "checkout", "--quiet", "--detach", c.BaseOID); err != nil {
		return "", err
	}
	head, err := g.run(ctx, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(head) != c.BaseOID {
		return "", fmt.Errorf("workspace: checked out %q, want the base oid", strings.TrimSpace(head))
	}
	// The clone came from a path, which git records as origin; the worker
	// has no business knowing the host path of the authoritative repo.
	if _, err := g.run(ctx, "remote", "remove", "origin"); err != nil {
		return "", err
	}
	if err := ChownTree(dst, c.UID, c.GID); err != nil {
		return "", err
	}
	ok = true
	return dst, nil
}

// Remove deletes a prepared workspace by id under root.
func Remove(root, id string) error {
	if !protocol.ValidID(id) {
		return fmt.Errorf("%w: id", ErrInvalid)
	}
	return os.RemoveAll(filepath.Join(root, id))
}

type runner struct {
	git string
	dir string
}

// safety is prepended to every git command: the settings that keep
// repository-supplied code from running on the host.
var safety = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "protocol.allow=never", "-c", "protocol.file.allow=always",
	"-c", "advice.detachedHead=false",
	"-c", "safe.directory=*",
	"-c", "core.protectNTFS=true", "-c", "core.protectHFS=true",
}

// gitEnv is every git's fixed, minimal environment: no GIT_* from the
// kernel's own environment can redirect a lookup, and no configuration
// file but the repository's own (which a fresh clone does not copy) is
// read.
var gitEnv = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ATTR_NOSYSTEM=1"}

func (r runner) run(ctx context.Context, args ...string) (string, error) {
	git := r.git
	if git == "" {
		git = "git"
	}
	cmd := exec.CommandContext(ctx, git, append(append([]string(nil), safety...), args...)...)
	cmd.Dir = r.dir
	if args[0] == "clone" {
		cmd.Dir = "/"
	}
	// A fixed, minimal environment: no GIT_* from the kernel's own
	// environment can redirect a lookup, and no configuration file but
	// the repository's own (which a fresh clone does not copy) is read.
	cmd.Env = gitEnv
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		// git's stderr may quote repository content; keep only the verb.
		return "", fmt.Errorf("workspace: git %s: %w", args[0], err)
	}
	return out.String(), nil
}

// ChownTree hands a tree to the workspace owner without following a
// symlink in it (the repository, or a patch, may have created any).
func ChownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
