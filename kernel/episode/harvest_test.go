package episode_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/store"
)

// referenceRepo is a bare copy of gates/scenario/fixture/repo: src/calc.sh
// adds one too many, tests/test_calc.sh checks it; extra are more files
// of its base commit.
func referenceRepo(t *testing.T, extra map[string]string) (bare, base string) {
	t.Helper()
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	src := filepath.Join(mod, "gates", "scenario", "fixture", "repo")
	for _, f := range []string{"Makefile", "src/calc.sh", "tests/test_calc.sh"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(src, f))
		os.MkdirAll(filepath.Dir(filepath.Join(work, f)), 0o755)
		if err := os.WriteFile(filepath.Join(work, f), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	for f, body := range extra {
		os.MkdirAll(filepath.Dir(filepath.Join(work, f)), 0o755)
		if err := os.WriteFile(filepath.Join(work, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbed.Git(t, work, "init", "-q", "-b", "main")
	testbed.Git(t, work, "add", ".")
	testbed.Git(t, work, "commit", "-q", "-m", "reference repository")
	bare = filepath.Join(dir, "authoritative.git")
	testbed.Git(t, dir, "clone", "-q", "--bare", work, bare)
	return bare, testbed.Git(t, bare, "rev-parse", "refs/heads/main")
}

// harvestRig is a rig on the reference repository whose target allows
// src/ and tests/ (so the policy's forbid on tests/ is what refuses) and
// whose controller reads the testbed launcher's checkpoint store.
func harvestRig(t *testing.T, ctx context.Context, name string, more ...rigOpt) *rig {
	opts := append([]rigOpt{func(o *rigOptions) { o.reference = true }, withTargetPaths("src/**", "tests/**", "Makefile"),
		withConfig(func(c *episode.Config) {
			c.Archives = workspace.ArchiveDir(filepath.Join(shared.bed.State, "checkpoints"))
		})}, more...)
	return newRig(t, ctx, name, opts...)
}

const task = "Fix the failing test: make test must pass.\nDo not edit tests/."

// harvestSpec runs script as the worker and harvests to main; the policy
// forbids tests/.
func (r *rig) harvestSpec(script string) episode.Spec {
	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Forbid: []string{"tests/**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	return episode.Spec{OriginIntent: task, Repo: r.repo, BaseOID: r.base, Policy: signPolicy(grant), Envelope: grant,
		Argv: []string{"/bin/bash", "-c", "set -eu; cd /workspace\n" + script}, MaxRepairs: 1, LeaseTTL: time.Hour,
		Harvest: &episode.HarvestSpec{TargetID: "repo", Ref: "refs/heads/main"}}
}

// ended waits for e to end by itself and checks the store agrees: the
// episode's final state, and an episode_ended reason that reads back as
// the same outcome; the ledger verifies and the domain is gone.
func (r *rig) ended(t *testing.T, ctx context.Context, e *episode.Episode, want episode.OutcomeKind) episode.Outcome {
	t.Helper()
	launcherID := e.Status().LauncherID
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("the episode did not end by itself: %+v", e.Status())
	}
	s := e.Status()
	if s.Outcome == nil {
		t.Fatalf("no outcome: %+v (%v)", s, e.Exit())
	}
	o := *s.Outcome
	t.Logf("outcome: %+v", o)
	if o.Kind != want {
		t.Fatalf("outcome %+v, want %s", o, want)
	}
	rec, err := r.st.Episode(ctx, e.ID())
	wantState := store.EpisodeCompleted
	if want == episode.OutcomeWallTime || want == episode.OutcomeFailed {
		wantState = store.EpisodeAborted
	}
	if err != nil || rec.State != wantState {
		t.Fatalf("store: %s, %v; want %s", rec.State, err, wantState)
	}
	evs, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Kind != "episode_ended" {
			continue
		}
		var body struct {
			Reason string `json:"reason"`
		}
		if err := jsonUnmarshal(ev.Body, &body); err != nil {
			t.Fatal(err)
		}
		got, ok := episode.ParseOutcome(body.Reason)
		if !ok || got.Kind != o.Kind || got.Commit != o.Commit || got.Effect != o.Effect {
			t.Fatalf("recorded reason %q does not read back as %+v", body.Reason, o)
		}
		found = true
	}
	if !found {
		t.Fatal("no episode_ended event")
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
	if st, err := shared.bed.Domains().Inspect(ctx, launcherID); err != nil || st.Exists {
		t.Fatalf("domain after the end: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(shared.bed.Workspaces, e.ID().String())); !os.IsNotExist(err) {
		t.Errorf("the workspace outlived the episode: %v", err)
	}
	return o
}

// TestHarvestLandsTheFix: a shell worker that only edits src/calc.sh and
// exits, knowing nothing of effects; the episode ends by itself, landed,
// with the commit on main: on the exact base, with the task in its
// message and the trailer naming the outcome's effect.
func TestHarvestLandsTheFix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_lands")
	e, err := r.k.Start(ctx, r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh; sh tests/test_calc.sh`))
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeLanded)
	head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main")
	if o.Ref != "refs/heads/main" || o.Commit != head || o.Effect == "" {
		t.Fatalf("outcome %+v, main at %s", o, head)
	}
	if testbed.Git(t, r.repo, "rev-parse", "refs/heads/main^") != r.base {
		t.Fatal("the commit is not on the exact base")
	}
	if got := testbed.Git(t, r.repo, "show", "refs/heads/main:src/calc.sh"); !strings.Contains(got, "$(($2 + $3))") {
		t.Fatalf("calc.sh on main:\n%s", got)
	}
	if files := testbed.Git(t, r.repo, "diff", "--name-only", r.base, "refs/heads/main"); files != "src/calc.sh" {
		t.Fatalf("the commit touches %q", files)
	}
	msg := headMessage(t, r.repo)
	if !strings.HasPrefix(msg, "Fix the failing test: make test must pass.") || !strings.Contains(msg, "Autonomic-Effect: "+o.Effect) {
		t.Fatalf("message:\n%s", msg)
	}
}

// TestHarvestDeniedByPolicy: a worker that also edits tests/ is refused
// by the policy's forbid; main does not move and the reason says why.
func TestHarvestDeniedByPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_denied")
	e, err := r.k.Start(ctx, r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh; sed -i 's/!= 4/!= 5/' tests/test_calc.sh`))
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeDenied)
	if o.Code != "forbidden" || !strings.Contains(o.Reason, "forbid") || o.Effect == "" {
		t.Fatalf("denial %+v: want the policy's forbid, on the proposed effect", o)
	}
	if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); head != r.base {
		t.Fatal("main moved")
	}
}

