package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Target is one git_commit target's verification, from trusted
// configuration.
type Target struct {
	// Repo is the authoritative repository, the one the git_commit
	// adapter commits to.
	Repo string
	// Argv is verify_argv, run in the patched tree; exit 0 allows.
	Argv   []string
	Env    map[string]string
	Cwd    string // default /workspace
	Limits *protocol.ResourceLimits
	// Timeout bounds the run (default 5 minutes); overrunning denies.
	Timeout time.Duration
	// ChangeInputs lifts the rule that verification runs the base's
	// tests and build files (inputs.go): the change's own are run.
	ChangeInputs bool
}

// Runner verifies effects. Its fields mirror the launcher's configuration
// like the episode controller's do.
type Runner struct {
	Domains        domain.ExecutionDomain
	WorkspacesRoot string
	OwnerUID       int
	OwnerGID       int
	// Seccomp is the compiled worker profile: the patch under test runs
	// with no more than a worker could.
	Seccomp []byte
	Targets map[string]Target
	// Unverified are the kinds the configuration says need no
	// verification (unverified_kinds; see Rule).
	Unverified []string
	Git        string
	Logger     hclog.Logger

	mu sync.RWMutex // Targets, once AddTarget may run beside verifications
}

// AddTarget registers a target's verification while the runner serves
// (autonomic repo add).
func (r *Runner) AddTarget(id string, t Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Targets == nil {
		r.Targets = map[string]Target{}
	}
	r.Targets[id] = t
}

// Egress is what a verification gets when the effect's episode had an
// egress proxy (the episode controller builds it): its tests may need the
// dependencies its worker fetched, so they are fetched again the same way
// — through a proxy of their own under the same signed allow list,
// recorded in the same ledger and served from the host's cache — never
// vendored, never skipped. The domain runs in the episode's rootfs under
// the episode's seccomp program (the bridge needs loopback sockets): no
// more than the worker itself had.
type Egress struct {
	// Serve serves a proxy on the socket id (under the sockets root the
	// launcher binds from) until stop is called; stop waits until every
	// fetch is recorded.
	Serve   func(ctx context.Context, socketID string) (stop func() error, err error)
	Rootfs  string
	Seccomp []byte
	// Wrap is verify_argv run through the in-domain bridge to the proxy
	// with the tool variables set (agent.WrapEgress).
	Wrap func(argv []string) []string
}

// Layer is the setup layer of the effect's episode (its target's setup
// command's result; kernel/episode's setup.go): the verification domain
// runs on the episode's rootfs with the layer restored over the patched
// clone, so the tests see the dependencies the worker saw, and fetch
// nothing. A change to a path the layer shadows is denied: the tests would
// see the layer's file, not the change's.
type Layer struct {
	Checkpoint string // the layer archive's digest (hex), in the launcher's store
	Rootfs     string
	Shadow     *workspace.Shadow
}

// Body is the decision body recorded with the verdict.
type Body struct {
	EffectID      uuid.UUID `json:"effect_id"`
	Revision      int       `json:"revision"`
	Epoch         int64     `json:"epoch"`
	PayloadDigest string    `json:"payload_digest"`
	PatchSHA256   string    `json:"patch_sha256"`
	BaseOID       string    `json:"base_oid,omitempty"`
	TreeOID       string    `json:"tree_oid,omitempty"`
	Domain        string    `json:"domain,omitempty"`
	ExitCode      *int      `json:"exit_code,omitempty"`
	Signal        string    `json:"signal,omitempty"`
	Violations    int       `json:"violations"`
	OutputSHA256  string    `json:"output_sha256,omitempty"`
	OutputBytes   int       `json:"output_bytes"`
	Reason        string    `json:"reason"`
	// Rule is the verification rule that applied to the kind (RuleTests,
	// RuleNone), empty when the kind has none.
	Rule         string `json:"rule,omitempty"`
	Milliseconds int64  `json:"ms"`
	// Egress: the domain had an egress proxy (its fetches are rows of the
	// episode's fetch ledger).
	Egress bool `json:"egress,omitempty"`
	// BaseInputs are the verification inputs the change touched that were
	// put back as the base has them (the first 32; BaseInputCount all).
	BaseInputs     []string `json:"base_inputs,omitempty"`
	BaseInputCount int      `json:"base_input_count,omitempty"`
	// Layer is the setup layer restored beneath the tests (its digest).
	Layer string `json:"layer,omitempty"`
}

var oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// Verify is broker.Config.Verifier.
func (r *Runner) Verify(ctx context.Context, e store.Effect, payload []byte) (string, json.RawMessage, error) {
	return r.VerifyWith(ctx, e, payload, nil, nil)
}

