package egress

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cache is the content-addressed cache of immutable registry objects that
// every episode's proxy on a host shares. blobs/<sha256> holds a body,
// index/<sha256 of host+path> names the blob a URL resolved to. Only the
// kernel writes it; a blob is checked against its name while it is served,
// and a body that does not match is cut off and evicted.
//
// The cache is bounded (CacheBounds): its bytes and entries, and the free
// space it leaves its file system — which may be the managed PostgreSQL
// cluster's, and a full disk stops every authority with it. A fill is not
// begun below the reserve or at the entry cap (the fetch is still served,
// not kept); past a cap the least recently used blobs go, their index
// records with them on the next lookup.
type Cache struct {
	dir string
	b   CacheBounds

	mu      sync.Mutex
	bytes   int64
	entries int
	// used is when this process last served each blob (eviction order;
	// a blob's mtime carries it coarsely across restarts). verified is
	// the file each blob was last read whole and found to match its name
	// as: while the inode's identity, size and times are unchanged, it is
	// served without hashing again; any write to it changes its ctime.
	used     map[string]int64
	verified map[string]fileID
}

// fileID is what changes when a file's content can have: its identity,
// size, and modification and change times.
type fileID struct {
	dev, ino, size uint64
	mtime, ctime   int64
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// touchEvery is how stale a blob's mtime may grow before a hit renews it.
const touchEvery = time.Hour

// CacheBounds bound a cache; DefaultCacheBounds are the defaults.
type CacheBounds struct {
	MaxBytes     int64 // all blobs together
	MaxEntries   int   // blobs
	ReserveBytes int64 // free space a fill leaves on the file system
	// Revalidate is how long a filled object is served before the
	// registry is asked again whether it still serves it (a takedown is
	// honoured: 404 or 410 evicts it). 0: DefaultRevalidate.
	Revalidate time.Duration
}

// DefaultRevalidate is a cached object's life before it is revalidated.
const DefaultRevalidate = 24 * time.Hour

// DefaultCacheBounds are a host's cache bounds unless configured.
var DefaultCacheBounds = CacheBounds{MaxBytes: 8 << 30, MaxEntries: 200000, ReserveBytes: 1 << 30}

// OpenCache opens (creating) the cache under dir with the default bounds.
func OpenCache(dir string) (*Cache, error) { return OpenCacheWith(dir, DefaultCacheBounds) }

// OpenCacheWith opens (creating) the cache under dir with bounds b. What
// an earlier kernel left in tmp/ (fills it never finished) is removed.
func OpenCacheWith(dir string, b CacheBounds) (*Cache, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("egress cache: %q is not absolute", dir)
	}
	if b.MaxBytes <= 0 || b.MaxEntries <= 0 || b.ReserveBytes < 0 {
		return nil, fmt.Errorf("egress cache: bounds %+v", b)
	}
	for _, d := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "index"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("egress cache: %w", err)
		}
	}
	tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	for _, e := range tmp {
		os.Remove(filepath.Join(dir, "tmp", e.Name()))
	}
	c := &Cache{dir: dir, b: b, used: map[string]int64{}, verified: map[string]fileID{}}
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil {
		return nil, fmt.Errorf("egress cache: %w", err)
	}
	for _, e := range blobs {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			c.bytes += fi.Size()
			c.entries++
		}
	}
	c.shrink()
	return c, nil
}

// room reports whether a new fill may begin: under the entry cap, and the
// file system above the reserve.
func (c *Cache) room() bool {
	c.mu.Lock()
	full := c.entries >= c.b.MaxEntries
	c.mu.Unlock()
	var st unix.Statfs_t
	if full || unix.Statfs(c.dir, &st) != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize > c.b.ReserveBytes
}

// shrink removes least recently used blobs (by mtime, which a hit
// renews) until the cache is within nine tenths of its caps.
func (c *Cache) shrink() {
	c.mu.Lock()
	over := c.bytes > c.b.MaxBytes || c.entries > c.b.MaxEntries
	c.mu.Unlock()
	if !over {
		return
	}
	ents, err := os.ReadDir(filepath.Join(c.dir, "blobs"))
	if err != nil {
		return
	}
	type blob struct {
		name string
		size int64
		used int64
	}
	var bs []blob
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			used := fi.ModTime().UnixNano()
			c.mu.Lock()
			used = max(used, c.used[e.Name()])
			c.mu.Unlock()
			bs = append(bs, blob{e.Name(), fi.Size(), used})
		}
	}
	slices.SortFunc(bs, func(a, b blob) int { return cmp.Compare(a.used, b.used) })
	for _, b := range bs {
		c.mu.Lock()
		done := c.bytes <= c.b.MaxBytes*9/10 && c.entries <= c.b.MaxEntries*9/10
		c.mu.Unlock()
		if done {
			return
		}
		if os.Remove(filepath.Join(c.dir, "blobs", b.name)) == nil {
			c.mu.Lock()
			c.bytes -= b.size
			c.entries--
			delete(c.used, b.name)
			delete(c.verified, b.name)
			c.mu.Unlock()
		}
	}
}

