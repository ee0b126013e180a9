package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// BenchmarkEpisodeVsBare is issue 24 §4: the same scripted task (fix
// src/calc.sh) through the real Codex CLI against the same fixture model,
// run bare on the host (as nobody, in a clone, nothing between it and the
// model) and through `autonomic run` (queued, a domain on the agents
// rootfs restored from its base checkpoint, the model behind the relay,
// the harvest, verification in a clean domain, the commit). Side by side in
// one run: the time to the agent's first model request and the total, and
// the episode's phases from its ledger; apart, the first episode's
// overhead on a fresh launcher state (the per-boot rootfs verification).
func BenchmarkEpisodeVsBare(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rk := startRunKernel(b, ctx)
	root, _ := agentsRootfs(b, ctx, nil) // built by startRunKernel
	p, err := agent.Load("codex")
	if err != nil {
		b.Fatal(err)
	}
	const task = "Fix the failing test: src/calc.sh adds one too many. Do not change the tests."
	// one runs the task bare and through autonomic run, and returns the
	// times to the first model request and the totals.
	one := func(phases bool) (bareFirst, bareTotal, runFirst, runTotal time.Duration) {
		bareFirst, bareTotal = bareCodex(b, ctx, rk, root, p, task)
		m := rk.models[p.WireAPI]
		m.Reset()
		testbed.Git(b, rk.repo, "update-ref", "refs/heads/agent/codex", rk.base)
		var out, errb bytes.Buffer
		began := time.Now()
		code := runCmd([]string{"--repo", rk.repo, "--agent", "codex", "--config", rk.cfgPath, "--key", rk.key, "--wait", "8m", task}, &out, &errb)
		runTotal = time.Since(began)
		reqs := m.Requests()
		if code != 0 || len(reqs) == 0 || !strings.Contains(out.String(), "landed: refs/heads/agent/codex") {
			b.Fatalf("autonomic run: exit %d, %d model requests\n%s%s", code, len(reqs), out.String(), errb.String())
		}
		if phases {
			episodePhases(b, ctx, rk, out.String(), began)
		}
		return bareFirst, bareTotal, reqs[0].At.Sub(began), runTotal
	}
	// The first episode on a fresh launcher state pays what a host pays
	// once per boot: the launcher verifies every file of each rootfs it
	// first uses (the agents rootfs, hundreds of MB) against its manifest.
	// It is reported apart, never in the medians.
	b.StopTimer()
	coldBare, _, coldRun, _ := one(false)
	b.StartTimer()
	var bareFirst, bareTotal, runFirst, runTotal []time.Duration
	for i := 0; i < b.N; i++ {
		bf, bt, rf, rt := one(i == 0)
		bareFirst, bareTotal = append(bareFirst, bf), append(bareTotal, bt)
		runFirst, runTotal = append(runFirst, rf), append(runTotal, rt)
	}
	// The median; of an even count, the mean of the middle two.
	med := func(ds []time.Duration) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		n := len(ds)
		return float64((ds[(n-1)/2] + ds[n/2]).Milliseconds()) / 2
	}
	b.ReportMetric(med(bareFirst), "bare-first-request-ms")
	b.ReportMetric(med(runFirst), "run-first-request-ms")
	b.ReportMetric(med(bareTotal), "bare-total-ms")
	b.ReportMetric(med(runTotal), "run-total-ms")
	b.ReportMetric(med(runFirst)-med(bareFirst), "first-request-overhead-ms")
	b.ReportMetric(med(runTotal)-med(bareTotal), "total-overhead-ms")
	b.ReportMetric(float64((coldRun - coldBare).Milliseconds()), "cold-first-request-overhead-ms")
}

// bareCodex runs the rendered Codex argv on the host against a fresh
// fixture model of the same script, in a clone of the base, as nobody:
// the agent's own home files and environment, pointed straight at the
// model. It returns the time to its first model request and its total.
func bareCodex(b *testing.B, ctx context.Context, rk *runKernel, root string, p *agent.Profile, task string) (time.Duration, time.Duration) {
	b.Helper()
	base, err := os.MkdirTemp("", "bare-codex-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	home, ws := filepath.Join(base, "home"), filepath.Join(base, "ws")
	if out, err := exec.Command("git", "clone", "-q", rk.repo, ws).CombinedOutput(); err != nil {
		b.Fatalf("clone: %v %s", err, out)
	}
	testbed.Git(b, ws, "checkout", "-q", rk.base)
	m, err := fixturemodel.Start(fixturemodel.FixCalc(p.WireAPI, ws))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	argv, err := p.Render(task, "")
	if err != nil {
		b.Fatal(err)
	}
	local := func(s string) string {
		return strings.ReplaceAll(s, agent.BridgeAddr, strings.TrimPrefix(m.URL, "http://"))
	}
	env := []string{"HOME=" + home, "PATH=" + filepath.Join(root, "usr/local/bin") + ":/usr/bin:/bin"}
	i := 1
	for ; i < len(argv) && argv[i] != "--"; i += 2 {
		flag, val := argv[i], argv[i+1]
		switch flag {
		case "--home-file":
			rel, b64, _ := strings.Cut(val, "=")
			content, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				b.Fatal(err)
			}
			f := filepath.Join(home, rel)
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(local(string(content))), 0o600); err != nil {
				b.Fatal(err)
			}
		case "--env":
			env = append(env, local(val))
		}
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		b.Fatal(err)
	}
	os.Chmod(base, 0o755)
	filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	cargs := argv[i+1:]
	cmd := exec.CommandContext(ctx, filepath.Join(root, cargs[0]), cargs[1:]...)
	cmd.Env, cmd.Dir = env, ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err = cmd.Run()
	total := time.Since(began)
	reqs := m.Requests()
	fixed, _ := os.ReadFile(filepath.Join(ws, fixturemodel.CalcFile))
	if err != nil || len(reqs) == 0 || !strings.Contains(string(fixed), fixturemodel.CalcFix) {
		b.Fatalf("bare codex: %v, %d requests, calc.sh:\n%s\n%s", err, len(reqs), fixed, out.String())
	}
	return reqs[0].At.Sub(began), total
}

// episodePhases logs when each of the episode's ledger events came,
// from the command's start.
func episodePhases(b *testing.B, ctx context.Context, rk *runKernel, out string, began time.Time) {
	b.Helper()
	ep := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}):`).FindStringSubmatch(out)
	if ep == nil {
		b.Fatalf("the command named no episode:\n%s", out)
	}
	db, err := pgx.Connect(ctx, rk.dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT kind, at FROM events WHERE episode_id = $1 ORDER BY seq`, ep[1])
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var kind string
		var at time.Time
		if err := rows.Scan(&kind, &at); err != nil {
			b.Fatal(err)
		}
		lines = append(lines, at.Sub(began).Round(time.Millisecond).String()+" "+kind)
	}
	// One line: a benchmark's log keeps only its first lines.
	b.Logf("episode %s, from the command's start: %s", ep[1], strings.Join(lines, ", "))
}
