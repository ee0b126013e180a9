package main

import (
	"errors"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/rootfscheck"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// openRootfs opens the named rootfs ("" the default) and returns its
// identity, the SHA-256 of its manifest, cached in root-owned state
// (rootfscheck.Records.Digest).
//
// The manifest names every file's digest, owner and mode, so the digest is
// the tree's identity only once the tree is proven to match it: the
// configured rootfs is verified in full the first time it is used in each
// boot (Records.Verify), and refused with rootfs_mismatch if it differs.
// Each rootfs keeps its own cache and record, named by its name.
func (l *launcher) openRootfs(name string) (int, string, error) {
	ref, ok := l.cfg.Rootfses[name]
	if !ok {
		return -1, "", protocol.Errorf(protocol.CodeNotFound, "rootfs")
	}
	fd, err := fsat.OpenRoot(ref.Path)
	if errors.Is(err, unix.ENOENT) {
		// A cleared rootfs cache: the operator's fix is a re-install.
		return -1, "", protocol.Errorf(protocol.CodeRootfsMissing, "rootfs %q at %s: %w", name, ref.Path, err)
	}
	if err != nil {
		return -1, "", err
	}
	suffix := ""
	if name != "" {
		suffix = "-" + name
	}
	rec := rootfscheck.Records{Dir: l.state.root}
	digest, err := rec.Digest(fd, "manifest-digest"+suffix+".json")
	if err == nil && digest == ref.ManifestSHA256 {
		err = rec.Verify(fd, digest, "rootfs-verified"+suffix+".json")
	}
	if err != nil {
		unix.Close(fd)
		return -1, "", protocol.Errorf(protocol.CodeRootfsMismatch, "rootfs: %w", err)
	}
	return fd, digest, nil
}

func (l *launcher) openWorkspace(id string) (int, error) {
	root, err := fsat.OpenRoot(l.cfg.WorkspacesRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := fsat.OpenDir(root, id)
	if errors.Is(err, unix.ENOENT) {
		return -1, protocol.E(protocol.CodeWorkspaceNotFound)
	}
	return fd, err
}

// domainSocket is a host socket named in a create request, bound at
// /run/autonomic/<name> inside the domain.
type domainSocket struct {
	id, name string
	fd       int
}

// openSocket opens <id>.sock under the sockets root, where the kernel binds
// every per-episode socket (the broker's, the inference relay's).
func (l *launcher) openSocket(id string) (int, error) {
	if l.cfg.BrokerSocketsRoot == "" {
		return -1, protocol.Errorf(protocol.CodeInvalidField, "no broker_sockets_root configured")
	}
	root, err := fsat.OpenRoot(l.cfg.BrokerSocketsRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := fsat.OpenBeneath(root, id+".sock", unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, protocol.Errorf(protocol.CodeNotFound, "socket")
		}
		return -1, fsat.Classify(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, protocol.Errorf(protocol.CodePathUnsafe, "not a socket")
	}
	return fd, nil
}
