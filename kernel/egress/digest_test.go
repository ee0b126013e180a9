package egress

import (
	"bytes"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/lockfile"
	"github.com/autonomic-kernel/autonomic/store"
	"golang.org/x/crypto/blake2b"
)

// TestCacheVerifiedAgainstRegistryDigest: what the shared cache files is
// what the registry published, not merely what the kernel saw at fill
// time. A module zip whose bytes differ from the checksum database's h1
// (asked by the proxy), or from the base lockfile's, and an npm tarball
// whose bytes differ from the integrity its packument gave, reach the
// tool cut short (it never holds the whole object), are recorded as
// digest_mismatch and are not filed; once the registry serves the right
// bytes they are filed and a second episode is served from the cache.
// An object no digest speaks for is served but never filed.
func TestCacheVerifiedAgainstRegistryDigest(t *testing.T) {
	s := openStore(t)
	good := modZip(t, "golang.org/x/m", "v1.0.0", 300<<10)
	evil := modZip(t, "golang.org/x/m", "v1.0.0", 300<<10)
	evil[len(evil)/2] ^= 1 // same length, one bit flipped inside a stored file
	tgz, badTgz := bytes.Repeat([]byte("tarball "), 20000), bytes.Repeat([]byte("tarball!"), 20000)
	sum := sha512.Sum512(tgz)
	integrity := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	var tampered atomic.Bool
	tampered.Store(true)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/sumdb/sum.golang.org/lookup/"):
			lookup(w, r, good) // the database speaks for the good bytes
		case strings.HasSuffix(p, ".zip"):
			// With a length: a tool that got every byte has the object.
			b := map[bool][]byte{true: evil, false: good}[tampered.Load()]
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		case p == "/pkg":
			io.WriteString(w, `{"name":"pkg","versions":{"1.0.0":{"dist":{"tarball":"https://example.com/pkg/-/pkg-1.0.0.tgz","integrity":"`+integrity+`"}}}}`)
		case strings.HasSuffix(p, ".tgz"):
			b := map[bool][]byte{true: badTgz, false: tgz}[tampered.Load()]
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	})
	dir := t.TempDir()
	cache, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := up.config("example.com")
	cfg.Cache = cache
	cfg.Registries = map[string]Registry{"example.com": NPM}
	blobs := func() int {
		e, _ := os.ReadDir(filepath.Join(dir, "blobs"))
		return len(e)
	}
	// whole fetches u and reports whether the tool got the whole body.
	whole := func(c *http.Client, u string, want []byte) bool {
		resp, err := c.Get(u)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return err == nil && resp.StatusCode == 200 && bytes.Equal(b, want)
	}
	const zipURL, tgzURL = "http://example.com/golang.org/x/m/@v/v1.0.0.zip", "http://example.com/pkg/-/pkg-1.0.0.tgz"

	a := start(t, s, cfg)
	c := client(a.url)
	if whole(c, zipURL, evil) {
		t.Error("a zip that does not match the checksum database reached the tool whole")
	}
	if code, _, _ := get(t, c, "http://example.com/pkg"); code != 200 {
		t.Fatalf("packument: %d", code)
	}
	if whole(c, tgzURL, badTgz) {
		t.Error("a tarball that does not match its packument's integrity reached the tool whole")
	}
	a.p.wg.Wait()
	if n := blobs(); n != 0 {
		t.Fatalf("%d objects filed that do not match the registry's digest", n)
	}
	var mismatches []string
	for _, f := range a.ledger(t, s) {
		if f.Code == "digest_mismatch" {
			mismatches = append(mismatches, f.Path)
		}
	}
	if len(mismatches) != 2 || !strings.Contains(a.refusals()[0].Reason, "do not match") {
		t.Errorf("digest_mismatch rows %q, signals %+v", mismatches, a.refusals())
	}

	// The base's go.sum outranks the database: a lock for other bytes
	// refuses the ones the database speaks for.
	other := cfg
	other.Lock, _ = lockfile.Parse("go.sum", []byte("golang.org/x/m v1.0.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n"))
	tampered.Store(false)
	l := start(t, s, other)
	if whole(client(l.url), zipURL, good) {
		t.Error("a zip the base's go.sum does not speak for reached the tool whole")
	}
	l.p.wg.Wait()
	if n := blobs(); n != 0 {
		t.Fatalf("%d objects filed against the lockfile's digest", n)
	}

	// The registry's bytes: served whole and filed; the next episode is
	// served from the cache.
	b := start(t, s, cfg)
	c = client(b.url)
	if !whole(c, zipURL, good) {
		t.Fatal("the good zip was not served")
	}
	get(t, c, "http://example.com/pkg")
	if !whole(c, tgzURL, tgz) {
		t.Fatal("the good tarball was not served")
	}
	b.p.wg.Wait()
	if n := blobs(); n != 2 {
		t.Fatalf("%d objects filed, want the zip and the tarball", n)
	}
	before := up.count("/golang.org/x/m/@v/v1.0.0.zip")
	d := start(t, s, cfg)
	if !whole(client(d.url), zipURL, good) || up.count("/golang.org/x/m/@v/v1.0.0.zip") != before {
		t.Error("the verified zip was not served from the cache")
	}

	// No packument seen in this episode: nothing speaks for the tarball,
	// so it is served and not filed.
	os.RemoveAll(filepath.Join(dir, "blobs"))
	os.MkdirAll(filepath.Join(dir, "blobs"), 0o700)
	cache2, _ := OpenCache(t.TempDir())
	bare := cfg
	bare.Cache = cache2
	e := start(t, s, bare)
	if !whole(client(e.url), tgzURL, tgz) {
		t.Fatal("an unverifiable tarball was not served")
	}
	e.p.wg.Wait()
	for _, f := range e.ledger(t, s) {
		if f.Outcome != store.EgressFetched {
			t.Errorf("row %+v", f)
		}
	}
	if _, _, ok := cache2.lookup("example.com/pkg/-/pkg-1.0.0.tgz"); ok {
		t.Error("an object no digest speaks for was filed")
	}
}

