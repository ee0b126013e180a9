package egress

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"golang.org/x/crypto/blake2b"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
)

// A fill is filed in the shared cache only when its bytes match a digest
// the registry published (issue 22 #9): the kernel's own sha256 at fill
// time says only that the bytes did not change since, not that they are
// the registry's. The digest comes, in this order, from the base commit's
// lockfiles (Config.Lock), from what the registry said in this episode
// (an npm packument's dist.integrity; the Go checksum database's lookup,
// asked by the proxy itself) or from the object's own path (PyPI's
// /packages/ paths end in the file's BLAKE2b-256). An object with none is
// served to the episode but never filed for another.

// expected is the digest an object's bytes must have.
type expected struct {
	// sri is an npm integrity ("sha512-<base64>" or "sha1-<base64>").
	sri string
	// h1 is a Go checksum ("h1:<base64>") of a module zip (zip true) or
	// of a go.mod.
	h1  string
	zip bool
	// blake is PyPI's BLAKE2b-256, hex.
	blake string
	// what names the object in a refusal's reason.
	what string
}

// hasher is the running hash the stream feeds (nil for h1 of a zip,
// which is computed over the file once it is whole).
func (x *expected) hasher() hash.Hash {
	switch {
	case strings.HasPrefix(x.sri, "sha512-"):
		return sha512.New()
	case strings.HasPrefix(x.sri, "sha1-"):
		return sha1.New()
	case x.blake != "":
		h, _ := blake2b.New256(nil)
		return h
	case x.h1 != "" && !x.zip:
		return &modHash{}
	}
	return nil
}

// matches reports whether the stream's hash h (from hasher) or, for a
// zip, the whole body in file is the expected digest.
func (x *expected) matches(h hash.Hash, file string) bool {
	switch {
	case x.sri != "":
		_, b64, _ := strings.Cut(x.sri, "-")
		return base64.StdEncoding.EncodeToString(h.Sum(nil)) == b64
	case x.blake != "":
		return hex.EncodeToString(h.Sum(nil)) == x.blake
	case x.h1 != "" && !x.zip:
		got, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(h.(*modHash).b.Bytes())), nil
		})
		return err == nil && got == x.h1
	case x.h1 != "" && x.zip:
		got, err := dirhash.HashZip(file, dirhash.Hash1)
		return err == nil && got == x.h1
	}
	return false
}

// modHash keeps a go.mod (small: bounded by maxModBytes) to hash it as
// dirhash does.
type modHash struct{ b bytes.Buffer }

const maxModBytes = 4 << 20

func (m *modHash) Write(p []byte) (int, error) {
	if m.b.Len()+len(p) <= maxModBytes {
		m.b.Write(p)
	}
	return len(p), nil
}
func (m *modHash) Sum(b []byte) []byte { return append(b, m.b.Bytes()...) }
func (m *modHash) Reset()              { m.b.Reset() }
func (m *modHash) Size() int           { return 0 }
func (m *modHash) BlockSize() int      { return 1 }

// npmSeen are the tarball integrities the registry's packuments gave this
// episode, by host+path of the tarball.
type npmSeen struct {
	mu  sync.Mutex
	sri map[string]string
}

// maxPackument bounds a packument read for its integrities; maxNPMSeen the
// integrities kept.
const (
	maxPackument = 32 << 20
	maxNPMSeen   = 200000
)

// learn reads a packument's versions.*.dist {tarball, integrity}.
func (s *npmSeen) learn(body []byte) {
	if !gjson.ValidBytes(body) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sri == nil {
		s.sri = map[string]string{}
	}
	gjson.GetBytes(body, "versions").ForEach(func(_, v gjson.Result) bool {
		tb, sri := v.Get("dist.tarball").String(), v.Get("dist.integrity").String()
		u, err := url.Parse(tb)
		if err != nil || u.Host == "" || !strings.HasPrefix(sri, "sha512-") || len(s.sri) >= maxNPMSeen {
			return len(s.sri) < maxNPMSeen
		}
		s.sri[strings.ToLower(u.Host)+u.EscapedPath()] = strongestSRI(sri)
		return true
	})
}

