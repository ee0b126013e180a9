package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/protocol/gitref"
	"github.com/autonomic-kernel/autonomic/protocol/pathglob"
	"github.com/hashicorp/go-hclog"
)

// GitTarget is one authoritative repository.
type GitTarget struct {
	Repo        string   // the repository's git dir (bare or .git)
	AllowedRefs []string // exact ref names the worker may update
	// AllowedRefPrefixes: a ref under one of these ("refs/heads/agent/")
	// may also be updated, or created at its base by a request that says
	// create — one branch per run, so runs never share a ref.
	AllowedRefPrefixes []string
	AllowedPaths       []string // globs; a touched path must match one
	ForbiddenPaths     []string // globs; a touched path must match none
	AuthorName         string
	AuthorEmail        string
	Class              int // 0: 3
	// AllowBinary admits GIT binary patches (still under the result cap).
	AllowBinary bool
	// AllowSymlinks admits symlinks whose text stays inside the
	// repository (pathglob.LinkInside); submodules never.
	AllowSymlinks bool
	// AllowNonPortable admits names Windows cannot check out (CON, a:b,
	// a trailing dot or space); paths that differ only in case or Unicode
	// normalisation are refused whatever it says.
	AllowNonPortable bool
}

// GitCommit applies an exact patch on an exact base OID and moves a ref by
// compare-and-swap (class 3). See the package documentation for why it uses
// a temporary index rather than a worktree.
type GitCommit struct {
	Targets map[string]GitTarget
	// Git is the git binary (default "git", resolved in a fixed PATH).
	Git string
	// BeforeUpdateRef is a fault-injection point for tests: it runs after
	// the commit object exists and before the ref moves.
	BeforeUpdateRef func()
	// Limits bound every git this adapter runs.
	Limits GitLimits
	// Log receives git's stderr when a git fails (errors keep only the
	// verb); nil drops it.
	Log hclog.Logger

	mu sync.RWMutex // Targets, once AddTarget may run beside requests
}

// AddTarget registers a target while the adapter serves (autonomic repo
// add); an id already present is refused.
func (g *GitCommit) AddTarget(id string, t GitTarget) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.Targets[id]; ok {
		return protocol.Errorf(protocol.CodeInvalidField, "git_commit target %q exists", id)
	}
	if g.Targets == nil {
		g.Targets = map[string]GitTarget{}
	}
	g.Targets[id] = t
	return nil
}

func (g *GitCommit) target(id string) (GitTarget, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	t, ok := g.Targets[id]
	return t, ok
}

type gitCommitRequest struct {
	BaseOID string `json:"base_oid"`
	Ref     string `json:"ref"`
	Message string `json:"message"`
	// Create: the ref must not exist yet; the commit on the base creates
	// it (compare-and-swap against absence).
	Create bool `json:"create,omitempty"`
}

// refAllowed: an exact allowed ref, or a well-formed branch under an
// allowed prefix (gitref).
func (t GitTarget) refAllowed(ref string) bool {
	return slices.Contains(t.AllowedRefs, ref) || gitref.Under(ref, t.AllowedRefPrefixes)
}

var oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// TrailerKey marks a commit made for an effect; reconciliation searches
// for it.
const TrailerKey = "Autonomic-Effect"

// Kind implements Adapter.
func (*GitCommit) Kind() string { return "git_commit" }

// Class implements Adapter.
func (g *GitCommit) Class(target string) (int, error) {
	t, ok := g.target(target)
	if !ok {
		return 0, protocol.Errorf(protocol.CodeForbidden, "unknown git target")
	}
	if t.Class == 0 {
		return 3, nil
	}
	return t.Class, nil
}

func (g *GitCommit) parse(r Request) (GitTarget, gitCommitRequest, error) {
	t, req, err := g.parseTarget(r)
	if err == nil && len(r.Payload) == 0 {
		err = protocol.Errorf(protocol.CodeInvalidField, "empty patch")
	}
	return t, req, err
}

