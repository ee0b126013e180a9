package broker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestPrepareKernelBounds: a proposal the kernel makes for an episode may
// carry a payload larger than a worker frame (up to MaxPayload), under the
// same fence, quotas and adapter validation; over MaxPayload, or with a
// payload also in the request, it is refused and nothing is stored.
func TestPrepareKernelBounds(t *testing.T) {
	f := newGitFixture(t)
	e := gitEnv(t, f, nil)
	// A patch just over a frame: README rewritten with many lines.
	big := f.patch(func(d string) {
		os.WriteFile(filepath.Join(d, "README"), bytes.Repeat([]byte("line of the readme\n"), (protocol.MaxWorkerPayload/19)+100), 0o644)
	})
	if len(big) <= protocol.MaxWorkerPayload {
		t.Fatalf("the fixture patch is %d bytes, not over a frame", len(big))
	}
	req := prepareReq(e, "git_commit", "repo", gitTarget(f.head()), nil)
	req.Protocol, req.RequestID = protocol.WorkerVersion, "k"
	eff, err := e.broker.PrepareKernel(ctxT(t), e.ep.ID, req, big)
	if err != nil || eff.PayloadDigest != Digest(big) {
		t.Fatalf("a kernel proposal over a frame: %v", err)
	}
	over := bytes.Repeat([]byte("x"), MaxPayload+1)
	if _, err := e.broker.PrepareKernel(ctxT(t), e.ep.ID, req, over); protocol.AsWire(err).Code != protocol.CodeLimitExceeded {
		t.Errorf("over MaxPayload: %v", err)
	}
	withB64 := prepareReq(e, "git_commit", "repo", gitTarget(f.head()), big[:10])
	if _, err := e.broker.PrepareKernel(ctxT(t), e.ep.ID, withB64, big); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("a payload in the request too: %v", err)
	}
	// A worker's own frame still carries at most MaxWorkerPayload.
	if _, err := e.broker.Prepare(ctxT(t), e.ep.ID, prepareReq(e, "git_commit", "repo", gitTarget(f.head()), big)); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("a worker frame over its cap: %v", err)
	}
}
