package rootfscheck

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
)

// Records keeps small JSON records in the launcher's root-owned state
// directory (Dir, a descriptor), which only root can forge. A record that
// cannot be read is no record; one that cannot be written is recomputed
// next time.
type Records struct{ Dir int }

func (r Records) read(name string, v any) bool {
	b, err := fsat.ReadFile(r.Dir, name, 4096)
	return err == nil && json.Unmarshal(b, v) == nil
}

func (r Records) write(name string, v any) {
	b, _ := json.Marshal(v)
	tmp := name + ".tmp"
	_ = unix.Unlinkat(r.Dir, tmp, 0)
	if fsat.WriteFile(r.Dir, tmp, b, 0o600) == nil {
		_ = unix.Renameat(r.Dir, tmp, r.Dir, name)
		_ = unix.Fsync(r.Dir)
	}
}

type manifestStamp struct {
	Dev, Ino, Size, Mtime, Ctime int64
	Digest                       string
}

// Digest is the SHA-256 of rootfs's manifest.json. Hashing a large
// manifest on every create is the launcher's biggest single cost, so the
// digest is cached in record cache, keyed by everything that changes when
// the file does (device, inode, size, mtime, ctime); the rootfs is
// root-owned, so only root could forge a match.
func (r Records) Digest(rootfs int, cache string) (string, error) {
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
	if r.read(cache, &cached) && validDigest(cached.Digest) {
		if want.Digest = cached.Digest; cached == want {
			return cached.Digest, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 256<<20)); err != nil {
		return "", err
	}
	stamp.Digest = hex.EncodeToString(h.Sum(nil))
	r.write(cache, stamp)
	return stamp.Digest, nil
}

func validDigest(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && s == strings.ToLower(s)
}

// verifiedRecord remembers which rootfs directory was proven to match
// which manifest in which boot.
type verifiedRecord struct {
	BootID   string `json:"boot_id"`
	Digest   string `json:"digest"`
	Dev, Ino uint64
	Ctime    int64 // a new directory that reuses a freed inode has another
}

// Verify proves the tree under rootfs is exactly what its manifest (of
// digest) lists (Tree). A full check hashes every file, so it runs once
// per rootfs directory per boot, remembered in record; a copy, a new
// rootfs or a reboot checks again. Changing a verified tree in place takes
// root, and is caught at the next boot.
func (r Records) Verify(rootfs int, digest, record string) error {
	var st unix.Stat_t
	if err := unix.Fstat(rootfs, &st); err != nil {
		return err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return err
	}
	want := verifiedRecord{BootID: strings.TrimSpace(string(boot)), Digest: digest, Dev: st.Dev, Ino: st.Ino, Ctime: st.Ctim.Nano()}
	if got := (verifiedRecord{}); r.read(record, &got) && got == want {
		return nil
	}
	mb, err := fsat.ReadFile(rootfs, "manifest.json", 256<<20)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(mb); hex.EncodeToString(sum[:]) != digest {
		return errors.New("manifest changed while verifying")
	}
	if err := Tree(rootfs, mb); err != nil {
		return err
	}
	r.write(record, want)
	return nil
}
