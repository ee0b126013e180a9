package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Git runs git in dir for a test fixture, with a fixed identity and no
// system or global configuration, and fails t on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=fixture", "GIT_AUTHOR_EMAIL=f@example.invalid", "GIT_COMMITTER_NAME=fixture",
		"GIT_COMMITTER_EMAIL=f@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// BareRepo makes an authoritative repository for a test: files committed
// once on main (message), cloned bare to dir/name. It returns the bare
// repository's path and the commit.
func BareRepo(t testing.TB, dir, name string, files map[string]string, message string) (bare, base string) {
	t.Helper()
	work, err := os.MkdirTemp(dir, "work-")
	if err == nil {
		err = os.Chmod(work, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	Git(t, work, "init", "-q", "-b", "main")
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", ".")
	Git(t, work, "commit", "-q", "-m", message)
	bare = filepath.Join(dir, name)
	Git(t, dir, "clone", "-q", "--bare", work, bare)
	return bare, Git(t, bare, "rev-parse", "refs/heads/main")
}