// parseTarget checks the effect's target alone: Reconcile reads the
// repository, never the patch (a taker on another host has none).
func (g *GitCommit) parseTarget(r Request) (GitTarget, gitCommitRequest, error) {
	var req gitCommitRequest
	t, ok := g.target(r.TargetID)
	if !ok {
		return t, req, protocol.Errorf(protocol.CodeForbidden, "unknown git target")
	}
	if err := protocol.DecodeStrict(r.Target, &req); err != nil {
		return t, req, err
	}
	switch {
	case !oidPattern.MatchString(req.BaseOID):
		return t, req, protocol.Errorf(protocol.CodeInvalidField, "target.base_oid")
	case !t.refAllowed(req.Ref):
		return t, req, protocol.Errorf(protocol.CodeForbidden, "ref not allowed")
	case messageRefusal(req.Message) != "":
		return t, req, protocol.Errorf(protocol.CodeInvalidField, "target.message")
	}
	return t, req, nil
}

// git runs git on the repository with every configurable execution path
// disabled (see gitRun) and the target's limits.
func (g *GitCommit) git(ctx context.Context, t GitTarget, index string, stdin []byte, args ...string) ([]byte, error) {
	return gitRun{bin: g.Git, repo: t.Repo, index: index, stdin: stdin, limits: g.Limits, log: g.Log}.run(ctx, args...)
}

