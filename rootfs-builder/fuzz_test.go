package rootfs

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeSpec: the decoder never panics, and whatever it accepts passes
// Validate and survives a round trip through the shipped-spec rules.
func FuzzDecodeSpec(f *testing.F) {
	for _, p := range []string{"specs/minimal.json", "specs/worker.json", "specs/agents.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSpec(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted spec fails Validate: %v", err)
		}
	})
}

// FuzzDecodeManifest: a manifest accepted by the decoder re-encodes to the
// exact same bytes (canonical form is unique).
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"entries":[{"gid":0,"mode":"0755","path":"/","size":0,"type":"dir","uid":0}],"format":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		out, err := m.Encode()
		if err != nil || string(out) != string(data) {
			t.Fatalf("accepted manifest not canonical: %v", err)
		}
	})
}

// FuzzConfigRootfsPaths: every path accepted from a launcher configuration
// is absolute and clean, so eviction compares it with cache entries exactly.
func FuzzConfigRootfsPaths(f *testing.F) {
	f.Add([]byte(`{"rootfs": "/var/lib/autonomic-rootfs/worker", "rootfses": {"agents": {"path": "/var/cache/autonomic/rootfs/agents-00", "manifest_sha256": "00"}}}`))
	f.Add([]byte(`{"rootfses": {"a": {"path": "a/../b"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		paths, err := ConfigRootfsPaths(data)
		if err != nil {
			return
		}
		for _, p := range paths {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				t.Fatalf("accepted %q", p)
			}
		}
	})
}
