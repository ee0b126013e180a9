package broker

import (
	"bytes"
	"crypto/subtle"
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/hashicorp/go-hclog"
)

// remoteFixture is an authoritative repository with main at next (a child
// of base), a private branch holding an orphan commit, and a published
// bare remote.
type remoteFixture struct {
	*gitFixture
	remote, base, next, orphan, side string
}

func newRemoteFixture(t *testing.T) *remoteFixture {
	f := &remoteFixture{gitFixture: newGitFixture(t)}
	dir := t.TempDir()
	f.remote = filepath.Join(dir, "pub.git")
	sh(t, dir, "git", "clone", "-q", "--bare", f.bare, f.remote)
	f.base = f.head()
	sh(t, f.work, "git", "reset", "-q", "--hard")
	_ = os.WriteFile(filepath.Join(f.work, "README"), []byte("v2\n"), 0o644)
	sh(t, f.work, "git", "commit", "-qam", "v2")
	sh(t, f.work, "git", "push", "-q", f.bare, "HEAD:refs/heads/main")
	f.next = f.head()
	// An orphan commit (no parent, another tree) on a private branch of
	// the authoritative repository: what the audit pushed over main.
	sh(t, f.work, "git", "checkout", "-q", "--orphan", "private")
	sh(t, f.work, "git", "rm", "-rqf", ".")
	_ = os.WriteFile(filepath.Join(f.work, "PWNED"), []byte("replaced\n"), 0o644)
	sh(t, f.work, "git", "add", "PWNED")
	sh(t, f.work, "git", "commit", "-qm", "orphan")
	sh(t, f.work, "git", "push", "-q", f.bare, "HEAD:refs/heads/private")
	f.orphan = sh(t, f.bare, "git", "rev-parse", "refs/heads/private")
	sh(t, f.work, "git", "checkout", "-q", "main")
	// A descendant of next on another branch: a fast-forward, but not
	// reachable from main.
	sh(t, f.work, "git", "reset", "-q", "--hard", f.next)
	_ = os.WriteFile(filepath.Join(f.work, "README"), []byte("side\n"), 0o644)
	sh(t, f.work, "git", "commit", "-qam", "side")
	sh(t, f.work, "git", "push", "-q", f.bare, "HEAD:refs/heads/side")
	f.side = sh(t, f.bare, "git", "rev-parse", "refs/heads/side")
	sh(t, f.work, "git", "reset", "-q", "--hard", f.next)
	return f
}

func (f *remoteFixture) remoteMain() string {
	return sh(f.t, f.remote, "git", "rev-parse", "refs/heads/main")
}

func pushReq(e *env, target, oid, expected string) *protocol.WorkerRequest {
	return prepareReq(e, "git_remote", target, map[string]string{"ref": "refs/heads/main", "oid": oid, "expected_remote_oid": expected}, nil)
}

