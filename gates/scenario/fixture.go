package scenario

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed all:fixture
var fixture embed.FS

// TargetID is the git_commit target the kernel's configuration must map
// onto the seeded repository.
const TargetID = "calc"

// The refs the two runs propose to move; each starts at the base.
const (
	NormalRef  = "refs/heads/agent/normal"
	HostileRef = "refs/heads/agent/hostile"
)

// AgentScript is the scripted agent's bash source (fixture/agent.sh).
func AgentScript() string {
	b, err := fixture.ReadFile("fixture/agent.sh")
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

// fixed identity and dates make the base OID the same on every host.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=Autonomic fixture", "GIT_AUTHOR_EMAIL=fixture@autonomic.invalid",
	"GIT_COMMITTER_NAME=Autonomic fixture", "GIT_COMMITTER_EMAIL=fixture@autonomic.invalid",
	"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
}

// Git runs git in dir with a clean, fixed configuration and returns its
// trimmed standard output.
func Git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Seed makes repo the fixture's authoritative bare repository and returns
// the base OID, with main and both agent refs at it. An existing repository
// holding the base is reused: only the agent refs are reset, so a second
// run starts from the same state.
func Seed(ctx context.Context, repo string) (string, error) {
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); err != nil {
		tmp, err := os.MkdirTemp("", "autonomic-fixture-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		work := filepath.Join(tmp, "work")
		if err := writeFixture(work); err != nil {
			return "", err
		}
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "calc: a tiny calculator (add is off by one)"}} {
			if _, err := Git(ctx, work, args...); err != nil {
				return "", err
			}
		}
		if _, err := Git(ctx, tmp, "clone", "-q", "--bare", work, repo); err != nil {
			return "", err
		}
	}
	base, err := Git(ctx, repo, "rev-parse", "refs/heads/main^{commit}")
	if err != nil {
		return "", err
	}
	for _, ref := range []string{NormalRef, HostileRef} {
		if _, err := Git(ctx, repo, "update-ref", ref, base); err != nil {
			return "", err
		}
	}
	return base, nil
}

func writeFixture(dir string) error {
	return fs.WalkDir(fixture, "fixture/repo", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, strings.TrimPrefix(p, "fixture/repo"))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fixture.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		return os.WriteFile(dst, b, mode)
	})
}
