package broker

import (
	"context"
	"slices"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/hashicorp/go-hclog"
)

// GitRemoteTarget is one allowlisted remote.
type GitRemoteTarget struct {
	Repo        string   // local authoritative git dir the objects come from
	URL         string   // the remote; never named by the worker
	AllowedRefs []string // exact remote refs the worker may update
	// SourceRefs are the authoritative repository's refs a pushed commit
	// must be reachable from (default: the local ref of the same name as
	// the remote ref pushed) — refs only the episodes' git_commit effects
	// (or an operator) move, so an orphan or a commit of a private branch
	// is never published.
	SourceRefs []string
	// RewindRefs are the remote refs a push may move backwards or
	// sideways (with --force-with-lease on the expected OID). Any other
	// push is a fast-forward or is refused.
	RewindRefs []string
	// Credential, by reference, is given to git through a credential
	// helper of the broker's, in the git child's environment only: never
	// in a URL, an argument, a domain or a log.
	Credential *Credential
	// Username goes with Credential (default "x-access-token").
	Username string
	// CAFile holds the PEM roots https is verified against (default: the
	// system's).
	CAFile string
	Class  int // 0: 3
}

// GitRemote pushes one commit of the authoritative repository to an
// allowlisted remote ref (class 3): a fast-forward from the remote OID the
// worker expects, of a commit reachable from the target's source refs;
// rewinding only where the target grants it, and then with
// --force-with-lease on the expected OID. Reconciliation reads the remote
// ref: our OID is committed, the expected OID is not committed, anything
// else is ambiguous.
type GitRemote struct {
	Targets map[string]GitRemoteTarget
	Git     string
	// Log receives git's stderr when a git fails (errors keep only the
	// verb); nil drops it.
	Log hclog.Logger
}

type gitRemoteRequest struct {
	Ref         string `json:"ref"`
	OID         string `json:"oid"`
	ExpectedOID string `json:"expected_remote_oid"`
}

var zeroOID = strings.Repeat("0", 40)

// Kind implements Adapter.
func (*GitRemote) Kind() string { return "git_remote" }

// Class implements Adapter.
func (g *GitRemote) Class(target string) (int, error) {
	t, ok := g.Targets[target]
	if !ok {
		return 0, protocol.Errorf(protocol.CodeForbidden, "unknown remote target")
	}
	if t.Class == 0 {
		return 3, nil
	}
	return t.Class, nil
}

func (g *GitRemote) parse(r Request) (GitRemoteTarget, gitRemoteRequest, error) {
	var req gitRemoteRequest
	t, ok := g.Targets[r.TargetID]
	if !ok {
		return t, req, protocol.Errorf(protocol.CodeForbidden, "unknown remote target")
	}
	if err := protocol.DecodeStrict(r.Target, &req); err != nil {
		return t, req, err
	}
	switch {
	case !slices.Contains(t.AllowedRefs, req.Ref):
		return t, req, protocol.Errorf(protocol.CodeForbidden, "ref not allowed")
	case !oidPattern.MatchString(req.OID) || req.OID == zeroOID:
		return t, req, protocol.Errorf(protocol.CodeInvalidField, "target.oid")
	case !oidPattern.MatchString(req.ExpectedOID):
		return t, req, protocol.Errorf(protocol.CodeInvalidField, "target.expected_remote_oid")
	case len(r.Payload) != 0:
		return t, req, protocol.Errorf(protocol.CodeInvalidField, "a push has no payload")
	}
	return t, req, nil
}

// credentialHelper answers git's credential protocol from the git child's
// own environment: the secret is never in an argument or a file.
const credentialHelper = `!f() { test "$1" = get || exit 0; echo "username=$AUTONOMIC_GIT_USERNAME"; echo "password=$AUTONOMIC_GIT_PASSWORD"; }; f`

// git runs git on the authoritative repository; network commands get the
// target's credential and CA.
func (g *GitRemote) git(ctx context.Context, t GitRemoteTarget, args ...string) ([]byte, error) {
	return gitRun{bin: g.Git, repo: t.Repo, log: g.Log}.run(ctx, args...)
}