// checkRepoConfig refuses a repository whose own configuration could pull
// in other configuration or rewrite objects: includes are read even with
// global and system configuration off.
func (g *GitCommit) checkRepoConfig(ctx context.Context, t GitTarget) error {
	out, err := g.git(ctx, t, "", nil, "config", "--local", "--name-only", "--list")
	if err != nil {
		return protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	for k := range strings.SplitSeq(strings.ToLower(string(out)), "\n") {
		if strings.HasPrefix(k, "include.") || strings.HasPrefix(k, "includeif.") || strings.HasPrefix(k, "core.alternaterefscommand") {
			return protocol.Errorf(protocol.CodeForbidden, "repository configuration has %s", k)
		}
	}
	return nil
}

// checkNotCheckedOut refuses a ref that is some work tree's checked-out
// branch (the repository's own, in a non-bare repository, or a linked
// worktree's): moving it under a work tree leaves that index and tree at
// the old commit, so the user's next `git commit -a` silently reverts
// the change that landed.
func (g *GitCommit) checkNotCheckedOut(ctx context.Context, t GitTarget, ref string) error {
	out, err := g.git(ctx, t, "", nil, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	for f := range strings.SplitSeq(string(out), "\x00") {
		if b, ok := strings.CutPrefix(f, "branch "); ok && b == ref {
			return protocol.Errorf(protocol.CodeForbidden, "the ref is a work tree's checked-out branch; land on another branch, or make the target bare")
		}
	}
	return nil
}

// build applies the patch on the base in a temporary index and returns the
// new tree, after checking every changed path of the result. What the
// patch adds is measured from the patch itself before git runs (scanPatch):
// over the cap, or binary where the target does not allow it, is refused
// with nothing written. git then writes its objects into a quarantine q,
// never into the repository; the caller removes q, or migrates it at
// commit. maxBytes, when positive, lowers the cap (the lease's
// bytes_per_effect).
func (g *GitCommit) build(ctx context.Context, t GitTarget, req gitCommitRequest, patch []byte, maxBytes int64) (tree, q string, err error) {
	lim := g.Limits.withDefaults()
	scan, err := scanPatch(patch)
	if err != nil {
		return "", "", err
	}
	limit := lim.MaxResultBytes
	if maxBytes > 0 {
		limit = min(limit, maxBytes)
	}
	switch {
	case scan.Binary && !t.AllowBinary:
		return "", "", protocol.Errorf(protocol.CodeForbidden, "binary patches are not allowed on this target")
	case scan.ResultBytes > limit || scan.LargestHunk > limit:
		return "", "", protocol.Errorf(protocol.CodeLimitExceeded, "patch adds %d bytes, over the cap of %d", max(scan.ResultBytes, scan.LargestHunk), limit)
	}
	if err := diskReserve(t.Repo, 2*scan.ResultBytes+int64(len(patch)), lim.DiskReserveBytes); err != nil {
		return "", "", err
	}
	if err := g.checkRepoConfig(ctx, t); err != nil {
		return "", "", err
	}
	if err := g.checkNotCheckedOut(ctx, t, req.Ref); err != nil {
		return "", "", err
	}
	if q, err = newQuarantine(t.Repo); err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(q)
			q = ""
		}
	}()
	run := gitRun{bin: g.Git, repo: t.Repo, index: filepath.Join(q, "index"), quarantine: q, limits: g.Limits, log: g.Log}
	if _, err := run.run(ctx, "read-tree", req.BaseOID+"^{commit}"); err != nil {
		return "", q, protocol.Errorf(protocol.CodeEffectFailed, "base: %w", err)
	}
	run.stdin = patch
	if _, err := run.run(ctx, "apply", "--cached", "--whitespace=nowarn", "-"); err != nil {
		return "", q, applyFailed(err)
	}
	run.stdin = nil
	out, err := run.run(ctx, "write-tree")
	if err != nil {
		return "", q, err
	}
	treeOID := strings.TrimSpace(string(out))
	run.index = ""
	raw, err := run.run(ctx, "diff-tree", "-r", "-z", "--no-renames", "--raw", req.BaseOID+"^{tree}", treeOID)
	if err != nil {
		return "", q, err
	}
	// Records are ":<old mode> <new mode> <old oid> <new oid> <status>\0<path>\0".
	fields := bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0})
	if len(raw) == 0 {
		return "", q, protocol.Errorf(protocol.CodeEffectFailed, "patch changes nothing")
	}
	listed, err := run.run(ctx, "ls-tree", "-r", "-z", "--name-only", "--full-tree", treeOID)
	if err != nil {
		return "", q, err
	}
	var all []string
	for _, p := range bytes.Split(bytes.TrimSuffix(listed, []byte{0}), []byte{0}) {
		all = append(all, string(p))
	}
	folded := newCollisions(all)
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(string(fields[i]))
		p := string(fields[i+1])
		if len(meta) < 5 {
			return "", q, fmt.Errorf("diff-tree record %q", fields[i])
		}
		for _, mode := range meta[:2] {
			// Submodules are refused outright, and symlinks unless the
			// target allows them: their targets escape any path glob.
			m := strings.TrimPrefix(mode, ":")
			if m == "160000" || (m == "120000" && !t.AllowSymlinks) {
				return "", q, protocol.Errorf(protocol.CodeForbidden, "patch touches a symlink or submodule")
			}
		}
		if meta[1] == "120000" {
			// An allowed symlink must stay inside the repository, however
			// a checkout resolves it: its text is read from the new tree.
			text, err := run.run(ctx, "cat-file", "blob", meta[3])
			if err != nil {
				return "", q, err
			}
			if !pathglob.LinkInside(p, string(text)) || !visibleName(string(text)) {
				return "", q, protocol.Errorf(protocol.CodeForbidden, "patch adds a symlink that leaves the repository or reaches its metadata")
			}
		}
		if !visibleName(p) {
			return "", q, protocol.Errorf(protocol.CodeForbidden, "patch touches a path with control or invisible characters")
		}
		if !pathAllowed(p, t.AllowedPaths, t.ForbiddenPaths) {
			return "", q, protocol.Errorf(protocol.CodeForbidden, "patch touches a path outside the allowed set")
		}
		if meta[4] == "D" {
			continue // a deletion adds no name
		}
		if a, b := folded.clash(p); a != "" {
			g.logRefusal("case or normalisation collision", a, b)
			return "", q, protocol.Errorf(protocol.CodeForbidden, "patch makes two paths that differ only in case or Unicode normalisation")
		}
		if !t.AllowNonPortable && !portableName(p) {
			g.logRefusal("name Windows cannot check out", p, "")
			return "", q, protocol.Errorf(protocol.CodeForbidden, "patch adds a name Windows cannot check out (reserved device name, <>:\"|?*, or a trailing dot or space)")
		}
	}
	return treeOID, q, nil
}

