package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// takeoverWorker commits one effect (a step on refs/heads/step/1) and
// waits to be lost with its host; run again in a restored domain, it
// finds its progress and finishes. Its harvest lands on task/final.
const takeoverWorker = `
set -u
E=` + testbed.EffectClientPath + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
if [ ! -e progress.txt ]; then
  echo "before the loss" > progress.txt
  echo "step 1" >> greeting.txt
  $G diff --binary > /tmp/step.patch
  base=$($G rev-parse HEAD)
  p=$($E prepare -kind git_commit -target-id steps -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/step/1\",\"message\":\"step 1\",\"create\":true}" -payload /tmp/step.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
  id=$(pick "$p" id); rev=$(pick "$p" revision)
  $E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
  c=$($E commit -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
  echo "STEP $(pick "$c" state)"
  sleep 600
  exit 1
fi
sleep 3 # long enough for the test to read the live episode
echo "after the takeover, epoch $AUTONOMIC_EPOCH" >> progress.txt
exit 0
`

// TestTakeoverRestoresOnAnotherHost is issue 25 §1's takeover: a task's
// worker commits a step (after which the kernel takes and replicates a
// stable checkpoint) and its host is lost (SIGKILL). Another host — its
// own launcher, checkpoint store, workspaces — takes the task over: it
// fences the episode, imports the replica of that checkpoint from the
// database into its launcher, and resumes the same episode from it. The
// resumed worker finds what it wrote before the loss, does not repeat its
// committed step, and finishes; the harvest lands both. No repair is
// spent, and every ledger verifies.
func TestTakeoverRestoresOnAnotherHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := newQueueRig(t, ctx)
	r.effectClient = true
	a := r.start(t, ctx, "host-a")
	spec, _ := json.Marshal(episode.Spec{OriginIntent: "a step, then the rest", Repo: r.repo, BaseOID: r.base, Policy: r.policy,
		Envelope: r.grant, Argv: []string{"/bin/bash", "-c", takeoverWorker}, LeaseTTL: time.Hour, MaxRepairs: 1,
		Harvest: &episode.HarvestSpec{TargetID: "repo", Ref: "refs/heads/task/final", Create: true}})
	tk, err := a.c.SubmitTask(ctx, api.TaskRequest{Project: "p0", MinClass: 3, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, r.cluster.AdminConnString("kernel"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)

	// The step is committed and the stable checkpoint after it is in the
	// database.
	var ep uuid.UUID
	var ckpt uuid.UUID
	for {
		if ctx.Err() != nil {
			t.Fatalf("the step never committed and replicated:\n%s", a.logs())
		}
		v, err := a.c.Task(ctx, tk.ID.String())
		if err != nil {
			t.Fatal(err)
		}
		if v.State.Done() {
			t.Fatalf("the task ended before its host was lost: %s %s\n%s", v.State, v.Reason, a.logs())
		}
		if v.EpisodeID != nil {
			ep = *v.EpisodeID
			if lastReplicated(ctx, db, ep, &ckpt) == nil {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	a.kill()
	killed := time.Now()
	// Host A may have made (and replicated) a later stable checkpoint
	// between that read and its death: the takeover restores the last one.
	if err := lastReplicated(ctx, db, ep, &ckpt); err != nil {
		t.Fatal(err)
	}
	b := r.start(t, ctx, "host-b")

	// Host B drives the same episode in a new generation, no repair spent.
	for {
		if ctx.Err() != nil {
			t.Fatalf("host B never drove the episode:\n%s", b.logs())
		}
		v, err := b.c.Episode(ctx, ep.String())
		if err == nil && v.Live != nil && v.Live.Generation == 2 {
			if v.Live.Repairs != 0 || v.Epoch != 2 {
				t.Errorf("resumed episode: epoch %d, %d repairs spent (want 2, 0)", v.Epoch, v.Live.Repairs)
			}
			break
		}
		if err == nil && v.State != string(store.EpisodeActive) {
			t.Fatalf("the episode ended %s before host B drove it", v.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var final api.TaskView
	for {
		if ctx.Err() != nil {
			t.Fatalf("the task never ended:\nhost B:\n%s", b.logs())
		}
		if final, err = b.c.Task(ctx, tk.ID.String()); err != nil {
			t.Fatal(err)
		}
		if final.State.Done() {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if final.State != store.TaskEnded || final.Ended == nil || final.Ended.Kind != episode.OutcomeLanded {
		t.Fatalf("task ended %s %s: %s\nhost B:\n%s", final.State, final.Outcome, final.Reason, b.logs())
	}
	// The same episode went on: no new one, one takeover.
	if len(final.Episodes) != 1 || final.Episodes[0] != ep || final.Takeovers != 1 {
		t.Fatalf("episodes %v (want [%s]), takeovers %d", final.Episodes, ep, final.Takeovers)
	}
	// What the worker wrote before the loss came back from the checkpoint
	// on host B, and it did not repeat its step.
	if got := testbed.Git(t, r.repo, "show", "refs/heads/task/final:progress.txt"); strings.TrimSpace(got) != "before the loss\nafter the takeover, epoch 2" {
		t.Errorf("progress.txt on task/final:\n%s", got)
	}
	if got := testbed.Git(t, r.repo, "show", "refs/heads/task/final:greeting.txt"); strings.TrimSpace(got) != "hi\nstep 1" {
		t.Errorf("greeting.txt on task/final:\n%s", got)
	}
	if n := strings.TrimSpace(testbed.Git(t, r.repo, "rev-list", "--count", r.base+"..refs/heads/step/1")); n != "1" {
		t.Errorf("step/1 has %s commits over the base", n)
	}
	var committed int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM effects WHERE episode_id = $1 AND kind = 'git_commit' AND state = 'committed'`, ep).Scan(&committed); err != nil || committed != 2 {
		t.Errorf("committed git_commit effects: %d (want the step and the harvest), %v", committed, err)
	}
	// One epoch advance, the takeover's, naming the replicated checkpoint;
	// the generation it made restored from it. It is not a repair.
	var reason string
	var from *uuid.UUID
	if err := db.QueryRow(ctx, `SELECT reason, checkpoint_id FROM recovery_lineage WHERE episode_id = $1`, ep).Scan(&reason, &from); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(reason, "host lost") || from == nil || *from != ckpt {
		t.Errorf("lineage: %q from %v, want host lost from %s", reason, from, ckpt)
	}
	var restored *uuid.UUID
	if err := db.QueryRow(ctx, `SELECT checkpoint_id FROM domain_generations WHERE generation = 2 AND domain_id = (SELECT id FROM domains WHERE episode_id = $1)`, ep).Scan(&restored); err != nil ||
		restored == nil || *restored != ckpt {
		t.Errorf("generation 2 restored from %v (%v), want %s", restored, err, ckpt)
	}
	if !strings.Contains(b.logs(), "resumed from its last stable checkpoint") {
		t.Errorf("host B did not resume the episode:\n%s", b.logs())
	}
	// Host B imported through its own launcher and left nothing behind.
	if ents, err := os.ReadDir(filepath.Join(b.bed.Workspaces, "imports")); err != nil || len(ents) != 0 {
		t.Errorf("imports left on host B: %v, %v", ents, err)
	}
	l, err := b.c.TaskEvents(ctx, tk.ID.String())
	if err != nil || !l.Verified {
		t.Fatalf("task ledger: %v %s", err, l.Broken)
	}
	if v, err := b.c.Verify(ctx, ep.String()); err != nil || !v.OK {
		t.Errorf("episode ledger: %v %+v", err, v)
	}
	for _, e := range l.Events {
		var body struct {
			Resumed bool `json:"resumed"`
		}
		if e.Kind == "task_started" && json.Unmarshal(e.Body, &body) == nil && body.Resumed {
			t.Logf("resumed on host B %v after the kill (owner_ttl 3 s)", e.At.Sub(killed).Round(time.Millisecond))
		}
	}
	// Only the newest stable checkpoint of an active episode is kept: the
	// sweep that ended the task pruned the ended episode's replicas.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var kept int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM checkpoint_archives a JOIN checkpoints c ON c.digest = a.digest
			WHERE c.episode_id = $1`, ep).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		if kept == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas of the ended episode kept", kept)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lastReplicated reads into ckpt the episode's last stable checkpoint
// taken after a committed effect whose archive is in the database.
func lastReplicated(ctx context.Context, db *pgx.Conn, ep uuid.UUID, ckpt *uuid.UUID) error {
	return db.QueryRow(ctx, `SELECT c.id FROM checkpoints c JOIN checkpoint_archives a ON a.digest = c.digest
		JOIN effects f ON f.episode_id = c.episode_id AND f.state = 'committed' AND c.created_at > f.updated_at
		WHERE c.episode_id = $1 AND c.stable ORDER BY c.created_at DESC LIMIT 1`, ep).Scan(ckpt)
}
