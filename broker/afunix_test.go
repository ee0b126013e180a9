package broker

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

func artifactEnv(t *testing.T) (*env, string) {
	pub := filepath.Join(t.TempDir(), "releases")
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}})
	})
	return e, pub
}

// rawCall writes bytes to the socket and reads one answer.
func rawCall(t *testing.T, socket string, write []byte) *protocol.WorkerResponse {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(write) > 0 {
		// A refused peer is answered and cut off before its request is
		// read, so the write may fail; the answer is still there.
		_, _ = c.Write(write)
	}
	frame, err := protocol.ReadFrame(c, protocol.WorkerResponseMax, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.DecodeWorkerResponse(frame)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func frame(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

// TestAFUnixEffectBroker is the af_unix_effect_broker gate: epoch, framing
// and bounds honoured on the real socket; a peer outside the domain's
// cgroup refused; a request from a fenced epoch refused.
func TestAFUnixEffectBroker(t *testing.T) {
	e, pub := artifactEnv(t)
	e.serve(8)

	t.Run("artifact across the horizon", func(t *testing.T) {
		body := []byte("release bytes\n")
		p := mustOK(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "v1.tar"}, body)))
		if p.State != "prepared" || p.Class != "class_4_irreversible_high_impact" || p.PayloadDigest != Digest(body) {
			t.Fatalf("prepare: %+v", p)
		}
		ev := mustOK(t, e.call(byEffectReq(e, protocol.WorkerEvaluate, p)))
		if ev.State != "evaluating" {
			t.Fatalf("class 4 without approval: %s", ev.State)
		}
		wantErr(t, e.call(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
		req := byEffectReq(e, protocol.WorkerEvaluate, p)
		req.Approval = e.approve(p.ID)
		if r := mustOK(t, e.call(req)); r.State != "ready" {
			t.Fatalf("evaluate: %s", r.State)
		}
		c := mustOK(t, e.call(byEffectReq(e, protocol.WorkerCommit, p)))
		if c.State != "committed" || !bytes.Contains(c.Receipt, []byte(`"name":"v1.tar"`)) {
			t.Fatalf("commit: %+v %s", c, c.Receipt)
		}
		if got, _ := os.ReadFile(filepath.Join(pub, "v1.tar")); !bytes.Equal(got, body) {
			t.Fatalf("published %q", got)
		}
		if ents, _ := os.ReadDir(pub); len(ents) != 1 {
			t.Fatalf("publication left %d entries", len(ents))
		}
		s := mustOK(t, e.call(byEffectReq(e, protocol.WorkerStatus, p)))
		if s.State != "committed" {
			t.Fatal(s.State)
		}
		if bytes.Contains(c.Receipt, []byte(pub)) {
			t.Fatal("receipt leaks a host path")
		}
	})

	t.Run("framing and admission", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			in   []byte
			want protocol.Code
		}{
			{"oversized", binary.BigEndian.AppendUint32(nil, protocol.WorkerRequestMax+1), protocol.CodeFrameTooLarge},
			{"truncated", append(binary.BigEndian.AppendUint32(nil, 100), '{'), protocol.CodeFrameTimeout},
			{"garbage", frame([]byte("not json")), protocol.CodeMalformedJSON},
			{"not utf-8", frame([]byte("{\"a\":\"\xff\"}")), protocol.CodeNotUTF8},
			{"launcher request", frame([]byte(`{"protocol":1,"action":"preflight","request_id":"r"}`)), protocol.CodeUnknownAction},
			{"version 2", frame([]byte(`{"protocol":2,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUIDb + `"}`)), protocol.CodeUnsupportedVersion},
			{"unknown field", frame([]byte(`{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUIDb + `","path":"/etc"}`)), protocol.CodeUnknownField},
			{"idle", nil, protocol.CodeFrameTimeout},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := rawCall(t, e.socket, tc.in)
				if r.OK || r.Error.Code != tc.want {
					t.Fatalf("got %+v, want %s", r.Error, tc.want)
				}
			})
		}
	})

	t.Run("unknown target and kind", func(t *testing.T) {
		wantErr(t, e.call(prepareReq(e, "artifact", "etc", map[string]string{"name": "x"}, nil)), protocol.CodeForbidden)
		wantErr(t, e.call(prepareReq(e, "shell", "releases", map[string]string{"name": "x"}, nil)), protocol.CodeForbidden)
		wantErr(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "../../etc/passwd"}, nil)), protocol.CodeInvalidField)
		wantErr(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": ".autonomic-recovery-x"}, nil)), protocol.CodeInvalidField)
	})

	t.Run("fenced epoch", func(t *testing.T) {
		p := mustOK(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "v2.tar"}, []byte("two"))))
		old := e.epoch()
		if _, err := e.store.AdvanceEpoch(ctxT(t), store.AdvanceEpoch{EpisodeID: e.ep.ID, FromEpoch: old, Reason: "test fence"}); err != nil {
			t.Fatal(err)
		}
		req := byEffectReq(e, protocol.WorkerCommit, p)
		req.Epoch = old
		wantErr(t, e.call(req), protocol.CodeStaleRequestEpoch)
		st := byEffectReq(e, protocol.WorkerStatus, p)
		st.Epoch = old
		wantErr(t, e.call(st), protocol.CodeStaleRequestEpoch)
		// In the current epoch the fenced effect is stale and its old
		// lease cannot propose.
		wantErr(t, e.call(byEffectReq(e, protocol.WorkerEvaluate, p)), protocol.CodeStaleAuthority)
		wantErr(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "v2.tar"}, []byte("two"))), protocol.CodeStaleAuthority)
		e.grant(e.epoch())
		mustOK(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "v2.tar"}, []byte("two"))))
		if _, err := os.Stat(filepath.Join(pub, "v2.tar")); !os.IsNotExist(err) {
			t.Fatal("fenced effect published")
		}
	})

	t.Run("other episode's effect", func(t *testing.T) {
		ep2, err := e.store.CreateEpisode(ctxT(t), store.NewEpisode{Spec: []byte(`{}`), PolicyVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		p := mustOK(t, e.call(prepareReq(e, "artifact", "releases", map[string]string{"name": "v3.tar"}, []byte("3"))))
		r := e.broker.Handle(ctxT(t), ep2.ID, &protocol.WorkerRequest{Protocol: 1, RequestID: "x", Epoch: 1, Action: protocol.WorkerStatus, EffectID: p.ID})
		wantErr(t, r, protocol.CodeNotFound)
	})

	t.Run("peer outside the domain cgroup", func(t *testing.T) {
		self := e.cgroup.Load().(string)
		e.cgroup.Store(self + "/not-this-one")
		defer e.cgroup.Store(self)
		r := rawCall(t, e.socket, frame([]byte(`{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"`+tUUIDb+`"}`)))
		wantErr(t, r, protocol.CodePeerRefused)
		// A prefix that is not a path ancestor is no match either.
		e.cgroup.Store(self[:len(self)-1])
		wantErr(t, rawCall(t, e.socket, nil), protocol.CodePeerRefused)
	})

	t.Run("peer before its generation is bound", func(t *testing.T) {
		// The worker's first call can beat the kernel's record that its
		// domain started: it waits for the binding and is then served.
		self := e.cgroup.Load().(string)
		e.cgroup.Store("")
		defer e.cgroup.Store(self)
		bind := time.AfterFunc(300*time.Millisecond, func() { e.cgroup.Store(self) })
		defer bind.Stop()
		r := e.call(&protocol.WorkerRequest{Epoch: e.epoch(), Action: protocol.WorkerStatus, EffectID: tUUIDb})
		wantErr(t, r, protocol.CodeNotFound)
		// Bound elsewhere meanwhile (a repair replaced the generation):
		// the waiting peer is compared with that one, and refused.
		e.cgroup.Store("")
		bind = time.AfterFunc(300*time.Millisecond, func() { e.cgroup.Store(self + "/next-generation") })
		wantErr(t, e.call(&protocol.WorkerRequest{Epoch: e.epoch(), Action: protocol.WorkerStatus, EffectID: tUUIDb}),
			protocol.CodePeerRefused)
		// Never bound: refused once BindWait has passed.
		bind.Stop()
		e.cgroup.Store("")
		began := time.Now()
		wantErr(t, e.call(&protocol.WorkerRequest{Epoch: e.epoch(), Action: protocol.WorkerStatus, EffectID: tUUIDb}),
			protocol.CodePeerRefused)
		if waited := time.Since(began); waited < e.server.BindWait {
			t.Errorf("refused after %v, before BindWait %v", waited, e.server.BindWait)
		}
	})

	t.Run("real cgroups", func(t *testing.T) { realCgroups(t, e) })
}

const tUUIDb = "0190a5c4-3b1e-7c2a-9d4e-1f2a3b4c5d6e"

// realCgroups runs the static client in a cgroup of its own: bound to that
// cgroup it is served; bound to a sibling (an "older generation") it is
// refused, as is this test process.
func realCgroups(t *testing.T, e *env) {
	privileged.Require(t)
	cli := buildClient(t)
	root := cgroup2Mount()
	if root == "" {
		privileged.Skip(t, "no cgroup v2 hierarchy is mounted")
	}
	self := e.cgroup.Load().(string)
	parent := filepath.Join(root, "autonomic-broker-test-"+strconv.Itoa(os.Getpid()))
	gen1, gen2 := filepath.Join(parent, "gen1"), filepath.Join(parent, "gen2")
	for _, d := range []string{parent, gen1, gen2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			privileged.Skip(t, "cannot create cgroups here: "+err.Error())
		}
	}
	defer func() {
		for _, d := range []string{gen1, gen2, parent} {
			_ = os.Remove(d)
		}
	}()
	rel := func(d string) string { return strings.TrimPrefix(d, root) }
	run := func(cg string) (int, string) {
		cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1"/cgroup.procs && exec "$2" status -socket "$3" -epoch 1 -effect `+tUUIDb, "sh", cg, cli, e.socket)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	e.cgroup.Store(rel(gen2))
	defer e.cgroup.Store(self)
	if code, out := run(gen2); code != 3 && code != 2 || strings.Contains(out, "peer_refused") {
		// Served: an unknown effect or a stale epoch, not a refused peer.
		t.Fatalf("client in the current generation: exit %d %s", code, out)
	}
	if code, out := run(gen1); code != 2 || !strings.Contains(out, "peer_refused") {
		t.Fatalf("client in an older generation: exit %d %s", code, out)
	}
	wantErr(t, rawCall(t, e.socket, nil), protocol.CodePeerRefused)
}

func buildClient(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "autonomic-effect")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/autonomic-effect")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build client: %v\n%s", err, b)
	}
	return out
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted with its root at
// the mount point, or "".
func cgroup2Mount() string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(f) > 4 && f[3] == "/" {
			return f[4]
		}
	}
	return ""
}
