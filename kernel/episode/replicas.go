package episode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Replicas is where stable checkpoint archives are kept for every kernel
// of the database (the store). Both ends hash what they move: bytes that
// are not their digest ("sha256:<hex>") are stored and read as nothing.
type Replicas interface {
	PutArchive(ctx context.Context, digest string, r io.Reader, max int64) error
	ReadArchive(ctx context.Context, digest string, w io.Writer) (int64, error)
}

// checkpointImporter is a domain backend that takes an archive another
// host made into its checkpoint store (the launcher's import, protocol
// version 3).
type checkpointImporter interface {
	Import(ctx context.Context, holder, digest string) (*protocol.CheckpointResult, error)
}

// replicate copies the archive of a stable checkpoint about to be recorded to
// the replicas. A failure costs a lost host's task its resume point (it
// runs again whole), never safety: it is logged, not returned.
func (e *Episode) replicate(ctx context.Context, digest string) {
	k := e.k
	if k.cfg.Replicas == nil || k.cfg.Archives == nil {
		return
	}
	rc, err := k.cfg.Archives.OpenArchive(ctx, digest)
	if err == nil {
		err = k.cfg.Replicas.PutArchive(ctx, "sha256:"+digest, rc, k.cfg.ReplicaMaxBytes)
		rc.Close()
	}
	if err != nil {
		e.log.Warn("stable checkpoint not replicated: a takeover would run this task again whole", "digest", digest, "error", err)
	}
}

// importReplica brings a replicated archive into this host's launcher
// store, held by holder: the kernel writes the bytes the database has
// (verified by digest as they are read) into its imports directory, and
// the launcher copies them into its store, verifying the digest again.
func (k *Controller) importReplica(ctx context.Context, holder, digest string) error {
	imp, ok := k.cfg.Domains.(checkpointImporter)
	if k.cfg.Replicas == nil || !ok {
		return errors.New("no checkpoint replicas on this kernel")
	}
	final := domain.ImportPath(k.cfg.WorkspacesRoot, digest)
	dir := filepath.Dir(final)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	tmp := filepath.Join(dir, ".tmp-"+hex.EncodeToString(nonce[:]))
	defer os.Remove(tmp)
	defer os.Remove(final)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	// The launcher takes only the workspace owner's file (a kernel run as
	// root, in tests, hands it over as it does workspaces).
	err = f.Chown(k.cfg.OwnerUID, k.cfg.OwnerGID)
	if err == nil {
		_, err = k.cfg.Replicas.ReadArchive(ctx, "sha256:"+digest, f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read the replica: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if _, err := imp.Import(ctx, holder, digest); err != nil {
		return fmt.Errorf("launcher import: %w", err)
	}
	return nil
}
