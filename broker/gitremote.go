package broker

import (
	"context"
	"slices"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// GitRemoteTarget is one allowlisted remote.
type GitRemoteTarget struct {
	Repo        string   // local authoritative git dir the objects come from
	URL         string   // the remote; never named by the worker
	AllowedRefs []string // exact remote refs the worker may update
	Class       int      // 0: 3
}

// GitRemote pushes one commit of the authoritative repository to an
// allowlisted remote ref with --force-with-lease against the remote OID the
// worker expects (class 3). Reconciliation reads the remote ref: our OID is
// committed, the expected OID is not committed, anything else is ambiguous.
type GitRemote struct {
	Targets map[string]GitRemoteTarget
	Git     string
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

func (g *GitRemote) git(ctx context.Context, t GitRemoteTarget, args ...string) ([]byte, error) {
	return runGit(ctx, g.Git, t.Repo, "", nil, nil, args...)
}

// Validate implements Adapter: the commit exists in the authoritative
// repository.
func (g *GitRemote) Validate(ctx context.Context, r Request) error {
	t, req, err := g.parse(r)
	if err != nil {
		return err
	}
	if _, err := g.git(ctx, t, "cat-file", "-e", req.OID+"^{commit}"); err != nil {
		return protocol.Errorf(protocol.CodeInvalidField, "oid is not a commit of the authoritative repository")
	}
	return nil
}

// remoteOID reads the remote ref (zeroOID when absent).
func (g *GitRemote) remoteOID(ctx context.Context, t GitRemoteTarget, ref string) (string, error) {
	out, err := g.git(ctx, t, "ls-remote", "--refs", t.URL, ref)
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
	expected := req.ExpectedOID
	if expected == zeroOID {
		expected = "" // --force-with-lease=<ref>: means "must not exist"
	}
	if _, err := g.git(ctx, t, "push", "--porcelain", "--no-verify", "--force-with-lease="+req.Ref+":"+expected,
		t.URL, req.OID+":"+req.Ref); err != nil {
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
