package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
)

// Ignored is what the harvest left out because the repository ignores it.
type Ignored struct {
	Count  int      // entries of the upper layer left out
	Sample []string // the first few, in archive order
}

const ignoredSample = 5

// archiveNames lists the upper layer's entry names (directories with a
// trailing slash), reading headers only, within the archive's bounds. The
// digest is not checked here: the names only choose what the second,
// verified pass leaves out, and a name that is not in it changes nothing.
func archiveNames(r io.Reader, lim Limits) ([]string, error) {
	tr := tar.NewReader(&io.LimitedReader{R: r, N: lim.ArchiveBytes + 1})
	var names []string
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil || n >= lim.Entries {
			// The second pass refuses such an archive, or finds it is
			// not the checkpoint's; the names read so far are enough.
			return names, nil
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") ||
			gitDir(name) || !plainName(name) {
			continue // refused, or left out, by the second pass
		}
		if hdr.Typeflag == tar.TypeDir {
			name += "/"
		}
		names = append(names, name)
	}
}

// ignoredNames asks git, in the kernel's clone of the base (whose work
// tree holds the base's .gitignore files and whose index holds its
// tracked files), which of names the repository ignores: git's own
// answer, from one process, never an imitation of its rules. Tracked
// paths are never ignored (git's rule). Global and system configuration
// are off (runner), so no core.excludesFile of the host's applies.
func (r runner) ignoredNames(ctx context.Context, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(names) == 0 {
		return out, nil
	}
	git := r.git
	if git == "" {
		git = "git"
	}
	cmd := exec.CommandContext(ctx, git, append(append([]string(nil), safety...), "check-ignore", "--stdin", "-z")...)
	cmd.Dir = r.dir
	cmd.Env = gitEnv
	cmd.Stdin = strings.NewReader(strings.Join(names, "\x00") + "\x00")
	b, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) { // 1: nothing ignored
		return nil, fmt.Errorf("workspace: git check-ignore: %w", err)
	}
	for _, n := range strings.Split(string(b), "\x00") {
		if n != "" {
			out[strings.TrimSuffix(n, "/")] = true
		}
	}
	return out, nil
}

// ignoredPath reports whether p or a directory above it is ignored.
func ignoredPath(ignored map[string]bool, p string) bool {
	for q := p; ; {
		if ignored[q] {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			return false
		}
		q = q[:i]
	}
}