// TestHarvestLandsBinaryWhenTargetAllows: on a target with allow_binary,
// a worker's new binary file lands byte for byte beside its fix (the
// harvest's GIT binary patch through the real adapter); on one without,
// the same worker is denied and the operator's record names the path,
// escaped.
func TestHarvestLandsBinaryWhenTargetAllows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	script := `sed -i 's/ + 1))/))/' src/calc.sh; printf '\x89PNG\r\n\x1a\n\x00\x01\x02' > src/logo.png`
	r := harvestRig(t, ctx, "harvest_binary", withBinaryTarget())
	e, err := r.k.Start(ctx, r.harvestSpec(script))
	if err != nil {
		t.Fatal(err)
	}
	r.ended(t, ctx, e, episode.OutcomeLanded)
	if got := testbed.Git(t, r.repo, "cat-file", "-s", "refs/heads/main:src/logo.png"); got != "11" {
		t.Fatalf("logo.png on main: %s bytes", got)
	}
	if files := testbed.Git(t, r.repo, "diff", "--name-only", r.base, "refs/heads/main"); files != "src/calc.sh\nsrc/logo.png" {
		t.Fatalf("the commit touches %q", files)
	}

	r = harvestRig(t, ctx, "harvest_binary_refused")
	if e, err = r.k.Start(ctx, r.harvestSpec(script)); err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeDenied)
	if !strings.Contains(o.Reason, "binary") || !strings.Contains(o.Reason, `"src/logo.png"`) {
		t.Fatalf("denial %+v: want the binary rule and the path", o)
	}
}