// TestGitRemoteFastForwardOnly: a push publishes only a commit reachable
// from the authoritative repository's source ref, and only as a
// fast-forward of the remote OID the worker expects, unless the target
// grants a rewind of that ref. The audit's orphan commit from a private
// branch, which replaced the remote's main under --force-with-lease, is
// refused at prepare — even by a target whose source refs include the
// private branch, since it is no fast-forward.
func TestGitRemoteFastForwardOnly(t *testing.T) {
	f := newRemoteFixture(t)
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &GitRemote{Targets: map[string]GitRemoteTarget{
			"pub":         {Repo: f.bare, URL: f.remote, AllowedRefs: []string{"refs/heads/main"}},
			"pub-private": {Repo: f.bare, URL: f.remote, AllowedRefs: []string{"refs/heads/main"}, SourceRefs: []string{"refs/heads/main", "refs/heads/private"}},
			"pub-rewind":  {Repo: f.bare, URL: f.remote, AllowedRefs: []string{"refs/heads/main"}, RewindRefs: []string{"refs/heads/main"}}}})
	})
	sh(t, f.remote, "git", "update-ref", "refs/heads/main", f.base)

	t.Run("orphan from a private branch over main", func(t *testing.T) {
		wantErr(t, e.do(pushReq(e, "pub", f.orphan, f.base)), protocol.CodeForbidden)
		wantErr(t, e.do(pushReq(e, "pub-private", f.orphan, f.base)), protocol.CodeForbidden)
		if f.remoteMain() != f.base {
			t.Fatal("the remote's main moved")
		}
	})
	t.Run("fast-forward not reachable from the source ref", func(t *testing.T) {
		wantErr(t, e.do(pushReq(e, "pub", f.side, f.base)), protocol.CodeForbidden)
	})
	t.Run("remote commit unknown here", func(t *testing.T) {
		wantErr(t, e.do(pushReq(e, "pub", f.next, "2222222222222222222222222222222222222222")), protocol.CodeForbidden)
	})
	t.Run("fast-forward is published", func(t *testing.T) {
		p := mustOK(t, e.do(pushReq(e, "pub", f.next, f.base)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" || f.remoteMain() != f.next {
			t.Fatalf("%s, remote at %s", c.State, f.remoteMain())
		}
	})
	t.Run("rewind only where granted", func(t *testing.T) {
		wantErr(t, e.do(pushReq(e, "pub", f.base, f.next)), protocol.CodeForbidden)
		p := mustOK(t, e.do(pushReq(e, "pub-rewind", f.base, f.next)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" || f.remoteMain() != f.base {
			t.Fatalf("%s, remote at %s", c.State, f.remoteMain())
		}
	})
	t.Run("a remote that moved sideways is not overwritten", func(t *testing.T) {
		// Prepared as a fast-forward; then someone else puts the orphan
		// on the remote: the plain push cannot replace it.
		p := mustOK(t, e.do(pushReq(e, "pub", f.next, f.base)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		sh(t, f.bare, "git", "push", "-q", "--force", f.remote, f.orphan+":refs/heads/main")
		r := e.do(byEffectReq(e, protocol.WorkerCommit, p))
		if r.OK || f.remoteMain() != f.orphan {
			t.Fatalf("ok=%v, remote at %s", r.OK, f.remoteMain())
		}
	})
}

// gitHTTPServer serves dir through git http-backend behind HTTP basic
// authentication on loopback TLS, and records every request's
// Authorization header.
type gitHTTPServer struct {
	*httptest.Server
	caFile string
	mu     sync.Mutex
	auth   []string
}

func newGitHTTPServer(t *testing.T, dir, user, pass string) *gitHTTPServer {
	s := &gitHTTPServer{}
	backend := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + user, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}}
	if _, err := os.Stat(backend.Path); err != nil {
		t.Fatalf("git http-backend: %v", err)
	}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	s.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGitRemoteCredentialByReference: git_remote authenticates like the
// HTTP adapters, by reference. The broker reads the secret at commit and
// gives it to git through its own credential helper in the git child's
// environment; the push succeeds against a real authenticated git server
// (git http-backend behind basic auth on loopback TLS) with the referenced
// credential, fails without it or with a wrong one, and the secret appears
// in no log, ledger event, receipt or stored payload.
func TestGitRemoteCredentialByReference(t *testing.T) {
	const secret = "pa55-w0rd-7f3c91e2"
	t.Setenv("AUTONOMIC_TEST_GIT_TOKEN", secret)
	t.Setenv("AUTONOMIC_TEST_GIT_WRONG", "not-the-secret")
	f := newRemoteFixture(t)
	sh(t, f.remote, "git", "config", "http.receivepack", "true")
	sh(t, f.remote, "git", "update-ref", "refs/heads/main", f.base)
	srv := newGitHTTPServer(t, filepath.Dir(f.remote), "publisher", secret)
	url := srv.URL + "/pub.git"
	var logs bytes.Buffer
	// git as the adapter runs it, through a shim that records every
	// argument vector before it runs the real git: the secret must not be
	// in any (it goes to git's credential helper, never on a command line).
	argvLog := filepath.Join(t.TempDir(), "argv")
	shim := filepath.Join(t.TempDir(), "git")
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + argvLog + "\nexec " + realGit + " \"$@\"\n"
	if err := os.WriteFile(shim, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
		cfg.Adapters = append(cfg.Adapters, &GitRemote{Git: shim, Log: cfg.Logger.Named("git_remote"), Targets: map[string]GitRemoteTarget{
			"anon":  {Repo: f.bare, URL: url, AllowedRefs: []string{"refs/heads/main"}, CAFile: srv.caFile},
			"wrong": {Repo: f.bare, URL: url, AllowedRefs: []string{"refs/heads/main"}, CAFile: srv.caFile, Username: "publisher", Credential: &Credential{Env: "AUTONOMIC_TEST_GIT_WRONG"}},
			"auth":  {Repo: f.bare, URL: url, AllowedRefs: []string{"refs/heads/main"}, CAFile: srv.caFile, Username: "publisher", Credential: &Credential{Env: "AUTONOMIC_TEST_GIT_TOKEN"}}}})
	})
	push := func(target string) *protocol.WorkerResponse {
		p := mustOK(t, e.do(pushReq(e, target, f.next, f.base)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		return e.do(byEffectReq(e, protocol.WorkerCommit, p))
	}
	for _, target := range []string{"anon", "wrong"} {
		if r := push(target); r.OK || f.remoteMain() != f.base {
			t.Fatalf("%s: ok=%v remote at %s", target, r.OK, f.remoteMain())
		}
	}
	if c := mustOK(t, push("auth")); c.State != "committed" || f.remoteMain() != f.next {
		t.Fatalf("%s, remote at %s", c.State, f.remoteMain())
	}
	srv.mu.Lock()
	sent := strings.Join(srv.auth, "\n")
	srv.mu.Unlock()
	if !strings.Contains(sent, "Basic ") {
		t.Fatal("the server never saw a credential")
	}
	// Nowhere the worker, an operator or the ledger can read.
	evs, err := e.store.Events(ctxT(t), e.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	effs, err := e.store.ListEffects(ctxT(t), e.ep.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen bytes.Buffer
	seen.Write(logs.Bytes())
	for _, ev := range evs {
		seen.Write(ev.Body)
	}
	for _, ef := range effs {
		seen.Write(ef.Receipt)
		seen.Write(ef.Target)
	}
	for _, p := range listFiles(t, e.payloads.dir) {
		b, _ := os.ReadFile(filepath.Join(e.payloads.dir, p))
		seen.Write(b)
	}
	if seen.Len() == 0 || bytes.Contains(seen.Bytes(), []byte(secret)) {
		t.Fatalf("the secret leaked (%d bytes searched)", seen.Len())
	}
	if !strings.Contains(logs.String(), "request refused") {
		t.Fatal("the log captured nothing: the leak check would be hollow")
	}
	argv, err := os.ReadFile(argvLog)
	if err != nil || !bytes.Contains(argv, []byte("push")) {
		t.Fatalf("the shim recorded no push (%v): the argument check would be hollow", err)
	}
	if bytes.Contains(argv, []byte(secret)) {
		t.Fatal("the secret was on git's command line")
	}
	if !strings.Contains(logs.String(), "git_remote") {
		t.Fatal("the adapter's own log captured nothing (its failed pushes log git's stderr)")
	}
}
