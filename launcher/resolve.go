package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

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
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + workerHome}
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
	fd, err := openRoot(ref.Path)
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
	b, err := readFileAt(l.state.root, name, 4096)
	return err == nil && json.Unmarshal(b, v) == nil
}

func (l *launcher) writeRecord(name string, v any) {
	b, _ := json.Marshal(v)
	tmp := name + ".tmp"
	_ = unix.Unlinkat(l.state.root, tmp, 0)
	if writeFileAt(l.state.root, tmp, b, 0o600) == nil {
		_ = unix.Renameat(l.state.root, tmp, l.state.root, name)
		_ = unix.Fsync(l.state.root)
	}
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
	root, err := openRoot(l.cfg.BrokerSocketsRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, id+".sock", unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, protocol.Errorf(protocol.CodeNotFound, "socket")
		}
		return -1, classifyOpen(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, protocol.Errorf(protocol.CodePathUnsafe, "not a socket")
	}
	return fd, nil
}

// manifestEntry is one path of a rootfs manifest (rootfs-builder's format 1).
type manifestEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   string `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Target string `json:"target"`
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
	mb, err := readFileAt(rootfs, "manifest.json", 256<<20)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(mb); hex.EncodeToString(sum[:]) != digest {
		return errors.New("manifest changed while verifying")
	}
	var m struct {
		Format  int             `json:"format"`
		Entries []manifestEntry `json:"entries"`
	}
	if err := json.Unmarshal(mb, &m); err != nil || m.Format != 1 {
		return errors.New("manifest is not format 1")
	}
	entries := make(map[string]manifestEntry, len(m.Entries))
	for _, e := range m.Entries {
		entries[e.Path] = e
	}
	v := &treeCheck{entries: entries}
	if err := v.check(rootfs, "", "/", 0); err != nil {
		return err
	}
	if v.seen != len(entries) {
		return errors.New("a path the manifest lists is missing")
	}
	l.writeRecord(record, want)
	return nil
}

type treeCheck struct {
	entries map[string]manifestEntry
	seen    int
}

// check compares name under dir (the rootfs itself when name is "") with
// its manifest entry, and recurses into directories. The rootfs is
// root-owned and shallow; the depth bound only keeps a broken one finite.
func (v *treeCheck) check(dir int, name, p string, depth int) error {
	e, ok := v.entries[p]
	if !ok {
		return errors.New("a path the manifest does not list")
	}
	v.seen++
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	types := map[uint32]string{unix.S_IFDIR: "dir", unix.S_IFREG: "file", unix.S_IFLNK: "symlink"}
	mode := fmt.Sprintf("%04o", st.Mode&0o1777)
	if types[st.Mode&unix.S_IFMT] != e.Type || mode != e.Mode || st.Mode&0o6000 != 0 || st.Uid != e.UID || st.Gid != e.GID {
		return errors.New("a path's type, mode or owner differs from the manifest")
	}
	switch e.Type {
	case "symlink":
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil || string(buf[:n]) != e.Target {
			return errors.New("a symlink's target differs from the manifest")
		}
		return nil
	case "file":
		fd, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil || n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			return errors.New("a file's content differs from the manifest")
		}
		return nil
	}
	if depth > 64 {
		return errors.New("rootfs deeper than 64 levels")
	}
	sub := dir
	if name != "" {
		var err error
		if sub, err = openDirBeneath(dir, name); err != nil {
			return err
		}
		defer unix.Close(sub)
	}
	names, err := readNames(sub)
	if err != nil {
		return err
	}
	for _, n := range names {
		if p == "/" && n == "manifest.json" {
			continue
		}
		if err := v.check(sub, n, strings.TrimSuffix(p, "/")+"/"+n, depth+1); err != nil {
			return err
		}
	}
	return nil
}
