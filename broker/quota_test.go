package broker

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

func quotaEnv(t *testing.T, q Quota) *env {
	return newEnv(t, func(e *env, cfg *Config) {
		cfg.Quota = q
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"rel": {Dir: t.TempDir(), Class: 3}}})
	})
}

func artifactReq(e *env, name string, body []byte) *protocol.WorkerRequest {
	return prepareReq(e, "artifact", "rel", map[string]string{"name": name}, body)
}

// TestPrepareQuota: an episode's prepares are bounded in number, in rate
// and in the payload bytes they store, and the payload store keeps a disk
// reserve; each is enforced at prepare, before the adapter runs, with a
// catalogue code, and a refused prepare stores nothing. (Before, 1,339
// unapproved artifact prepares stored 669 MiB in 5 s.) The count survives a
// restarted broker: it starts from what the store records.
func TestPrepareQuota(t *testing.T) {
	t.Run("count, across a restart", func(t *testing.T) {
		e := quotaEnv(t, Quota{PreparesPerEpisode: 4, PreparesPerMinute: 100})
		for i := range 4 {
			mustOK(t, e.do(artifactReq(e, fmt.Sprintf("a%d.bin", i), []byte{byte(i)})))
		}
		before := listFiles(t, e.payloads.dir)
		wantErr(t, e.do(artifactReq(e, "a4.bin", []byte("x"))), protocol.CodeLimitExceeded)
		b2, err := New(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b2.Reconcile(ctxT(t), uuid.Nil); err != nil {
			t.Fatal(err)
		}
		e.broker = b2
		wantErr(t, e.do(artifactReq(e, "a5.bin", []byte("y"))), protocol.CodeLimitExceeded)
		if after := listFiles(t, e.payloads.dir); strings.Join(before, ",") != strings.Join(after, ",") {
			t.Fatalf("refused prepares stored payloads: %v → %v", before, after)
		}
	})
	t.Run("rate", func(t *testing.T) {
		e := quotaEnv(t, Quota{PreparesPerMinute: 3})
		for i := range 3 {
			mustOK(t, e.do(artifactReq(e, fmt.Sprintf("r%d.bin", i), []byte{byte(i)})))
		}
		wantErr(t, e.do(artifactReq(e, "r3.bin", []byte("x"))), protocol.CodeRateLimited)
	})
	t.Run("payload bytes", func(t *testing.T) {
		e := quotaEnv(t, Quota{PayloadBytesPerEpisode: 10_000})
		a, b := bytes.Repeat([]byte("a"), 4000), bytes.Repeat([]byte("b"), 4000)
		mustOK(t, e.do(artifactReq(e, "a.bin", a)))
		mustOK(t, e.do(artifactReq(e, "b.bin", b)))
		before := listFiles(t, e.payloads.dir)
		wantErr(t, e.do(artifactReq(e, "c.bin", bytes.Repeat([]byte("c"), 4000))), protocol.CodeLimitExceeded)
		if after := listFiles(t, e.payloads.dir); strings.Join(before, ",") != strings.Join(after, ",") {
			t.Fatal("a refused payload was stored")
		}
		// What is already stored costs nothing more.
		mustOK(t, e.do(artifactReq(e, "a2.bin", a)))
	})
	t.Run("disk reserve", func(t *testing.T) {
		var st unix.Statfs_t
		dir := t.TempDir()
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		free := int64(st.Bavail) * int64(st.Bsize)
		e := quotaEnv(t, Quota{DiskReserveBytes: free + 1<<30})
		before := listFiles(t, e.payloads.dir)
		_, err := e.broker.Prepare(ctxT(t), e.ep.ID, artifactReq(e, "d.bin", []byte("d")))
		if err == nil || protocol.AsWire(err).Code != protocol.CodeLimitExceeded || !strings.Contains(err.Error(), "disk reserve") {
			t.Fatalf("prepare past the reserve: %v", err)
		}
		if after := listFiles(t, e.payloads.dir); strings.Join(before, ",") != strings.Join(after, ",") {
			t.Fatal("a payload was stored past the reserve")
		}
		// The git adapter keeps the repository's reserve the same way,
		// before git runs.
		f := newGitFixture(t)
		gc := &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"lib/**"}}},
			Limits: GitLimits{DiskReserveBytes: free + 1<<30}}
		objects := listFiles(t, filepath.Join(f.bare, "objects"))
		err = gc.Validate(ctxT(t), Request{TargetID: "repo", Target: mustJSON(gitTarget(f.head())), Payload: f.patch(fixAuth)})
		if err == nil || !strings.Contains(err.Error(), "disk reserve") {
			t.Fatalf("git build past the reserve: %v", err)
		}
		if after := listFiles(t, filepath.Join(f.bare, "objects")); strings.Join(objects, ",") != strings.Join(after, ",") {
			t.Fatal("objects written past the reserve")
		}
	})
}

