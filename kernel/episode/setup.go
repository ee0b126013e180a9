package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/protocol/pathglob"
	"github.com/autonomic-kernel/autonomic/store"
)

// The setup phase (issue 24 §2). A spec naming Setup has its workspace
// prepared before its worker starts: the setup argv runs in a domain of
// the episode's workspace, on its rootfs, as the worker, under its
// seccomp program, with its egress proxy (the signed allow list, the cap
// and the fetch ledger). What it left in the upper layer is checkpointed:
// that archive is the layer. It is kept under a key — the repository, the
// rootfs name, the argv, the egress grant and the blob ids of the
// lockfiles at the base — in the store's setup_layers (replicated like a
// stable checkpoint, so another host imports it), and in this host's
// launcher store held by layerHolder(key). The next episode of the same
// key starts from it without running the setup, and so fetches nothing.
//
// The episode's pristine base is the layer restored (baseCheckpoint from
// it); generation 1 restores that base. A layer made on a rootfs whose
// digest differs from this host's rootfs of the same name is made again.
// Verification restores the layer beneath the patched clone
// (verifyLayer); a change to a path the layer shadows is denied there.

// DefaultLockfiles are the files that key a setup layer when the target
// names none: those of the repository's root that exist at the base — the
// lockfiles, and the manifests beside them, since what a setup installs
// follows them too (go mod vendor reads go.mod, pip install -e . reads
// pyproject.toml or setup.py, npm ci refuses a package.json its lock does
// not match): a changed manifest makes the layer again, never a stale one.
var DefaultLockfiles = []string{"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "package.json",
	"go.sum", "go.mod", "uv.lock", "poetry.lock", "Pipfile.lock", "Pipfile", "pyproject.toml", "setup.py", "setup.cfg",
	"requirements.txt", "requirements-dev.txt", "requirements-test.txt", "Cargo.lock", "Cargo.toml",
	"Gemfile.lock", "Gemfile", "composer.lock", "composer.json"}

const (
	// SetupTimeout bounds one setup run; the episode's wall time bounds it
	// too.
	SetupTimeout = 20 * time.Minute
	// DefaultMaxSetupLayers is how many layers the database keeps (least
	// recently used evicted first) when Config.MaxSetupLayers is 0.
	DefaultMaxSetupLayers = 8
	// maxLayerEntries bounds the layer archive a verification reads.
	maxLayerEntries = 1 << 20
	maxLockfiles    = 64
)

// SetupLayers is where the layers' keys are kept for every kernel of the
// database (the store).
type SetupLayers interface {
	SetupLayer(ctx context.Context, key string) (store.SetupLayer, error)
	RecordSetupLayer(ctx context.Context, l store.SetupLayer, keep int) ([]store.SetupLayer, error)
	EvictedSetupLayers(ctx context.Context, since time.Time) ([]store.EvictedLayer, error)
}

func (s *SetupSpec) validate() error {
	if err := protocol.ValidateArgv(s.Argv); err != nil {
		return protocol.Errorf(protocol.CodeInvalidField, "setup.argv: %v", err)
	}
	if len(s.Lockfiles) > maxLockfiles {
		return protocol.Errorf(protocol.CodeInvalidField, "setup.lockfiles: more than %d", maxLockfiles)
	}
	for _, p := range s.Lockfiles {
		if !pathglob.ValidPath(p) {
			return protocol.Errorf(protocol.CodeInvalidField, "setup.lockfiles: %q is not a clean path in the repository", p)
		}
	}
	return nil
}

// layerHolder is the launcher domain that makes a key's layer, and the
// holder that keeps its archive in this host's store.
func layerHolder(key string) string { return "layer-" + key[:40] }

// layerInputs are what a layer's key hashes.
type layerInputs struct {
	Repo      string            `json:"repo"`
	Rootfs    string            `json:"rootfs"`
	Argv      []string          `json:"argv"`
	Egress    *policy.Egress    `json:"egress,omitempty"`
	Lockfiles map[string]string `json:"lockfiles"` // path → blob id at the base; absent ones left out
}

