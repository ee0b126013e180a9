package egress

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCacheBounded: the shared cache keeps within its bytes and entries,
// evicting the least recently used (a hit renews an object); a fill is not
// begun when the file system is below the reserve (the fetch is served, not
// kept); and what an earlier kernel left in tmp/ is swept at open.
func TestCacheBounded(t *testing.T) {
	s := openStore(t)
	// Each object its own bytes (the cache is content-addressed).
	zipOf := func(path string) []byte {
		v := path[strings.LastIndex(path, "/v")+1:]
		v = strings.TrimSuffix(v, ".zip")
		return modZip(t, "golang.org/x/m", v, 100<<10)
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if mv, ok := strings.CutPrefix(r.URL.Path, "/sumdb/sum.golang.org/lookup/"); ok {
			_, v, _ := strings.Cut(mv, "@")
			lookup(w, r, zipOf("/"+v+".zip"))
			return
		}
		b := zipOf(r.URL.Path)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	body := zipOf("/v1.0.0.zip")
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o700)
	os.WriteFile(filepath.Join(dir, "tmp", "fetch-left"), bytes.Repeat([]byte("x"), 1<<20), 0o600)
	cache, err := OpenCacheWith(dir, CacheBounds{MaxBytes: 350 << 10, MaxEntries: 10, ReserveBytes: 0})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Fatalf("tmp/ not swept at open: %d entries", len(left))
	}
	cfg := up.config("example.com")
	cfg.Cache = cache
	r := start(t, s, cfg)
	c := client(r.url)
	fetch := func(v int) {
		t.Helper()
		u := fmt.Sprintf("http://example.com/golang.org/x/m/@v/v1.0.%d.zip", v)
		if code, got, _ := get(t, c, u); code != 200 || len(got) != len(body) {
			t.Fatalf("%s: %d", u, code)
		}
		// The body is filed (and the cache shrunk) after the tool has
		// it: wait for the handler to end before looking.
		r.p.wg.Wait()
	}
	count := func(v int) int { return up.count(fmt.Sprintf("/golang.org/x/m/@v/v1.0.%d.zip", v)) }
	for v := range 3 {
		fetch(v)
	}
	fetch(0) // a hit: v1.0.0 is now the most recently used
	if count(0) != 1 {
		t.Fatalf("v1.0.0 fetched upstream %d times, want 1 (cached)", count(0))
	}
	fetch(3) // over 350 KiB: the least recently used (v1.0.1) goes
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	var total int64
	for _, b := range blobs {
		fi, _ := b.Info()
		total += fi.Size()
	}
	if total > 350<<10 || len(blobs) > 3 {
		t.Fatalf("cache holds %d bytes in %d blobs over a 350 KiB cap", total, len(blobs))
	}
	fetch(1)
	fetch(0)
	if count(1) != 2 || count(0) != 1 {
		t.Fatalf("upstream fetches: v1.0.1 %d (want 2: evicted), v1.0.0 %d (want 1: kept, recently used)", count(1), count(0))
	}
	// Below the reserve nothing is kept: every fetch goes upstream.
	full, err := OpenCacheWith(t.TempDir(), CacheBounds{MaxBytes: 1 << 30, MaxEntries: 10, ReserveBytes: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cache = full
	r2 := start(t, s, cfg)
	c2 := client(r2.url)
	for range 2 {
		if code, _, _ := get(t, c2, "http://example.com/golang.org/x/m/@v/v9.0.0.zip"); code != 200 {
			t.Fatal(code)
		}
		r2.p.wg.Wait()
	}
	if n := up.count("/golang.org/x/m/@v/v9.0.0.zip"); n != 2 {
		t.Fatalf("below the reserve: upstream served %d times, want 2 (nothing kept)", n)
	}
	// The entry cap.
	few, err := OpenCacheWith(t.TempDir(), CacheBounds{MaxBytes: 1 << 30, MaxEntries: 2, ReserveBytes: 0})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cache = few
	r3 := start(t, s, cfg)
	c3 := client(r3.url)
	for v := range 4 {
		get(t, c3, fmt.Sprintf("http://example.com/golang.org/x/e/@v/v1.0.%d.zip", v))
		r3.p.wg.Wait()
	}
	if blobs, _ := os.ReadDir(filepath.Join(few.dir, "blobs")); len(blobs) > 2 {
		t.Fatalf("%d blobs over an entry cap of 2", len(blobs))
	}
}