// TestPayloadRetention: payloads of settled effects, http_read bodies and
// the payloads of an ended episode's effects are deleted once the retention
// period has passed; what an unsettled effect of an active episode needs is
// kept; nothing is deleted inside the retention period.
func TestPayloadRetention(t *testing.T) {
	body := strings.Repeat("observed ", 50)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Quota = Quota{Retention: time.Hour}
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"rel": {Dir: t.TempDir(), Class: 3}}},
			&HTTP{Payloads: e.payloads, Targets: map[string]HTTPTarget{"docs": {BaseURL: srv.URL, Methods: []string{"GET"},
				Paths: []string{"**"}, AllowedNets: loopback}}})
	})
	walk := func(p *protocol.EffectResult) *protocol.EffectResult {
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		return mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
	}
	committed := walk(mustOK(t, e.do(artifactReq(e, "done.bin", []byte("settled payload")))))
	read := walk(mustOK(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": "/x"}, nil))))
	aborted := mustOK(t, e.do(artifactReq(e, "gone.bin", []byte("aborted payload"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerAbort, aborted)))
	open := mustOK(t, e.do(artifactReq(e, "open.bin", []byte("still needed"))))
	has := func(d string) bool {
		_, err := os.Stat(filepath.Join(e.payloads.dir, strings.TrimPrefix(d, "sha256:")))
		return err == nil
	}
	bodyDigest := Digest([]byte(body))
	all := []string{committed.PayloadDigest, bodyDigest, aborted.PayloadDigest, open.PayloadDigest}
	for _, d := range all {
		if !has(d) {
			t.Fatalf("%s not stored", d)
		}
	}
	if n, err := e.broker.SweepPayloads(ctxT(t), time.Now()); err != nil || n != 0 {
		t.Fatalf("inside the retention period: removed %d, %v", n, err)
	}
	later := time.Now().Add(2 * time.Hour)
	// Four: the read's empty request payload goes with its body.
	if n, err := e.broker.SweepPayloads(ctxT(t), later); err != nil || n != 4 {
		t.Fatalf("after retention: removed %d, %v", n, err)
	}
	for d, want := range map[string]bool{committed.PayloadDigest: false, bodyDigest: false, read.PayloadDigest: false,
		aborted.PayloadDigest: false, open.PayloadDigest: true} {
		if has(d) != want {
			t.Fatalf("%s present=%v, want %v", d, has(d), want)
		}
	}
	req := byEffectReq(e, protocol.WorkerFetchResponse, read)
	wantErr(t, e.do(req), protocol.CodeNotFound)
	// The episode ends: its open effect's payload goes too, after retention.
	if _, err := e.store.EndEpisode(ctxT(t), store.EndEpisode{EpisodeID: e.ep.ID, Epoch: e.epoch(), State: store.EpisodeCompleted, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.broker.SweepPayloads(ctxT(t), later); err != nil || n != 1 || has(open.PayloadDigest) {
		t.Fatalf("ended episode: removed %d, %v", n, err)
	}
}