// layerKey is the key of the episode's setup layer, with the inputs it
// hashes (recorded beside it for the operator). The lockfiles are read
// from the trusted repository at the base, never from the workspace.
func (e *Episode) layerKey(ctx context.Context) (string, json.RawMessage, error) {
	files := e.spec.Setup.Lockfiles
	if len(files) == 0 {
		files = DefaultLockfiles
	}
	ids, err := workspace.BlobIDs(ctx, e.k.cfg.Git, e.spec.Repo, e.spec.BaseOID, files)
	if err != nil {
		return "", nil, fmt.Errorf("episode: setup lockfiles: %w", err)
	}
	raw, err := json.Marshal(layerInputs{Repo: e.spec.Repo, Rootfs: e.spec.Rootfs, Argv: e.spec.Setup.Argv, Egress: e.pol.Egress, Lockfiles: ids})
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), raw, nil
}

// layers is the controller's state of the setup layers: one maker per
// key at a time, the keys whose archive this kernel knows its holder
// holds, and the shadows verifications read.
type layers struct {
	mu      sync.Mutex
	making  map[string]*sync.Mutex
	held    map[string]string // key → digest (hex)
	shadows map[string]*workspace.Shadow

	sweeping sync.Mutex       // one sweep of the tombstones at a time
	swept    time.Time        // the newest tombstone swept; zero before the first sweep
	kept     []heldCheckpoint // evicted, but an episode here still verifies on it
}

