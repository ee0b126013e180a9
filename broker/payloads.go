package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Payloads is the content-addressed payload store: worker payloads and
// response bodies, each file named by the SHA-256 of its content. A file is
// written under a temporary name, fsynced and renamed, so a name that exists
// always holds exactly its digest's content.
type Payloads struct {
	dir string
	// mu orders a sweep's removal against a Put of the same digest: a
	// payload stored again is never removed under its new effect.
	mu sync.Mutex
}

// OpenPayloads opens (creating if needed) a payload store in dir, which
// must be owner-only.
func OpenPayloads(dir string) (*Payloads, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("broker: payload directory must be a directory with mode 0700")
	}
	return &Payloads{dir: dir}, nil
}

// Digest returns "sha256:<hex>" of b.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (p *Payloads) path(digest string) (string, error) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !protocol.ValidDigest(hexPart) {
		return "", protocol.Errorf(protocol.CodeInvalidField, "digest")
	}
	return filepath.Join(p.dir, hexPart), nil
}

// Put stores b and returns its digest. Storing what is already stored is a
// no-op.
func (p *Payloads) Put(b []byte) (string, error) {
	d := Digest(b)
	path, _ := p.path(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		// Stored again: its retention starts again.
		now := time.Now()
		_ = os.Chtimes(path, now, now)
		return d, nil
	}
	tmp, err := os.CreateTemp(p.dir, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return d, syncDir(p.dir)
}

// Get returns the content of digest, verified.
func (p *Payloads) Get(digest string, max int64) ([]byte, error) {
	path, err := p.path(digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, protocol.Errorf(protocol.CodeNotFound, "payload")
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max || Digest(b) != digest {
		return nil, protocol.Errorf(protocol.CodeInternal, "payload %s is corrupt", digest)
	}
	return b, nil
}

// Chunk reads at most limit bytes of digest's content at offset.
func (p *Payloads) Chunk(digest string, offset int64, limit int) (*protocol.Chunk, []byte, error) {
	path, err := p.path(digest)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "response body")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := fi.Size()
	if offset > size {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidField, "offset beyond the body")
	}
	if limit <= 0 || limit > protocol.MaxWorkerChunk {
		limit = protocol.MaxWorkerChunk
	}
	n := min(int64(limit), size-offset)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, offset); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	return &protocol.Chunk{Offset: offset, Length: int(n), TotalSize: size, Digest: digest, EOF: offset+n == size}, buf, nil
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// sweep removes every payload file last written or re-stored before cutoff
// whose digest is not held, and leftover temporary files older than cutoff.
func (p *Payloads) sweep(held map[string]bool, cutoff time.Time) (int, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			continue
		}
		name := e.Name()
		if !strings.HasPrefix(name, ".tmp-") && (!protocol.ValidDigest(name) || held["sha256:"+name]) {
			continue
		}
		p.mu.Lock()
		if fi, err := os.Lstat(filepath.Join(p.dir, name)); err == nil && fi.ModTime().Before(cutoff) {
			if os.Remove(filepath.Join(p.dir, name)) == nil {
				n++
			}
		}
		p.mu.Unlock()
	}
	if n > 0 {
		return n, syncDir(p.dir)
	}
	return 0, nil
}