func (s *npmSeen) get(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sri[key]
}

func strongestSRI(sri string) string {
	for _, h := range strings.Fields(sri) {
		if strings.HasPrefix(h, "sha512-") {
			return h
		}
	}
	return strings.Fields(sri)[0]
}

// isPackument: an npm registry path naming a package's metadata (not a
// tarball): /name or /@scope%2fname or /@scope/name.
func isPackument(path string) bool {
	return path != "/" && !strings.Contains(path, "/-/") && !strings.HasPrefix(path, "/-/")
}

// expect is the digest q's object must match before it is filed, or nil
// (served, not filed). It may ask the Go checksum database (through the
// same pinned, verified client) for a module version's hashes.
func (p *Proxy) expect(ctx context.Context, q request) *expected {
	kind := p.cfg.Registries[q.host]
	if m := goObjectRE.FindStringSubmatch(strings.TrimPrefix(q.path, "/cached-only")); m != nil && kind != GoSumDB {
		mod, err1 := module.UnescapePath(m[1])
		ver, err2 := module.UnescapeVersion(m[2])
		if err1 != nil || err2 != nil {
			return nil
		}
		zip := strings.HasSuffix(q.path, ".zip")
		if !zip && !strings.HasSuffix(q.path, ".mod") {
			return nil // .info: no digest is published
		}
		what := mod + "@" + ver
		if p.cfg.Lock != nil {
			get := p.cfg.Lock.GoMod
			if zip {
				get = p.cfg.Lock.GoZip
			}
			if h, ok := get(mod, ver); ok {
				return &expected{h1: h, zip: zip, what: what}
			}
		}
		if h := p.sumLookup(ctx, q.host, m[1], m[2], zip); h != "" {
			return &expected{h1: h, zip: zip, what: what}
		}
		return nil
	}
	if strings.HasSuffix(q.path, ".tgz") {
		if pin, ok := p.cfg.Lock.NPMTarball(q.path); ok {
			return &expected{sri: pin.Integrity, what: pin.Name + "@" + pin.Version}
		}
		if sri := p.npm.get(q.host + q.path); sri != "" {
			return &expected{sri: sri, what: q.path}
		}
		return nil
	}
	if q.host == "files.pythonhosted.org" {
		// /packages/ab/cd/<60 hex>/<file>: the file's BLAKE2b-256.
		parts := strings.Split(q.path, "/")
		if len(parts) == 6 && parts[1] == "packages" && len(parts[2]) == 2 && len(parts[3]) == 2 && len(parts[4]) == 60 {
			h := parts[2] + parts[3] + parts[4]
			if _, err := hex.DecodeString(h); err == nil {
				return &expected{blake: h, what: parts[5]}
			}
		}
	}
	return nil
}

// sumLookup asks the checksum database, through the mirror's /sumdb/
// endpoint on host, for module@version's h1 (escaped path and version),
// bounded to 64 KiB; "" when it cannot say. The answer's signed note is
// not checked here: the connection is verified HTTPS to the mirror, and
// the go command checks the note itself.
func (p *Proxy) sumLookup(ctx context.Context, host, mod, ver string, zip bool) string {
	u := "https://" + host + "/sumdb/sum.golang.org/lookup/" + mod + "@" + ver
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ""
	}
	req.Header.Set("User-Agent", cacheableAgent)
	resp, err := p.client(host).Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	umod, err1 := module.UnescapePath(mod)
	uver, err2 := module.UnescapeVersion(ver)
	if err1 != nil || err2 != nil {
		return ""
	}
	want := uver
	if !zip {
		want += "/go.mod"
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == umod && f[1] == want && strings.HasPrefix(f[2], "h1:") {
			return f[2]
		}
	}
	return ""
}
