package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultRootfsCache holds content-addressed builds (BuildCached).
const DefaultRootfsCache = "/var/cache/autonomic/rootfs"

// CacheKey is the content address of a build: the decoded spec (which
// carries the pinned npm versions) and each --add's destination and source
// content. Host files named by the spec are not part of the key: a host
// upgrade keeps serving the cached tree until the cache entry is removed.
func CacheKey(spec *Spec, adds []Add) (string, error) {
	h := sha256.New()
	// Bump when the builder's output for one spec changes (a new manifest
	// field, another file layout): old entries then stop matching.
	io.WriteString(h, "autonomic-rootfs-cache-v2\n") // v2: an environment keeps its own libraries, not the build host's resolv.conf
	sj, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	h.Write(sj)
	for _, a := range adds {
		f, err := os.Open(a.Src)
		if err != nil {
			return "", fmt.Errorf("%w: --add source %s: %v", ErrMissing, a.Src, err)
		}
		fh := sha256.New()
		_, err = io.Copy(fh, f)
		f.Close()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\nadd %q %x", a.Dest, fh.Sum(nil))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BuildCached returns the rootfs for spec and opts.Add from cacheDir
// (default DefaultRootfsCache), building it there first when absent. A
// cached tree is used only after Verify proves it matches its manifest; a
// cached tree that does not is an error, never silently rebuilt over. A new
// build lands in a temporary directory and is renamed into place whole.
func BuildCached(ctx context.Context, spec *Spec, cacheDir string, opts Options) (dir, digest string, hit bool, err error) {
	if err := spec.Validate(); err != nil {
		return "", "", false, err
	}
	if cacheDir == "" {
		cacheDir = DefaultRootfsCache
	}
	key, err := CacheKey(spec, opts.Add)
	if err != nil {
		return "", "", false, err
	}
	dir = filepath.Join(cacheDir, spec.Name+"-"+key)
	if _, err := os.Lstat(dir); err == nil {
		// Stamped before the (seconds-long) Verify, so an eviction
		// meanwhile sees the entry as the newest.
		markUsed(dir)
		if err := Verify(dir); err != nil {
			return "", "", false, fmt.Errorf("cached rootfs %s: %w", dir, err)
		}
		digest, err := ManifestDigest(dir)
		return dir, digest, true, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", false, fmt.Errorf("%w: %v", ErrDest, err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", "", false, fmt.Errorf("%w: %v", ErrDest, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", "", false, fmt.Errorf("%w: %v", ErrDest, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	digest, err = Build(ctx, spec, tmp, opts)
	if err != nil {
		return "", "", false, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// A concurrent build of the same key may have landed first.
		if verr := Verify(dir); verr != nil {
			return "", "", false, fmt.Errorf("%w: %v", ErrDest, err)
		}
		markUsed(dir)
		digest, err = ManifestDigest(dir)
		return dir, digest, true, err
	}
	markUsed(dir)
	return dir, digest, false, nil
}

// markUsed records a use of the entry dir in cacheDir: the mtime of the
// stamp .NAME-KEY.used beside it, which Evict's keep-the-newest rule
// reads. Not the entry itself: its times are the build's, and the
// launcher's once-per-boot verification record is keyed by its ctime.
// Best effort (a reader that does not own the cache still gets the tree);
// a symlink in the stamp's place is neither followed nor replaced.
func markUsed(dir string) {
	p := usedStamp(dir)
	now := unix.NsecToTimespec(time.Now().UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, now}, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			f.Close()
		}
	}
}

// usedStamp is where markUsed records the use of the cache entry dir.
func usedStamp(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".used")
}
