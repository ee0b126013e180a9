// Package rootfscheck proves a rootfs tree is exactly what its manifest
// lists. It needs no privilege of its own: it reads through the directory
// descriptor it is given, a root-owned tree that any reader may read, and
// keeps its manifest digest cache and per-boot verified record through the
// state directory descriptor the launcher gives it (Records).
package rootfscheck

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"golang.org/x/sys/unix"
)

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

// Tree proves the tree under rootfs is exactly what manifest (format 1)
// lists: no path missing or extra, and each one's type, mode (never
// set-id), owner, size and content (or symlink target) as listed.
func Tree(rootfs int, manifest []byte) error {
	var m struct {
		Format  int             `json:"format"`
		Entries []manifestEntry `json:"entries"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil || m.Format != 1 {
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
		fd, err := fsat.OpenBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK)
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
		if sub, err = fsat.OpenDir(dir, name); err != nil {
			return err
		}
		defer unix.Close(sub)
	}
	names, err := fsat.Names(sub)
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