// TestHarvestIgnoredInTheLedger: what the repository's ignore rules
// leave out (a node_modules with npm's .bin symlinks, __pycache__
// bytecode) is not part of the change — the fix lands alone — and the
// episode's recorded outcome counts it, with a few names.
func TestHarvestIgnoredInTheLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_ignored", withFiles(map[string]string{".gitignore": "node_modules/\n__pycache__/\n"}))
	e, err := r.k.Start(ctx, r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh
mkdir -p node_modules/left-pad/bin node_modules/.bin src/__pycache__
echo 'module.exports = 1' > node_modules/left-pad/index.js
ln -s ../left-pad/bin/cli.js node_modules/.bin/left-pad
printf '\x00\x01' > src/__pycache__/calc.cpython-311.pyc`))
	if err != nil {
		t.Fatal(err)
	}
	r.ended(t, ctx, e, episode.OutcomeLanded)
	if files := testbed.Git(t, r.repo, "diff", "--name-only", r.base, "refs/heads/main"); files != "src/calc.sh" {
		t.Fatalf("the commit touches %q", files)
	}
	evs, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	var rec episode.Outcome
	for _, ev := range evs {
		var body struct {
			Reason string `json:"reason"`
		}
		if ev.Kind == "episode_ended" && jsonUnmarshal(ev.Body, &body) == nil {
			rec, _ = episode.ParseOutcome(body.Reason)
		}
	}
	if rec.Ignored < 4 || len(rec.IgnoredSample) == 0 || !strings.HasPrefix(rec.IgnoredSample[0], "node_modules") && !strings.HasPrefix(rec.IgnoredSample[0], "src/__pycache__") {
		t.Fatalf("recorded outcome %+v: want the ignored paths counted, with names", rec)
	}
}

// TestRunsOnTheirOwnBranches: two episodes from the same base at once,
// each harvesting onto its own new branch under the target's prefix
// (autonomic run's default), both land — neither is ref_moved, nor
// commit_unknown — each branch created on the base, main untouched.
func TestRunsOnTheirOwnBranches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "own_branches")
	refs := []string{"refs/heads/agent/codex/0a1b2c3d4e5f", "refs/heads/agent/claude/6a7b8c9d0e1f"}
	var eps []*episode.Episode
	for _, ref := range refs {
		spec := r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh`)
		spec.Harvest.Ref, spec.Harvest.Create = ref, true
		e, err := r.k.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, e)
	}
	for i, e := range eps {
		o := r.ended(t, ctx, e, episode.OutcomeLanded)
		if o.Ref != refs[i] || testbed.Git(t, r.repo, "rev-parse", refs[i]) != o.Commit {
			t.Fatalf("outcome %+v, want %s", o, refs[i])
		}
		if testbed.Git(t, r.repo, "rev-parse", refs[i]+"^") != r.base {
			t.Fatalf("%s is not on the base", refs[i])
		}
	}
	if testbed.Git(t, r.repo, "rev-parse", "refs/heads/main") != r.base {
		t.Fatal("main moved")
	}
}

