package authority

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecodeLease: a lease document from the store, whatever its bytes,
// decodes to a capability or to an error — never a panic — and a decoded
// capability written back and read again is the same capability (its
// encoding is a fixed point), so the commit horizon decides on exactly
// what the kernel minted.
func FuzzDecodeLease(f *testing.F) {
	wide, _ := Compile(Spec{MaxClass: 3, Grants: []Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"src/**", "README.md"}, Forbid: []string{"src/secret/**"},
		Budget: Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 30}})
	doc, err := EncodeLease(wide)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(doc))
	f.Add([]byte(`{"effects":[{"kind":"git_commit","target_id":"repo","max_class":3}]}`))
	f.Add([]byte(`{"max_class":4,"allow":[["**"],["a/**"]],"forbid":["secrets[/**"]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeLease(json.RawMessage(raw))
		if err != nil {
			return
		}
		once, err := EncodeLease(c)
		if err != nil {
			t.Fatalf("a decoded lease does not encode: %v", err)
		}
		again, err := DecodeLease(once)
		if err != nil {
			t.Fatalf("an encoded lease does not decode: %v\n%s", err, once)
		}
		twice, err := EncodeLease(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s (%v)", once, twice, err)
		}
	})
}
