package broker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/hashicorp/go-hclog"
)

// peakRSS resets this process's peak resident set (clear_refs 5) and
// returns a function that reads the peak since, in bytes.
func peakRSS(t testing.TB) func() int64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	return func() int64 {
		b, _ := os.ReadFile("/proc/self/status")
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return n << 10
			}
		}
		t.Fatal("no VmHWM")
		return 0
	}
}

func childrenMaxRSS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return ru.Maxrss << 10
}

func quarantines(t testing.TB, repo string) []string {
	m, _ := filepath.Glob(filepath.Join(repo, "objects", quarantinePrefix+"*"))
	return m
}

// TestPatchBombRefused is the audit's delta bomb: a ~300 KB random file and
// a tiny binary delta that copies it thousands of times (≈1 GB), in a
// patch under 512 KiB. Before, it was accepted after tens of seconds, git
// held the whole result in memory and wrote it into the repository. Now it
// is refused from the patch's own headers before git runs, in well under a
// second, with nothing written anywhere; binary patches are refused unless
// the target allows them; the lease's bytes_per_effect lowers the cap; and
// git's RLIMIT_AS stops a bomb the cap would have let through.
func TestPatchBombRefused(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := newEnv(t, func(e *env, cfg *Config) {
		gc = &GitCommit{Targets: map[string]GitTarget{
			"repo":    {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"lib/**"}, AllowBinary: true},
			"nobin":   {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"lib/**"}},
			"nolimit": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"lib/**"}, AllowBinary: true}}}
		cfg.Adapters = append(cfg.Adapters, gc)
	})
	bomb, total := deltaBomb("lib/bomb.bin", 300_000, 3500)
	if len(bomb) >= protocol.MaxWorkerPayload || total < 1<<30-1<<26 {
		t.Fatalf("bomb: patch %d bytes, result %d", len(bomb), total)
	}

	t.Run("delta bomb", func(t *testing.T) {
		before := e.snapshot(f.bare)
		peak, children := peakRSS(t), childrenMaxRSS()
		start := time.Now()
		r := e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), bomb))
		took := time.Since(start)
		wantErr(t, r, protocol.CodeLimitExceeded)
		p := peak()
		t.Logf("bomb: patch %d B, result %d B: refused in %v; broker peak RSS %d MiB; git children peak %d MiB",
			len(bomb), total, took, p>>20, childrenMaxRSS()>>20)
		if took > 2*time.Second || p > 256<<20 || childrenMaxRSS() > max(children, 64<<20) {
			t.Fatalf("refusal took %v, broker peak %d MiB, git peak %d MiB", took, p>>20, childrenMaxRSS()>>20)
		}
		before.same(t, e.snapshot(f.bare))
		if q := quarantines(t, f.bare); len(q) != 0 {
			t.Fatalf("quarantine left behind: %v", q)
		}
	})

	t.Run("binary refused unless the target allows it", func(t *testing.T) {
		small, _ := deltaBomb("lib/small.bin", 1000, 2)
		before := e.snapshot(f.bare)
		wantErr(t, e.do(prepareReq(e, "git_commit", "nobin", gitTarget(f.head()), small)), protocol.CodeForbidden)
		before.same(t, e.snapshot(f.bare))
	})

	t.Run("bytes_per_effect lowers the cap", func(t *testing.T) {
		caps, _ := json.Marshal(map[string]any{"effects": []Capability{{Kind: "git_commit", TargetID: "*", MaxClass: 3}},
			"budget": map[string]int64{"bytes_per_effect": 4000, "bytes_total": 1 << 20, "effects_per_minute": 10}})
		l, err := e.store.GrantLease(ctxT(t), store.LeaseGrant{EpisodeID: e.ep.ID, Epoch: e.epoch(), Capabilities: caps, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.lease = l
		literal, _ := deltaBomb("lib/lit.bin", 3000, 2) // 3000-byte literal, then a 6000-byte result
		wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), literal)), protocol.CodeLimitExceeded)
		text := f.patch(func(d string) {
			_ = os.WriteFile(filepath.Join(d, "lib/big.go"), bytes.Repeat([]byte("// line of text\n"), 300), 0o644)
		})
		wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), text)), protocol.CodeLimitExceeded)
		e.grant(e.epoch())
	})

	t.Run("a small binary patch commits and its objects move in", func(t *testing.T) {
		small, _ := deltaBomb("lib/small.bin", 1000, 3)
		p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), small)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
			t.Fatal(c.State)
		}
		if got := sh(t, f.bare, "git", "cat-file", "-s", "refs/heads/main:lib/small.bin"); got != "3000" {
			t.Fatalf("committed blob size %s", got)
		}
		sh(t, f.bare, "git", "fsck", "--strict", "--no-dangling")
		if q := quarantines(t, f.bare); len(q) != 0 {
			t.Fatalf("quarantine left behind: %v", q)
		}
	})

	t.Run("memory limit stops what the cap lets through", func(t *testing.T) {
		// The cap raised past the bomb: git's RLIMIT_AS is the backstop.
		lim := gc.Limits
		gc.Limits = GitLimits{MaxResultBytes: 4 << 30, MemoryBytes: 256 << 20}
		// git's own words (its stderr) reach only the operator's log.
		var logs bytes.Buffer
		gc.Log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
		defer func() { gc.Limits, gc.Log = lim, nil }()
		mid, _ := deltaBomb("lib/mid.bin", 300_000, 2000) // 600 MB
		before := e.snapshot(f.bare)
		start := time.Now()
		req := Request{TargetID: "nolimit", Target: mustJSON(gitTarget(f.head())), Payload: mid}
		err := gc.Validate(ctxT(t), req)
		if err == nil || !strings.Contains(logs.String(), "alloc") && !strings.Contains(logs.String(), "memory") {
			t.Fatalf("git under RLIMIT_AS: %v\n%s", err, logs.String())
		}
		t.Logf("600 MB delta under a 256 MiB RLIMIT_AS: refused in %v (%v)", time.Since(start), err)
		before.same(t, e.snapshot(f.bare))
		if q := quarantines(t, f.bare); len(q) != 0 {
			t.Fatalf("quarantine left behind: %v", q)
		}
	})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