// TestPyPIPathDigest: a files.pythonhosted.org object's path names its
// BLAKE2b-256, which is what its fill must match.
func TestPyPIPathDigest(t *testing.T) {
	body := []byte("wheel bytes")
	sum := blake2b.Sum256(body)
	h := hex.EncodeToString(sum[:])
	p := &Proxy{cfg: Config{Registries: DefaultRegistries()}}
	x := p.expect(t.Context(), request{host: "files.pythonhosted.org", path: "/packages/" + h[:2] + "/" + h[2:4] + "/" + h[4:] + "/w-1.0-py3-none-any.whl"})
	if x == nil || x.blake != h {
		t.Fatalf("expected %+v", x)
	}
	for in, want := range map[string]bool{string(body): true, "wheel bytez": false} {
		hh := x.hasher()
		hh.Write([]byte(in))
		if x.matches(hh, "") != want {
			t.Errorf("%q matches = %v", in, !want)
		}
	}
	if x := p.expect(t.Context(), request{host: "files.pythonhosted.org", path: "/packages/xx/w.whl"}); x != nil {
		t.Errorf("a path without a digest: %+v", x)
	}
}

// TestCachedObjectTakenDown: a cached object older than the cache's
// revalidation age is served only after the registry says it still
// serves it (a HEAD; the entry renewed); once the registry answers 404 —
// a takedown — the tool gets the 404 and the cache forgets the object.
func TestCachedObjectTakenDown(t *testing.T) {
	s := openStore(t)
	body := modZip(t, "golang.org/x/m", "v1.0.0", 64<<10)
	var gone atomic.Bool
	var heads atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/sumdb/") {
			lookup(w, r, body)
			return
		}
		if r.Method == http.MethodHead {
			heads.Add(1)
		}
		if gone.Load() {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	cache, err := OpenCacheWith(t.TempDir(), CacheBounds{MaxBytes: 1 << 30, MaxEntries: 100, Revalidate: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := up.config("example.com")
	cfg.Cache = cache
	r := start(t, s, cfg)
	const u = "http://example.com/golang.org/x/m/@v/v1.0.0.zip"
	fetch := func() (int, []byte) {
		code, b, _ := get(t, client(r.url), u)
		r.p.wg.Wait()
		return code, b
	}
	if code, b := fetch(); code != 200 || !bytes.Equal(b, body) {
		t.Fatalf("fill: %d", code)
	}
	time.Sleep(5 * time.Millisecond)
	if code, b := fetch(); code != 200 || !bytes.Equal(b, body) || heads.Load() != 1 || up.count("/golang.org/x/m/@v/v1.0.0.zip") != 2 {
		t.Fatalf("revalidated hit: %d, %d HEADs, %d requests for the path", code, heads.Load(), up.count("/golang.org/x/m/@v/v1.0.0.zip"))
	}
	gone.Store(true)
	time.Sleep(5 * time.Millisecond)
	if code, _ := fetch(); code != http.StatusNotFound {
		t.Fatalf("after the takedown: %d, want 404", code)
	}
	if _, _, ok := cache.lookup("example.com/golang.org/x/m/@v/v1.0.0.zip"); ok {
		t.Fatal("the cache still holds an object the registry took down")
	}
}
