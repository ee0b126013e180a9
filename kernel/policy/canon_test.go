package policy

import (
	"testing"

	"github.com/gowebpki/jcs"
)

func canonical(t testing.TB, raw []byte) []byte {
	t.Helper()
	c, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