// logRefusal tells the operator's log which paths a refusal is about; the
// worker's reason stays terse (its paths are its own, and may be hostile
// bytes the log escapes).
func (g *GitCommit) logRefusal(why, a, b string) {
	if g.Log != nil {
		g.Log.Info("git_commit refused", "why", why, "path", a, "other", b)
	}
}

// Validate implements Adapter: the patch must apply on the base and touch
// only allowed paths. It writes nothing to the repository: its objects
// stay in a quarantine that is removed here.
func (g *GitCommit) Validate(ctx context.Context, r Request) error {
	t, req, err := g.parse(r)
	if err != nil {
		return err
	}
	_, q, err := g.build(ctx, t, req, r.Payload, r.MaxBytes)
	if q != "" {
		_ = os.RemoveAll(q)
	}
	return err
}

func (g *GitCommit) refOID(ctx context.Context, t GitTarget, ref string) (string, error) {
	out, err := g.git(ctx, t, "", nil, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return "", protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// refHolds is the ref's commit, or "" when the ref does not exist (as a
// branch to be created may not).
func (g *GitCommit) refHolds(ctx context.Context, t GitTarget, ref string) (string, error) {
	out, err := g.git(ctx, t, "", nil, "for-each-ref", "--format=%(objectname)", "--count=1", ref)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	oid := strings.TrimSpace(string(out))
	if oid == "" {
		return "", nil
	}
	// for-each-ref matches by prefix too: the ref itself must be there.
	return g.refOID(ctx, t, ref)
}

// expected is what the ref must hold for the request to land: its base,
// or nothing at all for a ref the request creates.
func (req gitCommitRequest) expected() string {
	if req.Create {
		return ""
	}
	return req.BaseOID
}

// Precondition implements Adapter: the ref still points at the base.
func (g *GitCommit) Precondition(ctx context.Context, r Request) error {
	t, req, err := g.parse(r)
	if err != nil {
		return err
	}
	if err := g.checkNotCheckedOut(ctx, t, req.Ref); err != nil {
		return err
	}
	cur, err := g.refHolds(ctx, t, req.Ref)
	if err != nil {
		return err
	}
	if cur != req.expected() {
		return protocol.Errorf(protocol.CodeRefMoved, "ref moved")
	}
	return nil
}

// Commit implements Adapter.
func (g *GitCommit) Commit(ctx context.Context, r Request) Result {
	t, req, err := g.parse(r)
	if err != nil {
		return notCommitted(err, nil)
	}
	tree, q, err := g.build(ctx, t, req, r.Payload, r.MaxBytes)
	if q != "" {
		defer os.RemoveAll(q)
	}
	if err != nil {
		return notCommitted(err, nil)
	}
	msg := strings.TrimRight(req.Message, "\n") + "\n\n" + TrailerKey + ": " + r.EffectID.String() + "\n"
	name, email := t.AuthorName, t.AuthorEmail
	if name == "" {
		name, email = "Autonomic", "autonomic@localhost"
	}
	env := []string{"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email, "GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email}
	out, err := gitRun{bin: g.Git, repo: t.Repo, stdin: []byte(msg), env: env, quarantine: q, limits: g.Limits, log: g.Log}.run(ctx,
		"commit-tree", tree, "-p", req.BaseOID, "-F", "-")
	if err != nil {
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "%w", err), nil)
	}
	// Only now do the new objects enter the repository, before the ref
	// that makes them reachable moves.
	if err := migrateQuarantine(q, t.Repo); err != nil {
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "moving objects in: %w", err), nil)
	}
	oid := strings.TrimSpace(string(out))
	if g.BeforeUpdateRef != nil {
		g.BeforeUpdateRef()
	}
	// Compare-and-swap: git takes the ref's lock and moves it only if it
	// still holds the base.
	// For a ref the request creates, the old value "" is git's "must not
	// exist".
	if _, err := g.git(ctx, t, "", nil, "update-ref", "-m", "autonomic effect "+r.EffectID.String(), req.Ref, oid, req.expected()); err != nil {
		// The swap failed: someone else moved the ref inside our commit
		// window (another run on the same ref, say). The commit is ours
		// and brand new: if the ref does not reach it, nothing can have
		// — it is provably not committed, and the ref moved. A git that
		// was cut off (ctx) may have swapped before it died: then only
		// what the ref holds can say (Reconcile).
		if ctx.Err() == nil {
			if cur, rerr := g.refHolds(ctx, t, req.Ref); rerr == nil && cur != oid && cur != "" {
				if _, aerr := g.git(ctx, t, "", nil, "merge-base", "--is-ancestor", oid, cur); aerr != nil && ctx.Err() == nil {
					return notCommitted(protocol.Errorf(protocol.CodeRefMoved, "the ref moved while the commit was made"),
						map[string]any{"ref": req.Ref, "ref_oid": cur, "base_oid": req.BaseOID})
				}
			}
		}
		return g.Reconcile(ctx, r)
	}
	return committed(map[string]any{"ref": req.Ref, "oid": oid, "base_oid": req.BaseOID})
}