// TestHarvestLargerThanAFrame: a change whose patch is larger than a
// worker's frame may carry (a regenerated lock file) lands: the kernel
// proposes the harvest's patch apart from any frame, up to what the
// broker stores, under the lease's bytes_per_effect — and the two caps
// are one.
func TestHarvestLargerThanAFrame(t *testing.T) {
	if workspace.MaxPatch != broker.MaxPayload {
		t.Fatalf("the harvest makes patches up to %d bytes, the broker stores %d", workspace.MaxPatch, broker.MaxPayload)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_large")
	e, err := r.k.Start(ctx, r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh; seq 1 100000 > src/big.lock`))
	if err != nil {
		t.Fatal(err)
	}
	r.ended(t, ctx, e, episode.OutcomeLanded)
	if n := testbed.Git(t, r.repo, "cat-file", "-s", "refs/heads/main:src/big.lock"); n != "588895" {
		t.Fatalf("big.lock on main: %s bytes", n)
	}
}

// TestHarvestNothingToCommit: a worker that changes nothing (it copies a
// file up and writes it back unchanged) ends with nothing to commit, and
// no effect is proposed.
func TestHarvestNothingToCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_nothing")
	e, err := r.k.Start(ctx, r.harvestSpec(`cp src/calc.sh /tmp/c; cat /tmp/c > src/calc.sh; mkdir -p /tmp/home/.agent; echo state > /tmp/home/.agent/x`))
	if err != nil {
		t.Fatal(err)
	}
	r.ended(t, ctx, e, episode.OutcomeNothing)
	evs, _ := r.st.Events(ctx, e.ID())
	for _, ev := range evs {
		if ev.Kind == "effect_proposed" {
			t.Fatal("an effect was proposed for no change")
		}
	}
}

// TestWallTimeEndsAnEpisode: a worker that sleeps forever is destroyed
// when the episode's wall time runs out; the episode ends aborted with
// outcome wall_time, harvest or not.
func TestWallTimeEndsAnEpisode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_walltime", withConfig(func(c *episode.Config) { c.MaxWallTime = time.Hour }))
	spec := r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh; exec sleep 100000`)
	spec.WallTime = 4 * time.Second
	start := time.Now()
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeWallTime)
	if d := time.Since(start); d < 4*time.Second || d > 60*time.Second {
		t.Fatalf("ended after %s, want about 4 s", d)
	}
	if !strings.Contains(o.Reason, "4s") {
		t.Errorf("reason %q", o.Reason)
	}
	if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); head != r.base {
		t.Fatal("a wall-time episode landed something")
	}
	// A spec above the kernel's maximum is refused before anything runs.
	spec.WallTime = 2 * time.Hour
	if _, err := r.k.Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "wall_time") {
		t.Fatalf("over the maximum: %v", err)
	}
}

// TestHarvestWorkerCommittedItself: a worker that commits its change
// through the effect client and exits is not harvested again: the outcome
// is its own commit, and main holds exactly one new commit.
func TestHarvestWorkerCommittedItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_self")
	script := `E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
sed -i 's/ + 1))/))/' src/calc.sh
$G diff > /tmp/fix.patch
p=$($E prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$($G rev-parse HEAD)\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}" -payload /tmp/fix.patch)
id=$(pick "$p" id); rev=$(pick "$p" revision)
$E evaluate -effect "$id" -revision "$rev" >/dev/null
$E commit -effect "$id" -revision "$rev"`
	spec := r.harvestSpec(script)
	spec.Harvest.WorkerCommits = true // the operator asked for it
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeLanded)
	if !strings.Contains(o.Reason, "already committed") || o.Commit != testbed.Git(t, r.repo, "rev-parse", "refs/heads/main") {
		t.Fatalf("outcome %+v", o)
	}
	if n := testbed.Git(t, r.repo, "rev-list", "--count", r.base+"..refs/heads/main"); n != "1" {
		t.Fatalf("%s commits on main, want the worker's one", n)
	}
}

