package broker

import (
	"context"
	"errors"
	"io"
	"os"
	"regexp"

	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// ArtifactTarget is one trusted publication directory.
type ArtifactTarget struct {
	Dir      string // absolute; owned by the kernel's account
	MaxBytes int64  // 0: protocol.MaxWorkerPayload
	Class    int    // 0: 4
}

// Artifact publishes create-only, content-idempotent files (class 4) with
// the crash-safe discipline of seed 001: exclusive create of a recovery
// name, write, fsync, directory fsync, hard link to the final name,
// directory fsync, unlink the recovery name, directory fsync. Every crash
// point leaves a state Reconcile can prove from the directory alone:
//
//	final name holds our digest             → committed
//	final name absent                       → not committed (a recovery
//	                                          file, complete or not, is
//	                                          removed; it was never published)
//	final name holds other bytes, recovery
//	name still ours                         → not committed (name taken)
//	final name holds other bytes, no
//	recovery name                           → unknown
type Artifact struct {
	Targets map[string]ArtifactTarget
}

type artifactRequest struct {
	Name string `json:"name"`
}

var artifactName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Kind implements Adapter.
func (*Artifact) Kind() string { return "artifact" }

// Class implements Adapter.
func (a *Artifact) Class(target string) (int, error) {
	t, ok := a.Targets[target]
	if !ok {
		return 0, protocol.Errorf(protocol.CodeForbidden, "unknown artifact target")
	}
	if t.Class == 0 {
		return 4, nil
	}
	return t.Class, nil
}

func (a *Artifact) parse(r Request) (ArtifactTarget, string, error) {
	t, ok := a.Targets[r.TargetID]
	if !ok {
		return t, "", protocol.Errorf(protocol.CodeForbidden, "unknown artifact target")
	}
	var req artifactRequest
	if err := protocol.DecodeStrict(r.Target, &req); err != nil {
		return t, "", err
	}
	// The pattern admits no '/' and no leading '.', so the name can be
	// neither a path nor one of our recovery names.
	if !artifactName.MatchString(req.Name) {
		return t, "", protocol.Errorf(protocol.CodeInvalidField, "target.name")
	}
	max := t.MaxBytes
	if max <= 0 {
		max = protocol.MaxWorkerPayload
	}
	if int64(len(r.Payload)) > max {
		return t, "", protocol.Errorf(protocol.CodeInvalidField, "artifact exceeds the target's size cap")
	}
	return t, req.Name, nil
}

// Validate implements Adapter.
func (a *Artifact) Validate(_ context.Context, r Request) error {
	_, _, err := a.parse(r)
	return err
}

// Precondition implements Adapter: the name must be free, or already hold
// exactly these bytes (content-idempotent).
func (a *Artifact) Precondition(_ context.Context, r Request) error {
	t, name, err := a.parse(r)
	if err != nil {
		return err
	}
	dir, err := openDir(t.Dir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	d, exists, err := digestAt(dir, name)
	if err != nil {
		return err
	}
	if exists && d != r.PayloadDigest {
		return protocol.Errorf(protocol.CodeForbidden, "artifact name is taken")
	}
	return nil
}

func recoveryName(r Request) string { return ".autonomic-recovery-" + r.EffectID.String() }

func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// digestAt returns the digest of the regular file name beneath dir.
func digestAt(dir int, name string) (string, bool, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return "", false, nil
	}
	if err != nil {
		return "", true, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", true, protocol.Errorf(protocol.CodeForbidden, "artifact name is not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, protocol.MaxWorkerPayload*4))
	if err != nil {
		return "", true, err
	}
	return Digest(b), true, nil
}

// Commit implements Adapter.
func (a *Artifact) Commit(_ context.Context, r Request) Result {
	t, name, err := a.parse(r)
	if err != nil {
		return notCommitted(err, nil)
	}
	dir, err := openDir(t.Dir)
	if err != nil {
		return notCommitted(protocol.Errorf(protocol.CodeTargetUnavailable, "artifact dir: %w", err), nil)
	}
	defer unix.Close(dir)
	rec := recoveryName(r)
	receipt := map[string]any{"name": name, "digest": r.PayloadDigest, "size": len(r.Payload)}
	fd, err := unix.Openat(dir, rec, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "reserve recovery name: %w", err), nil)
	}
	f := os.NewFile(uintptr(fd), rec)
	_, werr := f.Write(r.Payload)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		// Never linked: nothing is published. Remove what we wrote.
		_ = unix.Unlinkat(dir, rec, 0)
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "write: %w", werr), nil)
	}
	if err := unix.Fsync(dir); err != nil {
		_ = unix.Unlinkat(dir, rec, 0)
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "dir sync: %w", err), nil)
	}
	// The commit point: the link either creates the final name or fails.
	if err := unix.Linkat(dir, rec, dir, name, 0); err != nil {
		if errors.Is(err, unix.EEXIST) {
			d, _, derr := digestAt(dir, name)
			_ = unix.Unlinkat(dir, rec, 0)
			if derr == nil && d == r.PayloadDigest {
				receipt["idempotent"] = true
				return committed(receipt)
			}
			return notCommitted(protocol.Errorf(protocol.CodeForbidden, "artifact name is taken"), nil)
		}
		_ = unix.Unlinkat(dir, rec, 0)
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "link: %w", err), nil)
	}
	if err := unix.Fsync(dir); err != nil {
		// Linked but not durably: the final name may or may not survive a
		// crash. Reconcile decides from what the directory holds later.
		return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "dir sync after link: %w", err), receipt)
	}
	_ = unix.Unlinkat(dir, rec, 0)
	_ = unix.Fsync(dir)
	return committed(receipt)
}

// Reconcile implements Adapter. It only reads the directory and removes our
// own recovery name; it never creates the final name.
func (a *Artifact) Reconcile(_ context.Context, r Request) Result {
	t, name, err := a.parse(r)
	if err != nil {
		return unknown(err, nil)
	}
	dir, err := openDir(t.Dir)
	if err != nil {
		return unknown(protocol.Errorf(protocol.CodeTargetUnavailable, "artifact dir: %w", err), nil)
	}
	defer unix.Close(dir)
	rec := recoveryName(r)
	final, exists, err := digestAt(dir, name)
	if err != nil {
		return unknown(err, nil)
	}
	_, recExists, _ := digestAt(dir, rec)
	receipt := map[string]any{"name": name, "digest": r.PayloadDigest, "size": len(r.Payload)}
	switch {
	case exists && final == r.PayloadDigest:
		if recExists {
			_ = unix.Unlinkat(dir, rec, 0)
			_ = unix.Fsync(dir)
		}
		return committed(receipt)
	case !exists:
		if recExists {
			_ = unix.Unlinkat(dir, rec, 0)
			_ = unix.Fsync(dir)
		}
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "never published"), nil)
	case recExists:
		_ = unix.Unlinkat(dir, rec, 0)
		_ = unix.Fsync(dir)
		return notCommitted(protocol.Errorf(protocol.CodeForbidden, "artifact name is taken"), nil)
	}
	return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "name holds other bytes"), map[string]any{"name": name})
}
