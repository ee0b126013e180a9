package egress

import (
	"strings"
	"testing"
)

// FuzzPackumentLearn: a registry's packument is read for its tarballs'
// integrities; whatever it holds, learning never panics, keeps only
// sha512 integrities under tarball paths, and stays within its bound.
func FuzzPackumentLearn(f *testing.F) {
	f.Add([]byte(`{"name":"pkg","versions":{"1.0.0":{"dist":{"tarball":"https://registry.npmjs.org/pkg/-/pkg-1.0.0.tgz","integrity":"sha512-AAAA sha1-BBBB"}}}}`))
	f.Add([]byte(`{"versions":{"1":{"dist":{"tarball":"::","integrity":"sha1-x"}},"2":null}}`))
	f.Add([]byte(`{"versions":[1,2,3]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var s npmSeen
		s.learn(body)
		if len(s.sri) > maxNPMSeen {
			t.Fatalf("%d integrities kept", len(s.sri))
		}
		for k, v := range s.sri {
			if !strings.HasPrefix(v, "sha512-") || k == "" {
				t.Fatalf("kept %q → %q", k, v)
			}
		}
	})
}
