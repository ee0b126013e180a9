package workspace

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol/pathglob"
)

// BlobIDs are the object ids of the blobs at paths (exact, repository-
// relative) as of rev in the repository at dir, under the same safety
// settings as every git here; a path that is not a blob at rev is absent.
// A setup layer is keyed by them (the lockfiles at the base).
func BlobIDs(ctx context.Context, git, dir, rev string, paths []string) (map[string]string, error) {
	out := map[string]string{}
	if len(paths) == 0 {
		return out, nil
	}
	if !oidPattern.MatchString(rev) {
		return nil, fmt.Errorf("%w: rev", ErrInvalid)
	}
	want := map[string]bool{}
	for _, p := range paths {
		if !pathglob.ValidPath(p) {
			return nil, fmt.Errorf("%w: path %q", ErrInvalid, p)
		}
		want[p] = true
	}
	ls, err := runner{git: git, dir: dir}.run(ctx, append([]string{"ls-tree", "-z", "--full-tree", rev, "--"}, paths...)...)
	if err != nil {
		return nil, err
	}
	for rec := range strings.SplitSeq(ls, "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if ok && len(f) == 3 && f[1] == "blob" && want[name] && oidPattern.MatchString(f[2]) {
			out[name] = f[2]
		}
	}
	return out, nil
}

// Shadow is what a setup layer — the archive of the upper layer a setup
// command left over a workspace — hides of any tree put beneath it: a
// verification restores the layer over a fresh clone with the change
// applied, and a change to a path the layer shadows would not be what
// the tests see. Only entry names and kinds are read; nothing is kept of
// the bytes, so a layer of any size within the entry cap is read in
// bounded memory.
type Shadow struct {
	entries map[string]byte // 'd' a directory, 'o' an opaque one, 'f' anything else (file, symlink, whiteout)
	digest  string
	bytes   int64
}

// ReadShadow reads a layer archive (the launcher's format, doc.go of the
// harvest) whose SHA-256 must be digest (hex), with at most maxEntries
// entries; the whole stream is hashed, so bytes that are not the layer's
// are ErrDigest.
func ReadShadow(r io.Reader, digest string, maxEntries int) (*Shadow, error) {
	h := sha256.New()
	cr := &countingReader{r: r}
	tee := io.TeeReader(cr, h)
	s := &Shadow{entries: map[string]byte{}, digest: digest}
	tr := tar.NewReader(tee)
	var bad error
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			bad = fmt.Errorf("workspace: layer archive: %w", err)
			break
		}
		if n >= maxEntries {
			bad = fmt.Errorf("workspace: layer archive: more than %d entries", maxEntries)
			break
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			bad = fmt.Errorf("workspace: layer archive: an entry name is not a clean relative path")
			break
		}
		switch {
		case hdr.Typeflag == tar.TypeDir && hdr.PAXRecords["SCHILY.xattr.user.overlay.opaque"] == "y":
			s.entries[name] = 'o'
		case hdr.Typeflag == tar.TypeDir:
			s.entries[name] = 'd'
		default:
			s.entries[name] = 'f'
		}
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, fmt.Errorf("workspace: layer archive: %w", err)
	}
	if hex.EncodeToString(h.Sum(nil)) != digest {
		return nil, ErrDigest
	}
	if bad != nil {
		return nil, bad
	}
	s.bytes = cr.n
	return s, nil
}

// Hides reports whether the layer shadows path p of the tree beneath it:
// an entry of any kind at p (a file or whiteout replaces it, a directory
// hides a file), or, above it, a file, symlink or whiteout (which hides a
// directory and all below) or an opaque directory.
func (s *Shadow) Hides(p string) bool {
	if _, ok := s.entries[p]; ok {
		return true
	}
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if k, ok := s.entries[d]; ok && k != 'd' {
			return true
		}
	}
	return false
}

// Bytes is the size of the layer's archive.
func (s *Shadow) Bytes() int64 { return s.bytes }

// Widen is l (its defaults filled in) with room for a layer beneath the
// change: an episode's final archive holds what its setup left as well,
// which the repository mostly ignores (node_modules, .venv).
func (l Limits) Widen(s *Shadow) Limits {
	l = l.withDefaults()
	if s != nil {
		l.ArchiveBytes += s.bytes
		l.Entries += len(s.entries)
	}
	return l
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Len is the number of entries the layer has.
func (s *Shadow) Len() int { return len(s.entries) }

// Digest is the layer archive's SHA-256 (hex).
func (s *Shadow) Digest() string { return s.digest }
