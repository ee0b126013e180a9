package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EpochUnix (2000-01-01T00:00:00Z) is the mtime of every path in a rootfs.
// Fixed so two builds of the same closure are identical trees, not only
// identical manifests.
const EpochUnix = 946684800

// Add is one --add SRC=DEST: a host file copied to a rootfs path, for
// binaries that are not installed on the host (the in-domain clients).
type Add struct {
	Src  string
	Dest string
}

// ParseAdd parses "SRC=DEST".
func ParseAdd(s string) (Add, error) {
	src, dest, ok := strings.Cut(s, "=")
	if !ok || src == "" || dest == "" {
		return Add{}, fmt.Errorf("%w: --add %q: want SRC=DEST", ErrSpec, s)
	}
	return Add{Src: src, Dest: dest}, nil
}

// Options tune a build; the zero value builds quietly.
type Options struct {
	// Add lists extra host files to place in the rootfs.
	Add []Add
	// Progress, when set, receives a line every ProgressEvery entries
	// (default 2000) and at the end of each phase.
	Progress      io.Writer
	ProgressEvery int
	// Notes, when set, receives one line per skipped optional entry,
	// unresolved optional library or dangling symlink.
	Notes io.Writer
	// NPMCache holds finished npm installs by content key (default
	// DefaultNPMCache); NPMCommand is the npm client (default "npm").
	NPMCache   string
	NPMCommand string
}

// Build creates a rootfs for spec in dest, which must not exist or be an
// empty directory, and returns its identity (ManifestDigest). On error
// nothing is left in dest.
func Build(ctx context.Context, spec *Spec, dest string, opts Options) (digest string, err error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	libDirs := spec.LibraryDirs
	if len(libDirs) == 0 {
		libDirs = DefaultLibraryDirs()
	}
	start := time.Now()
	p := newPlanner(ctx, libDirs)
	var env *Environment
	if spec.OCI != nil || spec.Debian != nil {
		// The environment's files stay in scratch until they are copied.
		scratch, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dest)), ".environment-")
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrDest, err)
		}
		defer os.RemoveAll(scratch)
		t, rec, err := environmentTree(ctx, spec, scratch, opts)
		if err != nil {
			return "", err
		}
		if err := p.addTree(t); err != nil {
			return "", err
		}
		env = rec
	}
	if err := p.addSpec(spec); err != nil {
		return "", err
	}
	var pkgs []Package
	if spec.NPM != nil {
		install, recs, err := installNPM(ctx, spec.NPM, opts)
		if err != nil {
			return "", err
		}
		for _, f := range spec.NPM.Files {
			if err := p.addNPMFile(install, f); err != nil {
				return "", err
			}
		}
		pkgs = recs
	}
	for _, a := range opts.Add {
		if err := p.addExtra(a); err != nil {
			return "", err
		}
	}
	if err := p.resolvePendingLinks(); err != nil {
		return "", err
	}
	if opts.Notes != nil {
		for _, n := range p.notes {
			fmt.Fprintf(opts.Notes, "rootfs: note: %s\n", n)
		}
	}
	paths := p.sortedPaths()
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "rootfs: planned %d paths in %s\n", len(paths), time.Since(start).Round(time.Millisecond))
	}

	created, err := prepareDest(dest)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			cleanupDest(dest, created)
		}
	}()
	w := &writer{dest: dest, root: os.Geteuid() == 0, links: map[fileID]string{}, digests: map[string]string{}}
	every := opts.ProgressEvery
	if every <= 0 {
		every = 2000
	}
	var entries []ManifestEntry
	for i, rp := range paths {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		e, err := w.write(rp, p.nodes[rp])
		if err != nil {
			return "", err
		}
		entries = append(entries, e)
		if opts.Progress != nil && (i+1)%every == 0 {
			fmt.Fprintf(opts.Progress, "rootfs: %d/%d paths (%d%%), %d MiB\n", i+1, len(paths), (i+1)*100/len(paths), w.bytes>>20)
		}
	}
	// Directory modes and all mtimes last, deepest first: writing a child
	// changes its parent's mtime, and a 0555 directory must stay writable
	// until its children exist.
	for i := len(paths) - 1; i >= 0; i-- {
		if err := w.finish(paths[i], p.nodes[paths[i]]); err != nil {
			return "", err
		}
	}
	m := &Manifest{Format: ManifestFormat, Entries: entries, Packages: pkgs, Environment: env}
	data, err := m.Encode()
	if err != nil {
		return "", err
	}
	mpath := filepath.Join(dest, ManifestName)
	if err := os.WriteFile(mpath, data, 0o644); err != nil {
		return "", err
	}
	if err := w.normalise(mpath, 0o644, false); err != nil {
		return "", err
	}
	// Writing the manifest touched the root's mtime.
	if err := w.normalise(dest, p.nodes["/"].mode, false); err != nil {
		return "", err
	}
	// Re-read what landed rather than trusting what we meant to write.
	if err := Verify(dest); err != nil {
		return "", fmt.Errorf("self-check after build: %w", err)
	}
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "rootfs: wrote %d paths, %d MiB in %s\n", len(paths), w.bytes>>20, time.Since(start).Round(time.Millisecond))
	}
	return digestBytes(data), nil
}

