package main

import (
	"errors"
	"io"
	"os"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// importsDir is where, beneath the workspaces root, the kernel leaves an
// archive to import: imports/<digest>.tar (kernel/domain.ImportsDir).
const importsDir = "imports"

// errStored: the store has the archive already, so only the hold is new.
var errStored = errors.New("already stored")

// importArchive puts an archive another host made, whose bytes the kernel
// wrote to imports/<digest>.tar, into the store under that digest, held by
// the request's domain id; a create restores it as one made here. The
// file is the kernel's, so nothing is read unless it is the kernel's own
// regular file, and what is stored is our copy, hashed as stored.
func (l *launcher) importArchive() error {
	holder, digest := l.req.DomainID, l.req.Checkpoint
	root, err := fsat.OpenRoot(l.cfg.WorkspacesRoot)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	// Not past a symlink or onto another mount (a FUSE file could stall
	// us), and non-blocking: a FIFO cannot hold us in open.
	src, size, err := fsat.OpenOwned(root, importsDir+"/"+digest+".tar", l.cfg.WorkspaceOwnerUID)
	switch {
	case errors.Is(err, unix.ENOENT):
		return protocol.E(protocol.CodeCheckpointNotFound)
	case err != nil:
		return protocol.Errorf(protocol.CodeCheckpointUnsafe, "import: %w", err)
	case size > l.cfg.MaxCheckpointBytes:
		src.Close()
		return protocol.E(protocol.CodeCheckpointTooLarge)
	}
	defer src.Close()
	res, err := l.store(holder, digest, func(f *os.File, room int64) (int, error) {
		var st unix.Stat_t
		switch {
		case size > room:
			return 0, protocol.E(protocol.CodeCheckpointStoreFull)
		case unix.Fstatat(l.state.checkpoints, digest+".tar", &st, unix.AT_SYMLINK_NOFOLLOW) == nil:
			return 0, errStored // a create verifies it before extracting
		}
		// One byte past the size checked is enough to know the kernel
		// grew its file meanwhile; the digest catches any other change.
		if n, err := io.Copy(f, io.LimitReader(src, size+1)); err != nil || n != size {
			return 0, protocol.Errorf(protocol.CodeCheckpointCorrupt, "import: %d of %d bytes (%v)", n, size, err)
		}
		return 0, nil
	})
	if errors.Is(err, errStored) {
		res = &protocol.CheckpointResult{SHA256: digest, Bytes: size}
		if err = l.hold(holder, digest); err != nil {
			err = protocol.Errorf(protocol.CodeLauncherFailed, "hold checkpoint: %w", err)
		}
	}
	if err != nil {
		return err
	}
	res.DomainID = holder
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeCheckpoint, Checkpoint: res})
	return nil
}
