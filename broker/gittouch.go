package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Touches implements Toucher: the paths the patch changes, read from the
// diff of the base tree and the tree the patch produces (renames as delete
// and add, modes included) — the same tree the commit will record, not the
// patch text. Every object git writes meanwhile goes to a quarantine
// directory that is removed before Touches returns; the repository gains
// nothing.
func (g *GitCommit) Touches(ctx context.Context, r Request) ([]Touch, error) {
	t, req, err := g.parse(r)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "autonomic-touch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	objects := filepath.Join(tmp, "objects")
	if err := os.Mkdir(objects, 0o700); err != nil {
		return nil, err
	}
	env := []string{"GIT_OBJECT_DIRECTORY=" + objects, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(t.Repo, "objects")}
	index := filepath.Join(tmp, "index")
	if _, err := runGit(ctx, g.Git, t.Repo, index, nil, env, "read-tree", req.BaseOID+"^{commit}"); err != nil {
		return nil, protocol.Errorf(protocol.CodeEffectFailed, "base: %w", err)
	}
	if _, err := runGit(ctx, g.Git, t.Repo, index, r.Payload, env, "apply", "--cached", "--whitespace=nowarn", "-"); err != nil {
		return nil, applyFailed(err)
	}
	tree, err := runGit(ctx, g.Git, t.Repo, index, nil, env, "write-tree")
	if err != nil {
		return nil, err
	}
	raw, err := runGit(ctx, g.Git, t.Repo, "", nil, env, "diff-tree", "-r", "-z", "--no-renames", "--raw",
		req.BaseOID+"^{tree}", strings.TrimSpace(string(tree)))
	if err != nil {
		return nil, err
	}
	return parseRawDiff(raw)
}

// parseRawDiff reads "git diff-tree -r -z --raw" records,
// ":<old mode> <new mode> <old oid> <new oid> <status>\0<path>\0".
func parseRawDiff(raw []byte) ([]Touch, error) {
	var out []Touch
	fields := bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0})
	if len(raw) == 0 {
		return nil, nil
	}
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("diff-tree output has %d fields", len(fields))
	}
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(string(fields[i]))
		if len(meta) < 5 || !strings.HasPrefix(meta[0], ":") {
			return nil, fmt.Errorf("diff-tree record %q", fields[i])
		}
		oldMode, newMode := strings.TrimPrefix(meta[0], ":"), meta[1]
		out = append(out, Touch{Path: string(fields[i+1]), Executable: newMode == "100755" && oldMode != "100755"})
	}
	return out, nil
}