func (l *layers) lock(key string) func() {
	l.mu.Lock()
	if l.making == nil {
		l.making = map[string]*sync.Mutex{}
	}
	m := l.making[key]
	if m == nil {
		m = &sync.Mutex{}
		l.making[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (l *layers) hold(key, digest string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[string]string{}
	}
	l.held[key] = digest
}

func (l *layers) holds(key, digest string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[key] == digest
}

// sweepEvicted lets this host's holds on the layers any kernel evicted go:
// the store's tombstones since the last sweep (with a margin for
// transactions that committed out of order), or every kept one at this
// kernel process's first sweep, since it cannot know which layers its
// predecessor on this host imported. Releasing an archive this host never
// held changes nothing; one it holds under that key and digest is deleted
// from its launcher store once no other holder keeps it, and is imported
// again if the layer is ever recorded again. A layer an episode here still
// verifies on is kept, and let go at a sweep after that episode.
func (e *Episode) sweepEvicted(ctx context.Context) {
	l := &e.k.layers
	l.sweeping.Lock()
	defer l.sweeping.Unlock()
	l.mu.Lock()
	since := l.swept
	l.mu.Unlock()
	if !since.IsZero() {
		since = since.Add(-sweepMargin)
	}
	inUse := e.k.layersInUse()
	for {
		gone, err := e.k.cfg.Layers.EvictedSetupLayers(ctx, since)
		if err != nil {
			e.log.Warn("evicted setup layers not read; their holds stay until the next sweep", "error", err)
			return
		}
		var release []heldCheckpoint
		l.mu.Lock()
		for _, g := range gone {
			digest := strings.TrimPrefix(g.Digest, "sha256:")
			c := heldCheckpoint{layerHolder(g.Key), digest}
			if g.At.After(l.swept) {
				l.swept = g.At
			}
			if inUse[digest] {
				// Once: the margin reads a tombstone again.
				if !slices.Contains(l.kept, c) {
					l.kept = append(l.kept, c)
				}
				continue
			}
			if l.held[g.Key] == digest {
				delete(l.held, g.Key)
			}
			release = append(release, c)
		}
		// Those kept for an episode before, unless one still uses them.
		kept := l.kept[:0]
		for _, c := range l.kept {
			switch {
			case inUse[c.digest]:
				kept = append(kept, c)
			case !slices.Contains(release, c):
				release = append(release, c)
			}
		}
		l.kept = kept
		l.mu.Unlock()
		e.release(release)
		if len(gone) < store.EvictedPage {
			return
		}
		since = gone[len(gone)-1].At
	}
}

// sweepMargin is how far before its last tombstone a sweep reads again: a
// tombstone written by a transaction that committed after a later one was
// read. Releases are idempotent.
const sweepMargin = time.Minute

// layersInUse are the setup layers (hex digests) the episodes this
// controller runs restore beneath their verifications.
func (k *Controller) layersInUse() map[string]bool {
	out := map[string]bool{}
	for _, e := range k.driven() {
		e.mu.Lock()
		if e.layer != "" {
			out[e.layer] = true
		}
		e.mu.Unlock()
	}
	return out
}

// errStaleLayer: the layer was made on another rootfs than this host's.
var errStaleLayer = errors.New("the setup layer was made on another rootfs")

// setupBase makes the episode's pristine base from its setup layer,
// making the layer first when its key has none here, and returns the
// base's digest (hex) for generation 1 to restore.
func (e *Episode) setupBase(ctx context.Context) (string, error) {
	if e.k.cfg.Layers == nil {
		return "", protocol.Errorf(protocol.CodeInvalidField, "setup: this kernel keeps no setup layers")
	}
	key, inputs, err := e.layerKey(ctx)
	if err != nil {
		return "", err
	}
	// What other kernels evicted goes from this host's store first: the
	// store holds only what some layer row still names, plus this key's.
	e.sweepEvicted(ctx)
	unlock := e.k.layers.lock(key)
	defer unlock()
	began := time.Now()
	if layer, rootfs, ok := e.cachedLayer(ctx, key); ok {
		base, _, err := e.baseCheckpoint(ctx, layer, rootfs)
		if err == nil {
			e.setLayer(layer)
			e.log.Info("setup layer reused", "repo", e.spec.Repo, "key", key, "layer", layer, "ms", time.Since(began).Milliseconds())
			return base, nil
		}
		e.log.Warn("setup layer not usable; setting up again", "key", key, "layer", layer, "error", err)
	}
	began = time.Now()
	layer, err := e.makeLayer(ctx, key, inputs)
	if err != nil {
		return "", err
	}
	e.log.Info("setup layer made", "repo", e.spec.Repo, "key", key, "layer", layer, "ms", time.Since(began).Milliseconds())
	base, _, err := e.baseCheckpoint(ctx, layer, "")
	if err != nil {
		return "", err
	}
	e.setLayer(layer)
	return base, nil
}

func (e *Episode) setLayer(digest string) {
	e.mu.Lock()
	e.layer = digest
	e.mu.Unlock()
}

// cachedLayer is the layer the store keeps for key, in this host's
// launcher store (imported from its replica when this kernel does not
// know its holder holds it), with the rootfs digest it was made on.
func (e *Episode) cachedLayer(ctx context.Context, key string) (digest, rootfs string, ok bool) {
	l, err := e.k.cfg.Layers.SetupLayer(ctx, key)
	if err != nil {
		if !errors.Is(err, protocol.E(protocol.CodeNotFound)) {
			e.log.Warn("setup layer lookup failed; setting up again", "key", key, "error", err)
		}
		return "", "", false
	}
	digest = strings.TrimPrefix(l.Digest, "sha256:")
	if !e.k.layers.holds(key, digest) {
		if err := e.k.importReplica(ctx, layerHolder(key), digest); err != nil {
			e.log.Warn("setup layer not imported; setting up again", "key", key, "layer", digest, "error", err)
			return "", "", false
		}
		e.k.layers.hold(key, digest)
	}
	return digest, l.RootfsDigest, true
}

// makeLayer runs the setup command and keeps what it left as key's layer:
// in this host's store (held by layerHolder(key)), replicated, and
// recorded; the least recently used layers beyond the bound go.
func (e *Episode) makeLayer(ctx context.Context, key string, inputs json.RawMessage) (string, error) {
	holder := layerHolder(key)
	// A kernel lost while it made this layer left its domain.
	if err := e.destroy(ctx, holder); err != nil {
		return "", err
	}
	prog, _ := e.k.seccompFor(e.spec.Seccomp) // checked at start (mint)
	_, egressID := e.socketIDs()
	argv := e.spec.Setup.Argv
	if egressID != "" {
		argv = agent.WithEgressCA(agent.WrapEgress(argv), e.caPEM())
	}
	r, err := e.k.cfg.Domains.Create(ctx, domain.Spec{ID: holder, Generation: 1, WorkspaceID: e.id.String(), EgressSocket: egressID,
		Rootfs: e.spec.Rootfs, Argv: argv, Env: e.spec.Env, Cwd: "/workspace", Limits: e.spec.Limits, Seccomp: prog})
	if err != nil {
		return "", fmt.Errorf("episode: setup domain: %w", err)
	}
	defer func() {
		r.Close()
		_ = e.destroy(context.WithoutCancel(ctx), holder)
	}()
	rootfs := r.Started.RootfsDigest
	x, err := waitExited(ctx, r, SetupTimeout)
	if err != nil {
		return "", fmt.Errorf("episode: setup: %w", err)
	}
	if x.ExitCode == nil || *x.ExitCode != 0 {
		return "", fmt.Errorf("episode: setup %s %s: %s", strings.Join(e.spec.Setup.Argv, " "), exitText(x), outputTail(r.Output(), 600))
	}
	res, err := e.k.cfg.Domains.Checkpoint(ctx, holder)
	if err != nil {
		return "", fmt.Errorf("episode: setup layer: %w", err)
	}
	// Replicated before it is recorded, as a stable checkpoint is.
	e.replicate(ctx, res.SHA256)
	target := e.spec.Repo
	if e.spec.Harvest != nil {
		target = e.spec.Harvest.TargetID
	}
	keep := e.k.cfg.MaxSetupLayers
	if keep <= 0 {
		keep = DefaultMaxSetupLayers
	}
	gone, err := e.k.cfg.Layers.RecordSetupLayer(ctx, store.SetupLayer{Key: key, Digest: "sha256:" + res.SHA256, RootfsDigest: rootfs,
		Target: target, Inputs: inputs, Bytes: res.Bytes}, keep)
	if err != nil {
		return "", fmt.Errorf("episode: record the setup layer: %w", err)
	}
	e.k.layers.hold(key, res.SHA256)
	// What the record evicted left its tombstones: let this host's holds
	// go as every other kernel's sweep will (an episode here still
	// verifying on one keeps it until later).
	if len(gone) > 0 {
		e.sweepEvicted(ctx)
	}
	return res.SHA256, nil
}

// verifyLayer is what a verification of this episode's effects restores
// beneath its tests: the episode's setup layer (nil without setup). An
// episode resumed here finds its layer by its key; a layer evicted
// meanwhile is an error, so the change is never verified without it.
func (e *Episode) verifyLayer(ctx context.Context) (*verify.Layer, error) {
	if e.spec.Setup == nil {
		return nil, nil
	}
	e.mu.Lock()
	digest := e.layer
	e.mu.Unlock()
	if digest == "" {
		key, _, err := e.layerKey(ctx)
		if err != nil {
			return nil, err
		}
		unlock := e.k.layers.lock(key)
		d, _, ok := e.cachedLayer(ctx, key)
		unlock()
		if !ok {
			return nil, errors.New("episode: the setup layer of this episode is gone from the store; its change is not verified without it")
		}
		e.setLayer(d)
		digest = d
	}
	s, err := e.k.shadow(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("episode: setup layer: %w", err)
	}
	return &verify.Layer{Checkpoint: digest, Rootfs: e.spec.Rootfs, Shadow: s}, nil
}

// shadow reads (once per digest) what a layer hides.
func (k *Controller) shadow(ctx context.Context, digest string) (*workspace.Shadow, error) {
	k.layers.mu.Lock()
	s := k.layers.shadows[digest]
	k.layers.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if k.cfg.Archives == nil {
		return nil, errors.New("no archives to read the layer from")
	}
	rc, err := k.cfg.Archives.OpenArchive(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if s, err = workspace.ReadShadow(rc, digest, maxLayerEntries); err != nil {
		return nil, err
	}
	k.layers.mu.Lock()
	defer k.layers.mu.Unlock()
	if k.layers.shadows == nil || len(k.layers.shadows) >= 4*DefaultMaxSetupLayers {
		k.layers.shadows = map[string]*workspace.Shadow{}
	}
	k.layers.shadows[digest] = s
	return s, nil
}

// waitExited waits for a domain's worker to exit and returns how; a
// violation is an error.
func waitExited(ctx context.Context, r *domain.Running, limit time.Duration) (*protocol.Exited, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("its process did not exit within %v", limit)
		case ev, ok := <-r.Events():
			switch {
			case !ok:
				return nil, errors.New("its monitor ended before its process exited")
			case ev.Violation != nil:
				return nil, fmt.Errorf("violation: %s", ev.Violation.Syscall)
			case ev.Exited != nil:
				return ev.Exited, nil
			}
		}
	}
}

func exitText(x *protocol.Exited) string {
	if x.ExitCode != nil {
		return fmt.Sprintf("exited %d", *x.ExitCode)
	}
	return "was killed by " + x.Signal
}

// outputTail is the end of a domain's output, printable, for a reason.
func outputTail(out []byte, n int) string {
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= ' ' && r != 0x7f) {
			return r
		}
		return '?'
	}, strings.ToValidUTF8(string(out), "?"))
}