// TestWorkerCannotCommitForTheHarvest: in a harvest episode whose
// operator did not ask for worker commits, the worker's own git_commit on
// the harvest's target is refused at prepare (forbidden, nothing
// recorded), whatever ref or message it names; the harvest then lands the
// change the worker left, under the kernel's message.
func TestWorkerCannotCommitForTheHarvest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "harvest_bypass")
	script := `E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
sed -i 's/ + 1))/))/' src/calc.sh
$G diff > /tmp/fix.patch
for ref in refs/heads/main refs/heads/other; do
  if out=$($E prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$($G rev-parse HEAD)\",\"ref\":\"$ref\",\"message\":\"LGTM, reviewed by the maintainer\"}" -payload /tmp/fix.patch 2>&1); then
    echo "PREPARED $ref: $out"
  else
    echo "REFUSED $ref: $out"
  fi
done`
	e, err := r.k.Start(ctx, r.harvestSpec(script))
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeLanded)
	if strings.Contains(o.Reason, "already committed") || o.Commit != testbed.Git(t, r.repo, "rev-parse", "refs/heads/main") {
		t.Fatalf("outcome %+v: want the harvest's own commit", o)
	}
	msg := testbed.Git(t, r.repo, "log", "-1", "--format=%B", "refs/heads/main")
	if strings.Contains(msg, "LGTM") || !strings.Contains(msg, "Harvested by Autonomic") {
		t.Fatalf("main's message is not the harvest's: %q", msg)
	}
	effs, err := r.st.ListEffects(ctx, e.ID(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(effs) != 1 {
		t.Fatalf("%d effects recorded, want only the harvest's (the worker's prepares refused before anything is recorded)", len(effs))
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestHarvestHostileWorkspace plants, in a real domain, what a hostile
// worker can leave for the harvest, and shows each is refused or left out
// and none is followed, executed or able to block or exhaust the kernel:
// symlinks to the kernel's files, its credentials and /proc; a FIFO (and
// a device node it cannot even make); names with a newline and invalid
// UTF-8; a sparse giant; and a modified .git (hooks, core.fsmonitor, a
// config include, alternates, a gitdir file) next to a hard link, which
// lands as plain content while nothing in .git is used.
func TestHarvestHostileWorkspace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// src/notes.txt: a plain file to hard-link (a link to the Makefile
	// would be a build-file change the rule bank rates an escalation).
	r := harvestRig(t, ctx, "harvest_hostile", withFiles(map[string]string{"src/notes.txt": "notes\n"}))
	marker := filepath.Join(t.TempDir(), "host-ran-worker-code")
	fix := `sed -i 's/ + 1))/))/' src/calc.sh` + "\n"
	py := func(code string) string { return "python3 -c '" + code + "'\n" }
	for _, c := range []struct {
		name   string
		script string
		want   episode.OutcomeKind
		reason string
	}{
		{"symlinks", fix + "ln -s /etc/autonomic/kernel.json kernel.json\nln -s /proc/self/environ src/environ\n" +
			"ln -s ../../../../../root/.ssh/id_ed25519 src/key\n", episode.OutcomeDenied, "symlink"},
		{"fifo and device", fix + py(`import os; os.mkfifo("src/pipe")`) + py(`import os
try: os.mknod("src/null", 0o20666, os.makedev(1, 3))
except OSError: pass`), episode.OutcomeDenied, "FIFO"},
		{"newline name", fix + py(`open(b"src/evil\nname.sh", "w").write("x")`), episode.OutcomeDenied, "control"},
		{"invalid utf-8 name", fix + py(`open(b"src/bad\xff.sh", "w").write("x")`), episode.OutcomeDenied, "UTF-8"},
		{"sparse giant", fix + py(`f = open("src/giant", "wb"); f.truncate(512 << 20)`), episode.OutcomeFailed, "checkpoint_unsafe"},
		{"modified .git and a hard link", fix + "ln src/notes.txt src/hard.txt\n" +
			"mkdir -p .git/hooks; for h in pre-commit post-commit reference-transaction post-checkout pre-push; do printf '#!/bin/sh\\ntouch " + marker + "\\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done\n" +
			"printf '[core]\\n\\tfsmonitor = touch " + marker + "\\n\\thooksPath = .git/hooks\\n[include]\\n\\tpath = /etc/shadow\\n' >> .git/config\n" +
			"mkdir -p .git/objects/info; echo /var/lib/autonomic/repos/other.git/objects > .git/objects/info/alternates\n" +
			"mkdir -p vendor; echo 'gitdir: /var/lib/autonomic' > vendor/.git\n", episode.OutcomeLanded, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			e, err := r.k.Start(ctx, r.harvestSpec(c.script))
			if err != nil {
				t.Fatal(err)
			}
			o := r.ended(t, ctx, e, c.want)
			t.Logf("ended in %s", time.Since(start).Round(time.Millisecond))
			// Every planting was made: the worker ran to its end.
			select {
			case x := <-e.WorkerExits():
				if x.Exited.ExitCode == nil || *x.Exited.ExitCode != 0 {
					t.Fatalf("the planting worker failed: %+v\n%s", x.Exited, x.Output)
				}
			default:
				t.Fatal("no worker exit was delivered")
			}
			if !strings.Contains(o.Reason, c.reason) {
				t.Errorf("reason %q, want it to say %q", o.Reason, c.reason)
			}
			if c.want != episode.OutcomeLanded {
				if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); head != r.base {
					t.Fatal("main moved")
				}
				return
			}
			files := testbed.Git(t, r.repo, "diff", "--name-only", r.base, "refs/heads/main")
			if files != "src/calc.sh\nsrc/hard.txt" {
				t.Fatalf("the commit touches %q, want the fix and the hard link's content only", files)
			}
			if a, b := testbed.Git(t, r.repo, "show", "refs/heads/main:src/notes.txt"), testbed.Git(t, r.repo, "show", "refs/heads/main:src/hard.txt"); a != b {
				t.Fatal("the hard link did not land as the same content")
			}
			if cfg := testbed.Git(t, r.repo, "config", "--list", "--local"); strings.Contains(cfg, "fsmonitor") || strings.Contains(cfg, "include") {
				t.Fatalf("the authoritative repository's configuration changed:\n%s", cfg)
			}
		})
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("worker-planted code ran on the host")
	}
}