// VerifyWith is Verify for an effect whose episode had an egress proxy
// (eg non-nil: the verification domain gets one too) or a setup layer
// (layer non-nil: restored beneath its tests).
func (r *Runner) VerifyWith(ctx context.Context, e store.Effect, payload []byte, eg *Egress, layer *Layer) (string, json.RawMessage, error) {
	start := time.Now()
	sum := sha256.Sum256(payload)
	b := Body{EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch, PayloadDigest: e.PayloadDigest, PatchSHA256: hex.EncodeToString(sum[:])}
	verdict, err := r.run(ctx, e, payload, &b, eg, layer)
	b.Milliseconds = time.Since(start).Milliseconds()
	if err != nil {
		r.log().Error("verification failed", "effect", e.ID, "revision", e.Revision, "epoch", e.Epoch, "error", err)
		return "", nil, err
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return "", nil, err
	}
	r.log().Info("verification", "effect", e.ID, "revision", e.Revision, "epoch", e.Epoch, "verdict", verdict, "reason", b.Reason)
	return verdict, raw, nil
}

func (r *Runner) log() hclog.Logger {
	if r.Logger == nil {
		return hclog.NewNullLogger()
	}
	return r.Logger
}

func deny(b *Body, reason string) (string, error) {
	b.Reason = reason
	return store.VerdictDeny, nil
}

func (r *Runner) run(ctx context.Context, e store.Effect, payload []byte, b *Body, eg *Egress, layer *Layer) (string, error) {
	if v, tested := r.byRule(e.Kind, b); !tested {
		return v, nil
	}
	r.mu.RLock()
	t, ok := r.Targets[e.TargetID]
	r.mu.RUnlock()
	if !ok || len(t.Argv) == 0 || !filepath.IsAbs(t.Repo) {
		return deny(b, "no verify_argv for the target")
	}
	var req struct {
		BaseOID string `json:"base_oid"`
	}
	if err := json.Unmarshal(e.Target, &req); err != nil || !oidPattern.MatchString(req.BaseOID) {
		return deny(b, "target has no valid base_oid")
	}
	b.BaseOID = req.BaseOID
	if len(payload) == 0 {
		return deny(b, "empty patch")
	}
	if r.Domains == nil || !filepath.IsAbs(r.WorkspacesRoot) {
		return "", errors.New("verify: Domains and WorkspacesRoot are required")
	}

	// A fresh id per run: a revision may be verified again, and a leftover
	// of an earlier run must never be reused.
	id := "verify-" + uuid.NewString()
	b.Domain = id
	dir, err := workspace.Prepare(ctx, workspace.Clone{Repo: t.Repo, BaseOID: req.BaseOID, Root: r.WorkspacesRoot, ID: id,
		UID: r.OwnerUID, GID: r.OwnerGID, Git: r.Git})
	if errors.Is(err, workspace.ErrInvalid) {
		return deny(b, "base is not a commit of the repository")
	}
	if err != nil {
		return "", err
	}
	defer func() { _ = workspace.Remove(r.WorkspacesRoot, id) }()
	if err := r.rawCheckout(ctx, dir); err != nil {
		return "", err
	}

	// The exact patch, applied the way the git_commit adapter applies it
	// (git apply, no hooks, no configuration but the fresh clone's), and
	// the resulting tree recorded: it is the tree the adapter will commit.
	// Prepare's chown moved every ctime; refresh so apply --index
	// compares content, not stat data.
	if _, err := r.git(ctx, dir, nil, "update-index", "-q", "--refresh"); err != nil {
		return "", err
	}
	if _, err := r.git(ctx, dir, payload, "apply", "--index", "--whitespace=nowarn", "-"); err != nil {
		return deny(b, "patch does not apply on the base")
	}
	tree, err := r.git(ctx, dir, nil, "write-tree")
	if err != nil {
		return "", err
	}
	b.TreeOID = strings.TrimSpace(tree)
	if layer != nil {
		if p, err := r.shadowed(ctx, dir, req.BaseOID, layer.Shadow); err != nil || p != "" {
			if err != nil {
				return "", err
			}
			return deny(b, fmt.Sprintf("the change touches %s, which the target's setup layer holds: the tests would not see it", p))
		}
	}
	if !t.ChangeInputs {
		if b.BaseInputs, b.BaseInputCount, err = r.baseInputs(ctx, dir, req.BaseOID); err != nil {
			return "", err
		}
	}
	// git ran as the kernel; the domain's view maps the workspace owner.
	if err := workspace.ChownTree(dir, r.OwnerUID, r.OwnerGID); err != nil {
		return "", err
	}

	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	cwd := t.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	spec := domain.Spec{ID: id, Generation: 1, WorkspaceID: id, Argv: t.Argv, Env: t.Env, Cwd: cwd,
		Limits: t.Limits, Seccomp: r.Seccomp, OneShot: true}
	if eg != nil {
		spec.EgressSocket = id + "-egress"
		stop, err := eg.Serve(ctx, spec.EgressSocket)
		if err != nil {
			return "", fmt.Errorf("verify: egress: %w", err)
		}
		// At return, after the domain is destroyed below: every fetch
		// it made is recorded before the verdict is.
		defer func() { _ = stop() }()
		b.Egress = true
		spec.Argv, spec.Rootfs, spec.Seccomp = eg.Wrap(t.Argv), eg.Rootfs, eg.Seccomp
	}
	if layer != nil {
		spec.Checkpoint, spec.Rootfs, b.Layer = layer.Checkpoint, layer.Rootfs, "sha256:"+layer.Checkpoint
	}
	dom, err := r.Domains.Create(ctx, spec)
	if err != nil {
		// A half-created domain is torn down as any other.
		if derr := r.destroy(ctx, id); derr != nil {
			return "", errors.Join(err, derr)
		}
		return "", fmt.Errorf("verify: create: %w", err)
	}
	exited, timedOut := wait(ctx, dom, timeout)
	derr := r.destroy(ctx, id)
	dom.Close()
	if derr != nil {
		return "", derr
	}
	out := dom.Output()
	osum := sha256.Sum256(out)
	b.OutputSHA256, b.OutputBytes = hex.EncodeToString(osum[:]), len(out)
	b.Violations = len(dom.Violations())
	if exited != nil {
		b.ExitCode, b.Signal = exited.ExitCode, exited.Signal
	}
	switch {
	case timedOut:
		return deny(b, "verify_argv did not finish in time")
	case b.Violations > 0:
		// A kernel denial outranks an exit status.
		return deny(b, "verify_argv violated the worker profile")
	case exited == nil || exited.ExitCode == nil:
		return deny(b, "verify_argv did not exit normally")
	case *exited.ExitCode != 0:
		return deny(b, fmt.Sprintf("verify_argv exited %d", *exited.ExitCode))
	}
	b.Reason = "verify_argv passed"
	return store.VerdictAllow, nil
}

