package egress

import (
	"errors"
	"io"
	"strings"
)

// maxHello bounds the first TLS record the proxy buffers before deciding.
const maxHello = 16 << 10

var (
	errNotHello = errors.New("the first bytes in the tunnel are not a TLS ClientHello")
	// errHungUp: the tool closed the tunnel before sending a byte.
	errHungUp = errors.New("the tunnel was closed before its first byte")
	errECH    = errors.New("encrypted ClientHello is refused: the proxy must read the name")
	errNoSNI  = errors.New("the ClientHello names no server")
)

// readHello reads the first TLS record from r and returns it whole with
// the SNI it names. Anything but one handshake record holding a complete
// ClientHello is refused, and so is ECH: the name the tool connects to must
// be the one the proxy admitted, readable before any key is used.
func readHello(r io.Reader) (record []byte, sni string, err error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr); err == io.EOF {
		return nil, "", errHungUp // nothing at all: ReadFull's EOF
	} else if err != nil {
		return nil, "", errNotHello
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if hdr[0] != 0x16 || hdr[1] != 3 || n < 4 || n > maxHello {
		return nil, "", errNotHello
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, "", errNotHello
	}
	sni, err = parseHello(body)
	return append(hdr, body...), sni, err
}

// parseHello reads a handshake message that must be one whole ClientHello.
func parseHello(b []byte) (string, error) {
	c := cursor(b)
	typ, _ := c.u8()
	ln, ok := c.u24()
	if typ != 1 || !ok || ln != len(c) {
		return "", errNotHello
	}
	if !c.skip(2+32) || !c.vec8skip() || !c.vec16skip() || !c.vec8skip() {
		return "", errNotHello
	}
	ext, ok := c.vec16()
	if !ok || len(c) != 0 {
		return "", errNotHello
	}
	sni := ""
	for len(ext) > 0 {
		typ, ok1 := ext.u16()
		data, ok2 := ext.vec16()
		if !ok1 || !ok2 {
			return "", errNotHello
		}
		switch typ {
		case 0xfe0d: // encrypted_client_hello
			return "", errECH
		case 0: // server_name
			if sni != "" {
				return "", errNotHello
			}
			list, ok := data.vec16()
			if !ok || len(data) != 0 {
				return "", errNotHello
			}
			kind, _ := list.u8()
			name, ok := list.vec16()
			if !ok || kind != 0 || len(list) != 0 || len(name) == 0 {
				return "", errNotHello
			}
			sni = strings.ToLower(string(name))
		}
	}
	if sni == "" {
		return "", errNoSNI
	}
	return sni, nil
}

// cursor reads big-endian TLS wire fields; every read is bounds-checked.
type cursor []byte

func (c *cursor) skip(n int) bool {
	if len(*c) < n {
		return false
	}
	*c = (*c)[n:]
	return true
}

func (c *cursor) u8() (int, bool) {
	if len(*c) < 1 {
		return 0, false
	}
	v := int((*c)[0])
	*c = (*c)[1:]
	return v, true
}

func (c *cursor) u16() (int, bool) {
	if len(*c) < 2 {
		return 0, false
	}
	v := int((*c)[0])<<8 | int((*c)[1])
	*c = (*c)[2:]
	return v, true
}

func (c *cursor) u24() (int, bool) {
	if len(*c) < 3 {
		return 0, false
	}
	v := int((*c)[0])<<16 | int((*c)[1])<<8 | int((*c)[2])
	*c = (*c)[3:]
	return v, true
}

func (c *cursor) vec(n int) (cursor, bool) {
	if n < 0 || len(*c) < n {
		return nil, false
	}
	v := (*c)[:n]
	*c = (*c)[n:]
	return v, true
}

func (c *cursor) vec8skip() bool {
	n, ok := c.u8()
	return ok && c.skip(n)
}

func (c *cursor) vec16skip() bool {
	n, ok := c.u16()
	return ok && c.skip(n)
}

func (c *cursor) vec16() (cursor, bool) {
	n, ok := c.u16()
	if !ok {
		return nil, false
	}
	return c.vec(n)
}
