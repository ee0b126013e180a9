package rootfs

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	ocitarball "github.com/google/go-containerregistry/pkg/v1/tarball"
)

// OCI names an image on this host: an OCI image layout directory or a
// `docker save` archive, pinned by its manifest digest. The image is
// hostile input: see unpackOCI.
type OCI struct {
	// Path is the layout directory or the archive file.
	Path string `json:"path"`
	// Digest is the image manifest's "sha256:<64 hex>".
	Digest string `json:"digest"`
}

var ociDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (o *OCI) validate() error {
	if err := checkAbs(o.Path); err != nil {
		return fmt.Errorf("path: %v", err)
	}
	if !ociDigestRE.MatchString(o.Digest) {
		return fmt.Errorf("digest %q is not sha256:<64 lowercase hex>", o.Digest)
	}
	return nil
}

// Bounds on what one image may make the builder read and write. An image
// over any of them is refused whole.
type ociLimits struct {
	Entries   int   // archive members over all layers
	FileBytes int64 // one regular file
	Bytes     int64 // all regular files together, every layer
	Layers    int
}

var defaultOCILimits = ociLimits{Entries: 1 << 20, FileBytes: 4 << 30, Bytes: 32 << 30, Layers: 256}

// ErrImage: an OCI image is malformed, does not match its pin, or holds
// something no rootfs may (a device node, a path that escapes).
var ErrImage = errors.New("OCI image refused")

// loadOCI opens the pinned image and checks the chain of digests the
// layers are read under: the pin is the manifest's digest, the manifest
// names the config's, and the config's diff_ids are checked against each
// layer's uncompressed bytes as they are read (unpackOCI).
func loadOCI(o *OCI) (v1.Image, error) {
	want, err := v1.NewHash(o.Digest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrImage, err)
	}
	fi, err := os.Stat(o.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMissing, err)
	}
	var img v1.Image
	if fi.IsDir() {
		idx, err := layout.ImageIndexFromPath(o.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrImage, o.Path, err)
		}
		if img, err = idx.Image(want); err != nil {
			return nil, fmt.Errorf("%w: %s holds no image %s: %v", ErrImage, o.Path, o.Digest, err)
		}
	} else if img, err = ocitarball.ImageFromPath(o.Path, nil); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrImage, o.Path, err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrImage, err)
	}
	if got := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(got[:]) != o.Digest {
		return nil, fmt.Errorf("%w: manifest digest is sha256:%x, the spec pins %s", ErrImage, got, o.Digest)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrImage, err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrImage, err)
	}
	if got := sha256.Sum256(cfg); "sha256:"+hex.EncodeToString(got[:]) != m.Config.Digest.String() {
		return nil, fmt.Errorf("%w: config is not the manifest's %s", ErrImage, m.Config.Digest)
	}
	return img, nil
}

// unpackOCI applies the image's layers in order to a tree, with every
// regular file's bytes written under blobs (a directory of the builder's).
// Nothing is extracted to a path the image chose. Per layer, its whiteouts
// (".wh.NAME") and opaque markers (".wh..wh..opq") apply to the layers
// below it, then its entries are added in archive order. Refused, the
// whole image with it: a device node, FIFO or socket; a sparse or unknown
// member type; a name with a ".." component; an entry beneath a file or
// symlink; a hard link to anything but a regular file already unpacked;
// bytes that are not the config's diff_id; anything over the limits.
// Kept: permission bits and sticky (setuid/setgid are dropped by the
// planner), symlinks as symlinks (their targets never read here);
// ownership is the rootfs's (root) whatever the image says.
func unpackOCI(img v1.Image, blobs string, lim ociLimits) (*tree, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrImage, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("%w: layers: %v", ErrImage, err)
	}
	if len(layers) > lim.Layers || len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("%w: %d layers for %d diff_ids (at most %d)", ErrImage, len(layers), len(cfg.RootFS.DiffIDs), lim.Layers)
	}
	u := &unpacker{t: newTree(), blobs: blobs, lim: lim}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("%w: layer %d: %v", ErrImage, i, err)
		}
		h := sha256.New()
		err = u.apply(io.TeeReader(rc, h))
		if err == nil {
			// Drain what the tar reader left (padding, trailing blocks) so
			// the digest covers the whole stream.
			_, err = io.Copy(h, io.LimitReader(rc, 1<<20))
		}
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: layer %d: %v", ErrImage, i, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != cfg.RootFS.DiffIDs[i].String() {
			return nil, fmt.Errorf("%w: layer %d is %s, the config's diff_id is %s", ErrImage, i, got, cfg.RootFS.DiffIDs[i])
		}
	}
	return u.t, nil
}