func (g *GitRemote) remote(ctx context.Context, t GitRemoteTarget, args ...string) ([]byte, error) {
	run := gitRun{bin: g.Git, repo: t.Repo, log: g.Log}
	var pre []string
	if t.CAFile != "" {
		pre = append(pre, "-c", "http.sslCAInfo="+t.CAFile)
	}
	if t.Credential != nil {
		v, err := t.Credential.value()
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeTargetUnavailable, "git_remote credential: %w", err)
		}
		user := t.Username
		if user == "" {
			user = "x-access-token"
		}
		pre = append(pre, "-c", "credential.helper="+credentialHelper, "-c", "credential.useHttpPath=false")
		run.env = []string{"AUTONOMIC_GIT_USERNAME=" + user, "AUTONOMIC_GIT_PASSWORD=" + v}
	}
	return run.run(ctx, append(pre, args...)...)
}

// Validate implements Adapter: the commit exists in the authoritative
// repository and is reachable from one of the target's source refs, and
// the push is a fast-forward of the remote OID the worker expects (that
// commit known here and an ancestor) unless the target grants a rewind of
// this ref.
func (g *GitRemote) Validate(ctx context.Context, r Request) error {
	t, req, err := g.parse(r)
	if err != nil {
		return err
	}
	if _, err := g.git(ctx, t, "cat-file", "-e", req.OID+"^{commit}"); err != nil {
		return protocol.Errorf(protocol.CodeInvalidField, "oid is not a commit of the authoritative repository")
	}
	sources := t.SourceRefs
	if len(sources) == 0 {
		sources = []string{req.Ref}
	}
	reachable := false
	for _, ref := range sources {
		if _, err := g.git(ctx, t, "merge-base", "--is-ancestor", req.OID, ref+"^{commit}"); err == nil {
			reachable = true
			break
		}
	}
	if !reachable {
		return protocol.Errorf(protocol.CodeForbidden, "oid is not reachable from the target's source refs")
	}
	if req.ExpectedOID == zeroOID || slices.Contains(t.RewindRefs, req.Ref) {
		return nil
	}
	if _, err := g.git(ctx, t, "merge-base", "--is-ancestor", req.ExpectedOID, req.OID); err != nil {
		return protocol.Errorf(protocol.CodeForbidden, "not a fast-forward of the expected remote oid")
	}
	return nil
}

// remoteOID reads the remote ref (zeroOID when absent).
func (g *GitRemote) remoteOID(ctx context.Context, t GitRemoteTarget, ref string) (string, error) {
	out, err := g.remote(ctx, t, "ls-remote", "--refs", t.URL, ref)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if oid, name, ok := strings.Cut(line, "\t"); ok && name == ref {
			return oid, nil
		}
	}
	return zeroOID, nil
}

// Precondition implements Adapter: the remote ref is where the worker
// expects it.
func (g *GitRemote) Precondition(ctx context.Context, r Request) error {
	t, req, err := g.parse(r)
	if err != nil {
		return err
	}
	cur, err := g.remoteOID(ctx, t, req.Ref)
	if err != nil {
		return err
	}
	if cur != req.ExpectedOID {
		return protocol.Errorf(protocol.CodeRefMoved, "remote ref moved")
	}
	return nil
}

// Commit implements Adapter.
func (g *GitRemote) Commit(ctx context.Context, r Request) Result {
	t, req, err := g.parse(r)
	if err != nil {
		return notCommitted(err, nil)
	}
	args := []string{"push", "--porcelain", "--no-verify"}
	if slices.Contains(t.RewindRefs, req.Ref) {
		expected := req.ExpectedOID
		if expected == zeroOID {
			expected = "" // --force-with-lease=<ref>: means "must not exist"
		}
		args = append(args, "--force-with-lease="+req.Ref+":"+expected)
	}
	// Without a force option git pushes only a fast-forward: the remote's
	// OID must be known here and an ancestor, or the push is rejected.
	if _, err := g.remote(ctx, t, append(args, t.URL, req.OID+":"+req.Ref)...); err != nil {
		return g.Reconcile(ctx, r)
	}
	return committed(map[string]any{"ref": req.Ref, "oid": req.OID})
}

// Reconcile implements Adapter.
func (g *GitRemote) Reconcile(ctx context.Context, r Request) Result {
	t, req, err := g.parse(r)
	if err != nil {
		return unknown(err, nil)
	}
	cur, err := g.remoteOID(ctx, t, req.Ref)
	if err != nil {
		return unknown(err, nil)
	}
	switch cur {
	case req.OID:
		return committed(map[string]any{"ref": req.Ref, "oid": req.OID})
	case req.ExpectedOID:
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "remote ref unchanged"), map[string]any{"ref": req.Ref, "remote_oid": cur})
	}
	return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "remote ref moved by someone else"),
		map[string]any{"ref": req.Ref, "ambiguous": true, "remote_oid": cur})
}