// prepareDest accepts a missing path (created) or an empty directory. A
// non-empty destination is refused: merging into an existing tree would make
// its identity depend on whatever was there.
func prepareDest(dest string) (created bool, err error) {
	fi, err := os.Lstat(dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dest, 0o755); err != nil {
			return false, fmt.Errorf("%w: %v", ErrDest, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%w: %v", ErrDest, err)
	case !fi.IsDir():
		return false, fmt.Errorf("%w: %s is not a directory", ErrDest, dest)
	}
	ents, err := os.ReadDir(dest)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrDest, err)
	}
	if len(ents) != 0 {
		return false, fmt.Errorf("%w: %s is not empty", ErrDest, dest)
	}
	return false, nil
}

func cleanupDest(dest string, created bool) {
	if created {
		os.RemoveAll(dest)
		return
	}
	ents, _ := os.ReadDir(dest)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dest, e.Name()))
	}
}

type fileID struct{ dev, ino uint64 }

// writer materialises planned nodes beneath dest.
type writer struct {
	dest    string
	root    bool
	bytes   int64
	links   map[fileID]string // host inode -> first rootfs path holding it
	digests map[string]string // rootfs path -> sha256, for hard-linked copies
}

func (w *writer) write(rp string, n *node) (ManifestEntry, error) {
	full := filepath.Join(w.dest, rp)
	e := ManifestEntry{Path: rp, Type: n.kind.String(), Mode: modeString(n.mode)}
	if w.root {
		e.UID, e.GID = 0, 0
	} else {
		e.UID, e.GID = os.Geteuid(), os.Getegid()
	}
	switch n.kind {
	case kindDir:
		if rp != "/" {
			if err := os.Mkdir(full, 0o700); err != nil {
				return e, err
			}
		}
	case kindSymlink:
		if err := os.Symlink(n.target, full); err != nil {
			return e, err
		}
		e.Size, e.SHA256, e.Target = int64(len(n.target)), digestBytes([]byte(n.target)), n.target
	case kindFile:
		size, sum, err := w.writeFile(rp, full, n)
		if err != nil {
			return e, err
		}
		e.Size, e.SHA256 = size, sum
	}
	return e, nil
}

func (w *writer) writeFile(rp, full string, n *node) (int64, string, error) {
	if n.src == "" {
		if err := writeNew(full, bytes.NewReader(n.data)); err != nil {
			return 0, "", err
		}
		w.bytes += int64(len(n.data))
		return int64(len(n.data)), digestBytes(n.data), nil
	}
	// O_NOFOLLOW: the plan resolved src to a symlink-free path; if it has
	// since become a symlink, refuse rather than copy whatever it points at.
	in, err := os.OpenFile(n.src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, "", err
	}
	if !fi.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%w: %s is no longer a regular file", ErrSpec, n.src)
	}
	st := fi.Sys().(*syscall.Stat_t)
	id := fileID{uint64(st.Dev), st.Ino}
	// Hard-link repeated host inodes (git's builtins): same bytes, less disk.
	if first, ok := w.links[id]; ok {
		if err := os.Link(filepath.Join(w.dest, first), full); err != nil {
			return 0, "", err
		}
		return fi.Size(), w.digests[first], nil
	}
	var src io.Reader = in
	if needsContentCheck(n.src) || needsContentCheck(rp) {
		// Check the very bytes that will be written, not an earlier read.
		data, err := io.ReadAll(io.LimitReader(in, maxCheckedSize+1))
		if err != nil {
			return 0, "", err
		}
		if len(data) > maxCheckedSize {
			return 0, "", deniedErr(n.src, "key-like file too large to inspect")
		}
		if why := DeniedContent(data); why != "" {
			return 0, "", deniedErr(n.src, why)
		}
		src = bytes.NewReader(data)
	}
	h := sha256.New()
	cw := &countWriter{}
	if err := writeNew(full, io.TeeReader(src, io.MultiWriter(h, cw))); err != nil {
		return 0, "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	w.links[id] = rp
	w.digests[rp] = sum
	w.bytes += cw.n
	return cw.n, sum, nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

func writeNew(full string, r io.Reader) error {
	out, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// finish applies the final mode, owner and mtime of one path.
func (w *writer) finish(rp string, n *node) error {
	return w.normalise(filepath.Join(w.dest, rp), n.mode, n.kind == kindSymlink)
}

func (w *writer) normalise(full string, mode fs.FileMode, symlink bool) error {
	if w.root {
		if err := os.Lchown(full, 0, 0); err != nil {
			return err
		}
	}
	if !symlink {
		// After chown: chown clears setuid/setgid, and the mode must be the
		// last word on permissions.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	t := unix.Timespec{Sec: EpochUnix}
	ts := []unix.Timespec{t, t}
	return unix.UtimesNanoAt(unix.AT_FDCWD, full, ts, unix.AT_SYMLINK_NOFOLLOW)
}
