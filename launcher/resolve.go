package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/rootfscheck"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// openRootfs opens the named rootfs ("" the default) and returns its
// identity, the SHA-256 of its manifest. Hashing a large manifest on every
// create is the launcher's biggest single cost, so the digest is cached in
// root-owned state, keyed by everything that changes when the file does
// (device, inode, size, mtime, ctime); the rootfs is root-owned, so only
// root could forge a match.
//
// The manifest names every file's digest, owner and mode, so the digest is
// the tree's identity only once the tree is proven to match it: the
// configured rootfs is verified in full the first time it is used in each
// boot (verifyRootfs), and refused with rootfs_mismatch if it differs.
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
	digest, err := l.manifestDigest(fd, "manifest-digest"+suffix+".json")
	if err == nil && digest == ref.ManifestSHA256 {
		err = l.verifyRootfs(fd, digest, "rootfs-verified"+suffix+".json")
	}
	if err != nil {
		unix.Close(fd)
		return -1, "", protocol.Errorf(protocol.CodeRootfsMismatch, "rootfs: %w", err)
	}
	return fd, digest, nil
}

type manifestStamp struct {
	Dev, Ino, Size, Mtime, Ctime int64
	Digest                       string
}

func (l *launcher) manifestDigest(rootfs int, cache string) (string, error) {
	mfd, err := fsat.OpenBeneath(rootfs, "manifest.json", unix.O_RDONLY)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(mfd), "manifest.json")
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err != nil {
		return "", err
	}
	stamp := manifestStamp{Dev: int64(st.Dev), Ino: int64(st.Ino), Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
	var cached manifestStamp
	want := stamp
	if l.readRecord(cache, &cached) && protocol.ValidDigest(cached.Digest) {
		if want.Digest = cached.Digest; cached == want {
			return cached.Digest, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 256<<20)); err != nil {
		return "", err
	}
	stamp.Digest = hex.EncodeToString(h.Sum(nil))
	l.writeRecord(cache, stamp)
	return stamp.Digest, nil
}

// readRecord and writeRecord keep a small JSON record in the launcher's
// root-owned state, which only root can forge. A record that cannot be
// read is no record; one that cannot be written is recomputed next time.
func (l *launcher) readRecord(name string, v any) bool {
	b, err := fsat.ReadFile(l.state.root, name, 4096)
	return err == nil && json.Unmarshal(b, v) == nil
}

func (l *launcher) writeRecord(name string, v any) {
	b, _ := json.Marshal(v)
	tmp := name + ".tmp"
	_ = unix.Unlinkat(l.state.root, tmp, 0)
	if fsat.WriteFile(l.state.root, tmp, b, 0o600) == nil {
		_ = unix.Renameat(l.state.root, tmp, l.state.root, name)
		_ = unix.Fsync(l.state.root)
	}
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

// verifiedRecord remembers, in root-owned state, which rootfs directory was
// proven to match which manifest in which boot.
type verifiedRecord struct {
	BootID   string `json:"boot_id"`
	Digest   string `json:"digest"`
	Dev, Ino uint64
	Ctime    int64 // a new directory that reuses a freed inode has another
}

// verifyRootfs proves the tree under rootfs is exactly what its manifest
// lists: no path missing or extra, and each one's type, mode (never set-id),
// owner, size and content (or symlink target) as listed. A full check hashes
// every file, so it runs once per rootfs directory per boot; a copy, a new
// rootfs or a reboot checks again. Changing a verified tree in place takes
// root, and is caught at the next boot.
func (l *launcher) verifyRootfs(rootfs int, digest, record string) error {
	var st unix.Stat_t
	if err := unix.Fstat(rootfs, &st); err != nil {
		return err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return err
	}
	want := verifiedRecord{BootID: strings.TrimSpace(string(boot)), Digest: digest, Dev: st.Dev, Ino: st.Ino, Ctime: st.Ctim.Nano()}
	if got := (verifiedRecord{}); l.readRecord(record, &got) && got == want {
		return nil
	}
	mb, err := fsat.ReadFile(rootfs, "manifest.json", 256<<20)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(mb); hex.EncodeToString(sum[:]) != digest {
		return errors.New("manifest changed while verifying")
	}
	if err := rootfscheck.Tree(rootfs, mb); err != nil {
		return err
	}
	l.writeRecord(record, want)
	return nil
}