// entry is one index record.
type entry struct {
	Key         string `json:"key"`
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	// Filled is when the registry last said it serves the object (unix
	// seconds): at the fill, then at each revalidation.
	Filled int64 `json:"filled,omitempty"`
}

// stale reports whether e is due for revalidation.
func (c *Cache) stale(e entry) bool {
	r := c.b.Revalidate
	if r <= 0 {
		r = DefaultRevalidate
	}
	return time.Since(time.Unix(e.Filled, 0)) > r
}

// renew records that the registry still serves e's object.
func (c *Cache) renew(e entry) {
	e.Filled = time.Now().Unix()
	_ = c.writeIndex(e)
}

func indexName(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// lookup opens the blob key names, or reports a miss.
func (c *Cache) lookup(key string) (entry, *os.File, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, "index", indexName(key)))
	if err != nil {
		return entry{}, nil, false
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Key != key || !hexDigest(e.SHA256) {
		return entry{}, nil, false
	}
	f, err := os.Open(filepath.Join(c.dir, "blobs", e.SHA256))
	if err != nil {
		// Its blob was evicted: the record goes too.
		os.Remove(filepath.Join(c.dir, "index", indexName(key)))
		return entry{}, nil, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != e.Size {
		f.Close()
		return entry{}, nil, false
	}
	now := time.Now()
	c.mu.Lock()
	c.used[e.SHA256] = now.UnixNano() // recently used: evicted last
	c.mu.Unlock()
	if now.Sub(st.ModTime()) > touchEvery {
		os.Chtimes(f.Name(), now, now) // and across a restart, coarsely
	}
	return e, f, true
}

// evict forgets key (a blob that did not match its name).
func (c *Cache) evict(key string, digest string) {
	os.Remove(filepath.Join(c.dir, "index", indexName(key)))
	if hexDigest(digest) {
		os.Remove(filepath.Join(c.dir, "blobs", digest))
	}
}

// pending is a body being written while it is streamed to the domain.
type pending struct {
	c   *Cache
	f   *os.File
	err error
}

func (c *Cache) begin() *pending {
	if !c.room() {
		return &pending{c: c, err: errCacheFull}
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "fetch-")
	return &pending{c: c, f: f, err: err}
}

// errCacheFull: a fill was not begun (entry cap, or the disk's reserve).
var errCacheFull = errors.New("egress cache: full")

func (p *pending) Write(b []byte) (int, error) {
	if p.err == nil {
		_, p.err = p.f.Write(b)
	}
	return len(b), nil // the cache never fails the fetch
}

// commit files the complete body under its digest and points key at it.
func (p *pending) commit(key string, e entry) error {
	if p.err != nil {
		p.abort()
		return p.err
	}
	name := p.f.Name()
	if err := p.f.Close(); err != nil {
		os.Remove(name)
		return err
	}
	blob := filepath.Join(p.c.dir, "blobs", e.SHA256)
	_, statErr := os.Lstat(blob)
	if err := os.Rename(name, blob); err != nil {
		os.Remove(name)
		return err
	}
	if statErr != nil { // a new blob, not the same bytes filed again
		p.c.mu.Lock()
		p.c.bytes += e.Size
		p.c.entries++
		p.c.mu.Unlock()
		defer p.c.shrink()
	}
	e.Key, e.Filled = key, time.Now().Unix()
	return p.c.writeIndex(e)
}

// writeIndex points e.Key at e, atomically.
func (c *Cache) writeIndex(e entry) error {
	b, _ := json.Marshal(e)
	idx, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "index-")
	if err != nil {
		return err
	}
	if _, err := idx.Write(b); err != nil {
		idx.Close()
		os.Remove(idx.Name())
		return err
	}
	if err := idx.Close(); err != nil {
		os.Remove(idx.Name())
		return err
	}
	return os.Rename(idx.Name(), filepath.Join(c.dir, "index", indexName(e.Key)))
}

