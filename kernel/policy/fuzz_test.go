package policy

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// fuzzKey is fixed so the seed corpus in testdata/fuzz holds policies that
// verify; a fuzzer cannot forge signatures, so mutations of those seeds
// reach the canonicaliser and, through whitespace-only changes, the
// document decoder.
func fuzzKey() (ed25519.PrivateKey, Keys) {
	seed := sha256.Sum256([]byte("autonomic policy fuzz key"))
	priv := ed25519.NewKeyFromSeed(seed[:])
	return priv, Keys{"fuzz": priv.Public().(ed25519.PublicKey)}
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("untyped refusal %T: %v", err, err)
	}
	if w := protocol.AsWire(err); !protocol.Known(w.Code) || w.Code == protocol.CodeInternal {
		t.Fatalf("refusal without a catalogue code: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	priv, keys := fuzzKey()
	good, err := Sign(priv, "fuzz", exampleDoc())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Verify(keys, b)
		if err != nil {
			if p != nil {
				t.Fatal("refused but returned a policy")
			}
			checkRefusal(t, err)
			return
		}
		// Admitted: signing the decoded document again must give the same
		// digest, or the signed bytes and the used policy differ.
		again, err := Sign(priv, "fuzz", p.Document)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Verify(keys, again)
		if err != nil || q.Digest != p.Digest {
			t.Fatalf("re-signed policy: %v, digest %s vs %s", err, q.Digest, p.Digest)
		}
	})
}

func FuzzDecodeDocument(f *testing.F) {
	raw, _ := json.Marshal(exampleDoc())
	f.Add(raw)
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, _, err := decodeDocument(b)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		// What decoded re-encodes to something that decodes identically.
		again, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		doc2, _, err := decodeDocument(again)
		if err != nil || !reflect.DeepEqual(doc, doc2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, doc, doc2)
		}
	})
}
