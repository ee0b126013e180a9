package broker

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// gitDaemon serves dir over git:// on loopback, push enabled.
func gitDaemon(t *testing.T, dir string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--base-path="+dir,
		"--listen=127.0.0.1", "--port="+strconv.Itoa(port), dir)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if err := cmd.Start(); err != nil {
		privileged.Skip(t, "git daemon: "+err.Error())
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for range 100 {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			return "git://127.0.0.1:" + strconv.Itoa(port) + "/"
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("git daemon did not listen")
	return ""
}

func TestGitRemotePushWithLease(t *testing.T) {
	f := newGitFixture(t)
	remotes := t.TempDir()
	remote := filepath.Join(remotes, "pub.git")
	sh(t, remotes, "git", "clone", "-q", "--bare", f.bare, remote)
	base := f.head()
	// The authoritative repository gets a new commit to publish.
	sh(t, f.work, "git", "reset", "-q", "--hard")
	_ = os.WriteFile(filepath.Join(f.work, "README"), []byte("v2\n"), 0o644)
	sh(t, f.work, "git", "commit", "-qam", "v2")
	sh(t, f.work, "git", "push", "-q", f.bare, "HEAD:refs/heads/main")
	next := f.head()
	for name, url := range map[string]string{"file": remote, "git daemon": gitDaemon(t, remotes) + "pub.git"} {
		t.Run(name, func(t *testing.T) {
			sh(t, remote, "git", "update-ref", "refs/heads/main", base)
			e := newEnv(t, func(e *env, cfg *Config) {
				cfg.Adapters = append(cfg.Adapters, &GitRemote{Targets: map[string]GitRemoteTarget{
					"pub": {Repo: f.bare, URL: url, AllowedRefs: []string{"refs/heads/main"}}}})
			})
			push := func(expected string) *protocol.EffectResult {
				p := mustOK(t, e.do(prepareReq(e, "git_remote", "pub", map[string]string{"ref": "refs/heads/main", "oid": next, "expected_remote_oid": expected}, nil)))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				return p
			}
			stale := push(next) // expects the wrong remote OID
			wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, stale)), protocol.CodeRefMoved)
			p := push(base)
			if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
				t.Fatal(c.State)
			}
			if got := sh(t, remote, "git", "rev-parse", "refs/heads/main"); got != next {
				t.Fatalf("remote at %s", got)
			}
			wantErr(t, e.do(prepareReq(e, "git_remote", "pub", map[string]string{"ref": "refs/heads/other", "oid": next, "expected_remote_oid": base}, nil)), protocol.CodeForbidden)
			wantErr(t, e.do(prepareReq(e, "git_remote", "pub", map[string]string{"ref": "refs/heads/main", "oid": "1111111111111111111111111111111111111111", "expected_remote_oid": base}, nil)), protocol.CodeInvalidField)
		})
	}
}