type unpacker struct {
	t       *tree
	blobs   string
	lim     ociLimits
	entries int
	bytes   int64
	nblobs  int
}

// layerOp is one member of a layer, read before any is applied.
type layerOp struct {
	path             string
	whiteout, opaque bool
	node             *treeNode
	link             string // a hard link's target path
}

// apply reads one layer (an uncompressed tar stream) and applies it.
func (u *unpacker) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	var ops []layerOp
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if u.entries++; u.entries > u.lim.Entries {
			return fmt.Errorf("more than %d entries", u.lim.Entries)
		}
		op, err := u.read(hdr, tr)
		if err != nil {
			return err
		}
		if op != nil {
			ops = append(ops, *op)
		}
	}
	for _, op := range ops {
		switch {
		case op.opaque:
			if d := u.t.lookup(op.path); d != nil && d.kind == kindDir {
				d.children = map[string]*treeNode{}
			}
		case op.whiteout:
			u.t.remove(op.path)
		}
	}
	for _, op := range ops {
		if op.whiteout || op.opaque {
			continue
		}
		n := op.node
		if op.link != "" {
			t := u.t.lookup(op.link)
			if t == nil || t.kind != kindFile {
				return fmt.Errorf("hard link %s to %s, which is not a regular file of the image", op.path, op.link)
			}
			n = &treeNode{kind: kindFile, mode: t.mode, src: t.src}
		}
		if err := u.t.put(op.path, n); err != nil {
			return err
		}
	}
	return nil
}

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

func (u *unpacker) read(hdr *tar.Header, r io.Reader) (*layerOp, error) {
	p, err := cleanName(hdr.Name)
	if err != nil {
		return nil, err
	}
	dir, base := path.Dir(p), path.Base(p)
	if strings.HasPrefix(base, whiteoutPrefix) {
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA {
			return nil, fmt.Errorf("whiteout %s is not a regular file", p)
		}
		if base == opaqueMarker {
			return &layerOp{path: dir, opaque: true}, nil
		}
		name := strings.TrimPrefix(base, whiteoutPrefix)
		if name == "" || strings.HasPrefix(name, whiteoutPrefix) {
			return nil, fmt.Errorf("whiteout %s names nothing", p)
		}
		return &layerOp{path: path.Join(dir, name), whiteout: true}, nil
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	if hdr.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return &layerOp{path: p, node: &treeNode{kind: kindDir, mode: mode}}, nil
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > 4096 || strings.ContainsAny(hdr.Linkname, "\x00\n") || !utf8.ValidString(hdr.Linkname) {
			return nil, fmt.Errorf("symlink %s has an unrepresentable target", p)
		}
		if p == "/" {
			return nil, fmt.Errorf("the root is a symlink")
		}
		return &layerOp{path: p, node: &treeNode{kind: kindSymlink, mode: 0o777, target: hdr.Linkname}}, nil
	case tar.TypeLink:
		t, err := cleanName(hdr.Linkname)
		if err != nil || t == "/" {
			return nil, fmt.Errorf("hard link %s: bad target", p)
		}
		return &layerOp{path: p, link: t}, nil
	case tar.TypeReg, tar.TypeRegA:
		if p == "/" {
			return nil, fmt.Errorf("the root is a file")
		}
		if hdr.Size < 0 || hdr.Size > u.lim.FileBytes {
			return nil, fmt.Errorf("%s: %d bytes (at most %d a file)", p, hdr.Size, u.lim.FileBytes)
		}
		if u.bytes += hdr.Size; u.bytes > u.lim.Bytes {
			return nil, fmt.Errorf("more than %d bytes of files", u.lim.Bytes)
		}
		src, err := u.blob(r, hdr.Size)
		if err != nil {
			return nil, err
		}
		return &layerOp{path: p, node: &treeNode{kind: kindFile, mode: mode, src: src}}, nil
	case tar.TypeChar, tar.TypeBlock:
		return nil, fmt.Errorf("%s is a device node", p)
	case tar.TypeFifo:
		return nil, fmt.Errorf("%s is a FIFO", p)
	}
	return nil, fmt.Errorf("%s has member type %q, which no rootfs holds", p, hdr.Typeflag)
}

// blob copies one file's bytes to a new file of the builder's.
func (u *unpacker) blob(r io.Reader, size int64) (string, error) {
	u.nblobs++
	name := filepath.Join(u.blobs, fmt.Sprintf("%08d", u.nblobs))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	return name, err
}