// Reconcile implements Adapter: the ref's history since the base is
// searched for this effect's trailer. Found: committed. The ref still at
// the base: not committed. Anything else is someone else's movement, and
// ambiguous.
func (g *GitCommit) Reconcile(ctx context.Context, r Request) Result {
	t, req, err := g.parseTarget(r)
	if err != nil {
		return unknown(err, nil)
	}
	cur, err := g.refHolds(ctx, t, req.Ref)
	if err != nil {
		return unknown(err, nil)
	}
	switch {
	case cur == "" && req.Create:
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "ref not created"), map[string]any{"ref": req.Ref})
	case cur == "":
		return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "the ref was deleted"), map[string]any{"ref": req.Ref, "ambiguous": true})
	}
	if cur == req.BaseOID {
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "ref still at base"), map[string]any{"ref": req.Ref, "oid": cur})
	}
	out, err := g.git(ctx, t, "", nil, "log", "--max-count=10000", "--format=%H %(trailers:key="+TrailerKey+",valueonly,separator=%x2C)",
		req.BaseOID+".."+cur)
	if err != nil {
		return unknown(err, nil)
	}
	want := r.EffectID.String()
	for line := range strings.SplitSeq(string(out), "\n") {
		oid, trailers, _ := strings.Cut(line, " ")
		if slices.Contains(strings.Split(trailers, ","), want) {
			return committed(map[string]any{"ref": req.Ref, "oid": oid, "base_oid": req.BaseOID, "ref_oid": cur})
		}
	}
	return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "ref moved by someone else"),
		map[string]any{"ref": req.Ref, "ambiguous": true, "ref_oid": cur, "base_oid": req.BaseOID})
}

// visibleName reports whether every character of a path is valid UTF-8 and
// visible: no control characters (a newline splits a name in every
// line-oriented tool) and no format or other invisible code points (a
// zero-width joiner makes ".g\u200cit/hooks" look like ".git/hooks" and
// escape any glob that names it).
func visibleName(p string) bool {
	if !utf8.ValidString(p) {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Co, r) || unicode.Is(unicode.Cs, r) ||
			r == utf8.RuneError || (r != ' ' && unicode.IsSpace(r)) || unicode.Is(unicode.Variation_Selector, r) ||
			r == '\u115f' || r == '\u1160' || r == '\u3164' || r == '\uffa0' {
			return false
		}
	}
	return true
}
