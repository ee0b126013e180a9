package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// CloneBare makes dst a bare copy of the repository src (a path), as the
// kernel's own: no hardlink shares an inode with src, no template, hook or
// configuration of src is copied, and dst must not exist. src is usually
// another account's, which git refuses to read ("dubious ownership")
// unless safe.directory names it in protected configuration: a global
// configuration file holding exactly that one entry is made for this one
// clone (git reads src's own configuration for upload-pack, which runs
// none of its hooks and honours no command it names there).
func CloneBare(ctx context.Context, git, src, dst string) error {
	if !filepath.IsAbs(src) || !filepath.IsAbs(dst) || strings.ContainsAny(src, "\n\x00\"\\") {
		return fmt.Errorf("%w: clone paths", ErrInvalid)
	}
	tmp, err := os.MkdirTemp("", "autonomic-clone-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	global := filepath.Join(tmp, "gitconfig")
	if err := os.WriteFile(global, []byte("[safe]\n\tdirectory = \""+src+"\"\n"), 0o600); err != nil {
		return err
	}
	if git == "" {
		git = "git"
	}
	cmd := exec.CommandContext(ctx, git, append(append([]string(nil), safety...),
		"clone", "--quiet", "--bare", "--no-hardlinks", "--template=", "--", src, dst)...)
	cmd.Dir = "/"
	for _, kv := range gitEnv {
		if !strings.HasPrefix(kv, "GIT_CONFIG_GLOBAL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GIT_CONFIG_GLOBAL="+global)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("workspace: git clone: %w", err)
	}
	return nil
}

// ReadAt reads the files at paths as of rev in the repository at dir (its
// git dir, or a work tree), under the same safety settings as every git
// here, from one `git cat-file --batch`. A path that is not a blob at rev,
// or is larger than max bytes, is absent from the result.
func ReadAt(ctx context.Context, git, dir, rev string, paths []string, max int64) (map[string][]byte, error) {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = rev + ":" + p
	}
	got, err := runner{git: git, dir: dir}.batch(ctx, names, max, false)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for i, n := range names {
		if b, ok := got[n]; ok {
			out[paths[i]] = b
		}
	}
	return out, nil
}

// batch reads the objects names name from one `git cat-file --batch`.
// strict: every one must be a blob of at most max bytes, or the whole read
// fails; otherwise one that is missing, not a blob or larger is left out.
func (r runner) batch(ctx context.Context, names []string, max int64, strict bool) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(names) == 0 {
		return out, nil
	}
	for _, n := range names {
		if strings.ContainsAny(n, "\n\x00") {
			return nil, fmt.Errorf("%w: object name", ErrInvalid)
		}
	}
	git := r.git
	if git == "" {
		git = "git"
	}
	cmd := exec.CommandContext(ctx, git, append(append([]string(nil), safety...), "cat-file", "--batch")...)
	cmd.Dir, cmd.Env = r.dir, gitEnv
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("workspace: git cat-file: %w", err)
	}
	rd := bufio.NewReader(stdout)
	read := func() error {
		for _, name := range names {
			hdr, err := rd.ReadString('\n')
			if err != nil {
				return err
			}
			f := strings.Fields(hdr)
			if len(f) != 3 { // "<name> missing", "<name> ambiguous"
				if strict {
					return errors.New("no such object")
				}
				continue
			}
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || n < 0 {
				return errors.New("object size")
			}
			if f[1] != "blob" || n > max {
				if strict {
					return errors.New("not a blob, or too large")
				}
				if _, err := io.CopyN(io.Discard, rd, n+1); err != nil {
					return err
				}
				continue
			}
			data := make([]byte, n+1) // and git's newline after it
			if _, err := io.ReadFull(rd, data); err != nil || data[n] != '\n' {
				return errors.New("short object")
			}
			out[name] = data[:n]
		}
		return nil
	}
	rerr := read()
	if rerr != nil {
		_ = cmd.Process.Kill()
	}
	if werr := cmd.Wait(); rerr != nil || werr != nil {
		return nil, fmt.Errorf("workspace: git cat-file: %w", errors.Join(rerr, werr))
	}
	return out, nil
}