// shadowed is the first path the staged change touches that the layer
// shadows, "" when none does.
func (r *Runner) shadowed(ctx context.Context, dir, base string, s *workspace.Shadow) (string, error) {
	if s == nil {
		return "", errors.New("verify: a layer without its shadow")
	}
	out, err := r.git(ctx, dir, nil, "diff", "--cached", "--name-only", "--no-renames", "-z", base)
	if err != nil {
		return "", err
	}
	for p := range strings.SplitSeq(out, "\x00") {
		if p != "" && s.Hides(p) {
			return p, nil
		}
	}
	return "", nil
}

// wait returns the worker's exit, or reports that timeout (or ctx) ended
// the wait first.
func wait(ctx context.Context, r *domain.Running, timeout time.Duration) (*protocol.Exited, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-r.Events():
			if !ok {
				x, _ := r.Wait()
				return x, false
			}
			if ev.Exited != nil {
				return ev.Exited, false
			}
		case <-t.C:
			return nil, true
		case <-ctx.Done():
			return nil, true
		}
	}
}

// destroy kills the one-shot domain (it may already be gone) and proves
// it: an inspect afterwards must find nothing.
func (r *Runner) destroy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := r.Domains.Destroy(ctx, id); err != nil {
		return fmt.Errorf("verify: destroy %s: %w", id, err)
	}
	st, err := r.Domains.Inspect(ctx, id)
	if err != nil {
		return fmt.Errorf("verify: inspect %s: %w", id, err)
	}
	if st.Exists || st.Populated || st.Processes != 0 {
		return fmt.Errorf("verify: domain %s still exists after destroy", id)
	}
	return nil
}

// git runs git in the clone with every configurable execution path off and
// an environment of our own; stderr is dropped because it can quote the
// patch.
func (r *Runner) git(ctx context.Context, dir string, stdin []byte, args ...string) (string, error) {
	bin := r.Git
	if bin == "" {
		bin = "git"
	}
	argv := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
		"-c", "core.pager=cat", "-c", "diff.external=", "-c", "protocol.allow=never", "-c", "safe.directory=*",
		"-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0", "GIT_ATTR_NOSYSTEM=1", "GIT_NO_REPLACE_OBJECTS=1"}
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("verify: git %s: %w", args[0], err)
	}
	return out.String(), nil
}

// rawAttributes, as the clone's info/attributes (which outranks every
// .gitattributes in the tree, the worker's own included), turns off every
// conversion between blob and file: the check runs on the bytes the
// adapter commits.
const rawAttributes = "* -text !eol -ident !filter !working-tree-encoding\n"

// rawCheckout makes the clone's files the base's blobs byte for byte: the
// checkout in workspace.Prepare honoured the base's .gitattributes, so
// every tracked file is written again with conversion off.
func (r *Runner) rawCheckout(ctx context.Context, dir string) error {
	info := filepath.Join(dir, ".git", "info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(info, "attributes"), []byte(rawAttributes), 0o644); err != nil {
		return err
	}
	files, err := r.git(ctx, dir, nil, "ls-files", "-z")
	if err != nil {
		return err
	}
	for p := range strings.SplitSeq(strings.TrimSuffix(files, "\x00"), "\x00") {
		if p != "" {
			if err := os.Remove(filepath.Join(dir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	_, err = r.git(ctx, dir, nil, "checkout-index", "--force", "--all")
	return err
}
