package cgstat

import (
	"strings"
	"testing"
)

// FuzzKey: for any file content and key, Key never panics, and what it
// finds is the value of a "key value" line the content really has — the
// first one — never a line whose key merely starts with it ("frozen_x"
// for "frozen"), and never a key with a space in it.
func FuzzKey(f *testing.F) {
	f.Add("populated 1\nfrozen 0\n", "populated")
	f.Add("usage_usec 10\nuser_usec 7\nsystem_usec 3\n", "user_usec")
	f.Add("frozen_x 1\nfrozen 0", "frozen")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, content, key string) {
		v, ok := Key(content, key)
		// The first line whose text before its first space is key.
		for _, line := range strings.Split(content, "\n") {
			if k, val, cut := strings.Cut(line, " "); cut && k == key {
				if !ok || val != v {
					t.Fatalf("Key(%q) = %q, %v; the first such line says %q", key, v, ok, val)
				}
				return
			}
		}
		if ok {
			t.Fatalf("Key(%q) = %q from no line of %q", key, v, content)
		}
	})
}
