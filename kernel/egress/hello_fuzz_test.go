package egress

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzReadHello: any first record yields a name only if it is one whole
// ClientHello without ECH; the parser never panics, never reads past the
// record, and a name it returns appears in the record's bytes.
func FuzzReadHello(f *testing.F) {
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, sni, err := readHello(bytes.NewReader(b))
		if err != nil {
			if sni != "" && !errors.Is(err, errECH) {
				t.Fatalf("name %q with error %v", sni, err)
			}
			return
		}
		if !bytes.HasPrefix(b, rec) || sni == "" || !bytes.Contains(bytes.ToLower(rec), []byte(sni)) {
			t.Fatalf("record %x name %q", rec, sni)
		}
	})
}