// path is the file being filled, and whether it holds the whole body
// (false once a write failed or the fill was never begun).
func (p *pending) path() (string, bool) {
	if p.err != nil || p.f == nil {
		return "", false
	}
	return p.f.Name(), true
}

func (p *pending) abort() {
	if p.f != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}

func hexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// errCorrupt: a cached blob did not hash to its name.
var errCorrupt = errors.New("egress cache: blob does not match its digest")

// serve copies blob (e's, from lookup) to w: as it is when the file is
// the one last verified, else through serveVerified, remembering the file
// once it matched.
func (c *Cache) serve(w io.Writer, blob *os.File, e entry) (int64, error) {
	fi, err := blob.Stat()
	if err != nil {
		return 0, err
	}
	id, ok := idOf(fi)
	c.mu.Lock()
	known := ok && c.verified[e.SHA256] == id
	c.mu.Unlock()
	if known {
		pooled := buffers.Get().(*[bufSize]byte)
		defer buffers.Put(pooled)
		n, err := io.CopyBuffer(w, io.LimitReader(blob, e.Size), pooled[:])
		if err == nil && n != e.Size {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	}
	n, err := serveVerified(w, blob, e.SHA256)
	if err == nil && ok {
		// Re-read: a write while it was served changed the ctime.
		if fi2, err2 := blob.Stat(); err2 == nil {
			if id2, ok2 := idOf(fi2); ok2 && id2 == id {
				c.mu.Lock()
				c.verified[e.SHA256] = id
				c.mu.Unlock()
			}
		}
	}
	return n, err
}

// serveVerified copies blob to w, holding back the last read until the
// whole blob has hashed to want: a blob changed on disk is never
// delivered whole (the tool, promised its length, sees a cut body).
func serveVerified(w io.Writer, blob io.Reader, want string) (int64, error) {
	h := sha256.New()
	// Two pooled buffers take turns: one is read into while the other,
	// the held one, waits to be written — no copy, no garbage per fetch.
	b1, b2 := buffers.Get().(*[bufSize]byte), buffers.Get().(*[bufSize]byte)
	defer buffers.Put(b1)
	defer buffers.Put(b2)
	buf, held := b1[:], b2[:0]
	var n int64
	for {
		k, err := io.ReadFull(blob, buf)
		if k > 0 {
			if len(held) > 0 {
				if _, werr := w.Write(held); werr != nil {
					return n, werr
				}
				n += int64(len(held))
			}
			h.Write(buf[:k])
			buf, held = held[:cap(held)], buf[:k]
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if hex.EncodeToString(h.Sum(nil)) != want {
		return n, errCorrupt
	}
	k, err := w.Write(held)
	return n + int64(k), err
}

// bufSize is the unit a body is read, hashed and written in.
const bufSize = 64 << 10

// buffers are the proxy's body buffers, shared by every fetch.
var buffers = sync.Pool{New: func() any { return new([bufSize]byte) }}

// Cacheable reports whether a plain-HTTP GET of host/path?query names an
// object its registry never changes, so one fetch may serve every episode:
//   - Go module proxy objects of one version: …/@v/<version>.zip, .mod,
//     .info (never @v/list or @latest, which move);
//   - the checksum database's full tiles through the proxy:
//     /sumdb/<name>/tile/… without a ".p/" (partial tiles grow);
//   - npm tarballs …/-/<name>-<version>.tgz (never packuments);
//   - PyPI files under files.pythonhosted.org/packages/, crates under
//     static.crates.io/crates/.
func Cacheable(host, path, query string) bool {
	if query != "" {
		return false
	}
	if i := strings.LastIndex(path, "/@v/"); i > 0 {
		file := path[i+len("/@v/"):]
		for _, ext := range []string{".zip", ".mod", ".info"} {
			if v, ok := strings.CutSuffix(file, ext); ok && strings.HasPrefix(v, "v") && len(v) > 1 && !strings.Contains(v, "/") {
				return true
			}
		}
		return false
	}
	if rest, ok := strings.CutPrefix(path, "/sumdb/"); ok {
		_, tile, ok := strings.Cut(rest, "/tile/")
		return ok && !strings.Contains(tile, ".p/") && !strings.HasSuffix(tile, ".p")
	}
	if i := strings.Index(path, "/-/"); i > 0 && strings.HasSuffix(path, ".tgz") && !strings.Contains(path[i+3:], "/") {
		return true
	}
	switch host {
	case "files.pythonhosted.org":
		return strings.HasPrefix(path, "/packages/")
	case "static.crates.io":
		return strings.HasPrefix(path, "/crates/") && strings.HasSuffix(path, ".crate")
	}
	return false
}
