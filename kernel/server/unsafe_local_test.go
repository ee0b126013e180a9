package server

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestServeRunsUnsafeLocalEpisode: `autonomic serve` with the unsafe_local
// backend runs the same lifecycle — the worker (a plain host process) fixes
// a failing test, proposes a git_commit through the effect client (which
// finds the broker socket in its environment), verification and the sensor
// bank decide, the commit lands with its trailer — and says so everywhere:
// the live view and the ledger's domain_created carry unsafe_local.
func TestServeRunsUnsafeLocalEpisode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newUnsafeFixture(t)
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(f.tmp, "autonomic-effect")
	build := exec.Command("go", "build", "-o", client, "./broker/cmd/autonomic-effect")
	build.Dir = mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the effect client: %v\n%s", err, out)
	}
	cfg := servertest.New(t, "unsafe", f.keys("", "")).Config
	stop, err := Start(ctx, cfg, hclog.NewNullLogger(), Hooks{})
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	defer stop()
	repo, base := f.repo, f.base
	spec := f.spec(t, []string{"/bin/bash", "-c", unsafeWorker}, map[string]string{"EFFECT": client})
	c := api.NewClient(cfg.APISocket())
	started, err := c.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Episode(ctx, started.ID); err != nil || v.Live == nil || !v.Live.UnsafeLocal {
		t.Fatalf("the live view does not say unsafe_local: %+v %v", v.Live, err)
	}
	for testbed.Git(t, repo, "rev-parse", "refs/heads/main") == base {
		if ctx.Err() != nil {
			effects, _ := c.Effects(context.Background(), started.ID)
			t.Fatalf("no commit landed; effects %+v", effects)
		}
		time.Sleep(50 * time.Millisecond)
	}
	msg := testbed.Git(t, repo, "log", "-1", "--format=%B", "refs/heads/main")
	if !strings.Contains(msg, broker.TrailerKey+":") {
		t.Fatalf("no trailer:\n%s", msg)
	}
	events, err := c.Events(ctx, started.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	labelled, checkpoints := false, 0
	for _, e := range events {
		var b struct {
			UnsafeLocal bool `json:"unsafe_local"`
		}
		if e.Kind == "domain_created" && json.Unmarshal(e.Body, &b) == nil && b.UnsafeLocal {
			labelled = true
		}
		if e.Kind == "checkpoint_recorded" {
			checkpoints++
		}
	}
	if !labelled || checkpoints != 0 {
		t.Fatalf("ledger: unsafe_local label %v, %d checkpoints (want labelled, none)", labelled, checkpoints)
	}
	// The operator accepts the work: completed, and the store says so.
	if v, err := c.Complete(ctx, started.ID, "fix committed"); err != nil || v.State != "completed" {
		t.Fatalf("complete: %+v %v", v.State, err)
	}
	if _, err := c.Complete(ctx, started.ID, "again"); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("completing an ended episode: %v, want illegal_transition", err)
	}
}

// unsafeWorker runs on the host: its workspace and broker socket come from
// the environment UnsafeLocal sets; the effect client reads the socket's.
const unsafeWorker = `
set -u
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd "$AUTONOMIC_WORKSPACE"
sed -i 's/1+1+1/1+1/' calc.sh
sh test.sh || exit 1
git -c safe.directory=* diff --binary > "$AUTONOMIC_WORKSPACE/../fix-$AUTONOMIC_LEASE_ID.patch"
base=$(git -c safe.directory=* rev-parse HEAD)
p=$($EFFECT prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}" -payload "$AUTONOMIC_WORKSPACE/../fix-$AUTONOMIC_LEASE_ID.patch") || exit 1
id=$(pick "$p" id); rev=$(pick "$p" revision)
$EFFECT evaluate -effect "$id" -revision "$rev" >/dev/null || exit 1
$EFFECT commit -effect "$id" -revision "$rev"
`

// unsafeFixture is an authoritative repository whose test fails until
// calc.sh is fixed, and an operator key that signs the episode's policy.
type unsafeFixture struct {
	tmp, repo, base string
	pub             ed25519.PublicKey
	key             ed25519.PrivateKey
}

func newUnsafeFixture(t *testing.T) *unsafeFixture {
	t.Helper()
	f := &unsafeFixture{tmp: t.TempDir()}
	f.repo, f.base = testbed.BareRepo(t, f.tmp, "repo.git", map[string]string{
		"calc.sh": "echo $((1+1+1))\n",
		"test.sh": "[ \"$(sh calc.sh)\" = 2 ]\n",
	}, "base")
	f.pub, f.key, _ = ed25519.GenerateKey(nil)
	return f
}

// keys is a test kernel's configuration over the fixture: unsafe_local
// with workspaces and sockets of its own (suffix tells two kernels apart)
// and, when instance is set, that store instance id.
func (f *unsafeFixture) keys(suffix, instance string) map[string]any {
	ws, sock := filepath.Join(f.tmp, "ws"+suffix), filepath.Join(f.tmp, "sock"+suffix)
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(sock, 0o755)
	keys := map[string]any{
		"policy_keys": map[string]string{"ops": base64.StdEncoding.EncodeToString(f.pub)},
		"domain":      map[string]any{"backend": "unsafe_local", "workspaces_root": ws, "sockets_root": sock},
		"targets": map[string]any{"git_commit": map[string]any{"repo": map[string]any{"repo": f.repo,
			"allowed_refs": []string{"refs/heads/main"}, "allowed_paths": []string{"**"}, "verify_argv": []string{"sh", "test.sh"}}}},
		"automatic_verification": true,
		"regulator":              map[string]any{"start_level": "act"},
	}
	if instance != "" {
		keys["store"] = map[string]any{"instance_id": instance}
	}
	return keys
}

// spec is an episode spec over the fixture, its policy signed.
func (f *unsafeFixture) spec(t *testing.T, argv []string, env map[string]string) json.RawMessage {
	t.Helper()
	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	signed, err := policy.Sign(f.key, "ops", policy.Document{Schema: policy.Schema, ID: "fix", Version: 1, Capability: grant,
		Semantic: policy.Semantic{MaxRisk: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(episode.Spec{OriginIntent: "fix calc", Repo: f.repo, BaseOID: f.base, Policy: signed, Envelope: grant,
		RequestedCeiling: 3, LeaseTTL: time.Hour, Argv: argv, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
