package broker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestGitCommitSymlinksWhenAllowed: on a target with AllowSymlinks, a
// patch (made by real git) adding a relative link that stays inside the
// repository lands in the tree as a link; one that climbs out, is
// absolute, or reaches .git is refused whatever the target allows — the
// adapter reads the link's text from the new tree itself — and without
// the option every link is.
func TestGitCommitSymlinksWhenAllowed(t *testing.T) {
	f := newGitFixture(t)
	base := f.head()
	link := func(to string) []byte {
		return f.patch(func(d string) { os.Symlink(to, filepath.Join(d, "lib", "l")) })
	}
	g := &GitCommit{Targets: map[string]GitTarget{
		"links":   {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"**"}, AllowSymlinks: true},
		"nolinks": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"**"}},
	}}
	req := func(target string, patch []byte) Request {
		b, _ := json.Marshal(map[string]string{"base_oid": base, "ref": "refs/heads/main", "message": "link"})
		return Request{TargetID: target, Target: b, Payload: patch, PayloadDigest: Digest(patch)}
	}
	ctx := context.Background()
	inside := link("../README")
	if err := g.Validate(ctx, req("links", inside)); err != nil {
		t.Fatalf("an inside link on a target that allows links: %v", err)
	}
	if err := g.Validate(ctx, req("nolinks", inside)); protocol.AsWire(err).Code != protocol.CodeForbidden {
		t.Errorf("a link on a target without allow_symlinks: %v", err)
	}
	for _, to := range []string{"../../outside", "/etc/shadow", "../.git/config", "x/../../../y"} {
		if err := g.Validate(ctx, req("links", link(to))); protocol.AsWire(err).Code != protocol.CodeForbidden {
			t.Errorf("link to %q: %v", to, err)
		}
	}
}