// TestHarvestWaitsOnItsAction (issue 25 §2): a harvest the lease does not
// grant (its git_commit target outside the policy, under
// escalate_outside_lease) is not ended denied: its change waits on an
// Action naming it exactly, the episode parked, and the operator's answer
// decides. Denied, the episode ends denied and nothing lands; approved,
// the change lands on main.
func TestHarvestWaitsOnItsAction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := harvestRig(t, ctx, "harvest_action", withBroker(func(r *rig, bc *broker.Config) {
		bc.DecisionKeys = map[string]ed25519.PublicKey{"operator": opKey.Public().(ed25519.PublicKey)}
		bc.EscalateOutsideLease = true
	}))
	// The policy grants git_commit on another target only.
	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "elsewhere", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Forbid: []string{"tests/**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	answer := func(verdict string) (*episode.Episode, store.Effect) {
		spec := r.harvestSpec(harvestFix)
		spec.Policy, spec.Envelope = signPolicy(grant), grant
		e, err := r.k.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		var waiting store.Effect
		for waiting.ID == [16]byte{} || !e.Status().Parked {
			if ctx.Err() != nil || e.Status().State.Final() {
				t.Fatalf("the harvest's change did not come to wait on its Action: %+v", e.Status())
			}
			time.Sleep(100 * time.Millisecond)
			effs, err := r.st.ListEffects(ctx, e.ID(), 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range effs {
				if f.Kind == "git_commit" && f.State == store.Evaluating && f.OutsideLease != "" {
					waiting = f
				}
			}
		}
		a, err := r.st.ActionFor(ctx, waiting.ID, waiting.Revision, waiting.Epoch)
		if err != nil || !a.Binds(waiting) || !strings.Contains(a.Reason, "no grant of git_commit on repo") {
			t.Fatalf("the change's Action: %+v, %v", a, err)
		}
		time.Sleep(2 * time.Second)
		if s := e.Status(); s.State.Final() || !s.Parked {
			t.Fatalf("the episode did not wait for the answer: %+v", s)
		}
		sig, err := broker.SignApproval(opKey, "operator", broker.ApprovalFor(waiting, verdict))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.b.Approve(ctx, waiting.ID, sig); err != nil {
			t.Fatal(err)
		}
		return e, waiting
	}

	e, _ := answer(store.VerdictDeny)
	if o := r.ended(t, ctx, e, episode.OutcomeDenied); !strings.Contains(o.Reason, "a human denied") {
		t.Fatalf("outcome %+v", o)
	}
	if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); head != r.base {
		t.Fatalf("main moved to %s on a denied change", head)
	}

	e, waiting := answer(store.VerdictAllow)
	o := r.ended(t, ctx, e, episode.OutcomeLanded)
	if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); o.Commit != head || head == r.base || o.Effect != waiting.ID.String() {
		t.Fatalf("outcome %+v, main at %s", o, head)
	}
}
