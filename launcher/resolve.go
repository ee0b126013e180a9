package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func (l *launcher) effectiveLimits() (limitSet, error) {
	d, m := l.cfg.Defaults, l.cfg.Max
	if rl := l.req.Limits; rl != nil {
		pick := func(v, def uint64) uint64 {
			if v == 0 {
				return def
			}
			return v
		}
		d = limitSet{pick(rl.Pids, d.Pids), pick(rl.MemoryBytes, d.MemoryBytes), pick(rl.CPUMillis, d.CPUMillis), pick(rl.NProc, d.NProc), pick(rl.NoFile, d.NoFile)}
	}
	if name := exceeds(d, m); name != "" {
		return d, protocol.Errorf(protocol.CodeLimitExceeded, "%s", name)
	}
	return d, nil
}

// workerEnv builds the environment from the allowlist alone; a key outside
// it is refused rather than dropped, so the kernel learns its mistake.
func (l *launcher) workerEnv() ([]string, error) {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace"}
	keys := make([]string, 0, len(l.req.Env))
	for k := range l.req.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(l.cfg.EnvAllowlist, k) {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "env key not allowed")
		}
		env = slices.DeleteFunc(env, func(e string) bool { return len(e) > len(k) && e[:len(k)+1] == k+"=" })
		env = append(env, k+"="+l.req.Env[k])
	}
	return env, nil
}

// openRootfs opens the rootfs and returns its identity, the SHA-256 of its
// manifest. Hashing a large manifest on every create is the launcher's
// biggest single cost, so the digest is cached in root-owned state, keyed by
// everything that changes when the file does (device, inode, size, mtime,
// ctime); the rootfs is root-owned, so only root could forge a match.
func (l *launcher) openRootfs() (int, string, error) {
	fd, err := openRoot(l.cfg.Rootfs)
	if err != nil {
		return -1, "", err
	}
	digest, err := l.manifestDigest(fd)
	if err != nil {
		unix.Close(fd)
		return -1, "", protocol.Errorf(protocol.CodeRootfsMismatch, "manifest: %w", err)
	}
	return fd, digest, nil
}

type manifestStamp struct {
	Dev, Ino, Size, Mtime, Ctime int64
	Digest                       string
}

func (l *launcher) manifestDigest(rootfs int) (string, error) {
	mfd, err := openBeneath(rootfs, "manifest.json", unix.O_RDONLY)
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
	if b, err := readFileAt(l.state.root, "manifest-digest.json", 4096); err == nil {
		var cached manifestStamp
		if json.Unmarshal(b, &cached) == nil && protocol.ValidDigest(cached.Digest) {
			want := stamp
			want.Digest = cached.Digest
			if cached == want {
				return cached.Digest, nil
			}
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 256<<20)); err != nil {
		return "", err
	}
	stamp.Digest = hex.EncodeToString(h.Sum(nil))
	if b, err := json.Marshal(stamp); err == nil {
		tmp := "manifest-digest.json.tmp"
		_ = unix.Unlinkat(l.state.root, tmp, 0)
		if writeFileAt(l.state.root, tmp, b, 0o600) == nil {
			_ = unix.Renameat(l.state.root, tmp, l.state.root, "manifest-digest.json")
		}
	}
	return stamp.Digest, nil
}

func (l *launcher) openWorkspace(id string) (int, error) {
	root, err := openRoot(l.cfg.WorkspacesRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := openDirBeneath(root, id)
	if errors.Is(err, unix.ENOENT) {
		return -1, protocol.E(protocol.CodeWorkspaceNotFound)
	}
	return fd, err
}

func (l *launcher) openBrokerSocket(id string) (int, error) {
	if l.cfg.BrokerSocketsRoot == "" {
		return -1, protocol.Errorf(protocol.CodeInvalidField, "no broker_sockets_root configured")
	}
	root, err := openRoot(l.cfg.BrokerSocketsRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, id+".sock", unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, protocol.Errorf(protocol.CodeNotFound, "broker socket")
		}
		return -1, classifyOpen(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, protocol.Errorf(protocol.CodePathUnsafe, "broker socket is not a socket")
	}
	return fd, nil
}
