package broker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/hashicorp/go-hclog"
)

// TestGitErrorKeepsOnlyTheVerb: a git that fails names its verb and exit
// status in the error, never its stderr, which quotes the worker's patch
// ("invalid path '.git/config'") and becomes a denial's reason the worker
// or its agent reads. The operator's log gets the stderr.
func TestGitErrorKeepsOnlyTheVerb(t *testing.T) {
	f := newGitFixture(t)
	var logs bytes.Buffer
	gc := &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"**"}}},
		Log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})}
	patch := []byte("diff --git a/.git/config b/.git/config\nnew file mode 100644\n--- /dev/null\n+++ b/.git/config\n@@ -0,0 +1,2 @@\n+[core]\n+\tfsmonitor = touch /tmp/pwned-by-patch\n")
	err := gc.Validate(ctxT(t), Request{TargetID: "repo", Target: mustJSON(gitTarget(f.head())), Payload: patch})
	// git refuses the path: forbidden (not merely failed), and still in
	// the adapter's own words.
	if err == nil || protocol.AsWire(err).Code != protocol.CodeForbidden {
		t.Fatalf("a patch onto .git/config: %v", err)
	}
	if msg := err.Error(); strings.Contains(msg, ".git") || strings.Contains(msg, "invalid path") || strings.Contains(msg, "pwned") {
		t.Fatalf("the error carries git's stderr or the patch: %q", msg)
	}
	if !strings.Contains(logs.String(), "invalid path") || !strings.Contains(logs.String(), "verb=apply") {
		t.Fatalf("the operator's log lacks git's stderr:\n%s", logs.String())
	}
	// Options before the verb ("-c http.sslCAInfo=…") are not the verb.
	if v := gitVerb([]string{"-c", "a=b", "-c", "c=d", "push", "-q"}); v != "push" {
		t.Fatalf("gitVerb = %q", v)
	}
}
