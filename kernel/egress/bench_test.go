package egress

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCachedFetch: one cached module zip served through the proxy
// (HTTP over loopback, the byte reservation and the ledger row in
// PostgreSQL, the digest check) against reading the same blob from the
// cache directory directly, side by side, for a small and a large zip.
// The ratio is bounded below by what the proxy must do and a read does
// not: an HTTP round trip, a ledger row (batched behind the response: one
// commit for the rows that queued meanwhile) and the SHA-256 of every
// byte (about 1 GB/s here); BenchmarkGoModDownloadCached is what a tool
// sees.
func BenchmarkCachedFetch(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 20} {
		body := modZip(b, "golang.org/x/m", "v1.0.0", size)
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s := openStore(b)
			up := newUpstream(b, func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/sumdb/") {
					lookup(w, r, body)
					return
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				w.Write(body)
			})
			dir := b.TempDir()
			cache, _ := OpenCache(dir)
			cfg := up.config("example.com")
			cfg.Cache, cfg.MaxBytes = cache, 1<<50
			r := start(b, s, cfg)
			const u = "http://example.com/golang.org/x/m/@v/v1.0.0.zip"
			// Kept alive, as go's and npm's clients keep their proxy
			// connection: a new connection per fetch measures accept().
			// The ledger rows are written behind the fetches, batched.
			pu, _ := url.Parse(r.url)
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 30 * time.Second}
			fetch := func() {
				resp, err := c.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != int64(len(body)) {
					b.Fatalf("%d bytes", n)
				}
			}
			fetch()       // fills the cache
			r.p.wg.Wait() // the handler files the body after the tool has it
			e, f, ok := cache.lookup("example.com/golang.org/x/m/@v/v1.0.0.zip")
			if !ok {
				b.Fatal("not cached")
			}
			f.Close()
			blob := filepath.Join(dir, "blobs", e.SHA256)
			b.Run("proxy", func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					fetch()
				}
			})
			b.Run("direct", func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					got, err := os.ReadFile(blob)
					if err != nil || len(got) != size {
						b.Fatal(err)
					}
				}
			})
			if up.hits.Load() != 1 {
				b.Fatalf("the upstream served %d requests", up.hits.Load())
			}
		})
	}
}

// BenchmarkGoModDownloadCached: what a tool sees. go mod download of one
// module into an empty module cache, through the proxy with the module in
// its cache, against GOPROXY=file:// reading the same files from a local
// directory. Needs the real module proxy once, to fill the cache.
func BenchmarkGoModDownloadCached(b *testing.B) {
	s := openStore(b)
	cache, _ := OpenCache(b.TempDir())
	cfg := Config{Allow: registries, Cache: cache, MaxBytes: 1 << 50, AllowedNets: benchNets(b)}
	r := start(b, s, cfg)
	env := func(dir, goproxy string) []string {
		// The module alone: the checksum database's lookups are mutable,
		// never cached, and would measure the network.
		return append(goEnv(dir, goproxy), "PATH="+os.Getenv("PATH"), "HOME="+dir, "HTTP_PROXY="+r.url, "NO_PROXY=", "GOSUMDB=off")
	}
	run := func(goproxy string) {
		dir, err := os.MkdirTemp("", "egress-bench-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "mod", "download", goModule)
		cmd.Dir, cmd.Env = dir, env(dir, goproxy)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	// Fill the proxy's cache, and a local file proxy with the same files.
	local := b.TempDir()
	cmd := exec.Command("go", "mod", "download", goModule)
	cmd.Dir, cmd.Env = local, env(local, "http://proxy.golang.org")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	files := "file://" + filepath.Join(local, "modcache", "cache", "download")
	b.Run("proxy", func(b *testing.B) {
		for b.Loop() {
			run("http://proxy.golang.org")
		}
	})
	b.Run("file", func(b *testing.B) {
		for b.Loop() {
			run(files)
		}
	})
}
