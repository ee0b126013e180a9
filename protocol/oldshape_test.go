package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// oldCheckShape is CheckShape as it was before its scanner also served
// Admit and DecodeStrict, verbatim: the shape half of the oracle.
func oldCheckShape(b []byte, lim Limits) error {
	s := oldShapeScanner{b: b, lim: lim}
	return s.run()
}

type oldShapeLevel struct {
	object bool
	index  int
	key    []byte // the member being read, as decoded
	hasKey bool
	keys   [][]byte // keys seen so far, while the object is small
	set    map[string]struct{}
}

type oldShapeScanner struct {
	b     []byte
	i     int
	lim   Limits
	stack []oldShapeLevel
	nodes int
}

func (s *oldShapeScanner) run() error {
	s.ws()
	if s.i == len(s.b) {
		return s.malformed("unexpected end of JSON input")
	}
	if s.b[s.i] != '{' {
		return Errorf(CodeMalformedJSON, "top level is not an object")
	}
	s.i++
	s.nodes = 1
	s.push(true)
	open := true // just after '{' or '[': a close is allowed at once
	for len(s.stack) > 0 {
		top := &s.stack[len(s.stack)-1]
		s.ws()
		if s.i == len(s.b) {
			return s.malformed("unexpected end of JSON input")
		}
		c := s.b[s.i]
		if open && (c == '}' && top.object || c == ']' && !top.object) {
			s.i++
			s.pop()
			if err := s.afterValue(); err != nil {
				return err
			}
			open = false
			continue
		}
		if top.object {
			if c != '"' {
				return s.malformed("looking for beginning of object key string")
			}
			key, err := s.key()
			if err != nil {
				return err
			}
			dup := top.seen(key)
			top.key, top.hasKey = key, true
			if dup {
				return Errorf(CodeDuplicateKey, "%w", s.shapeError(""))
			}
			s.ws()
			if s.i == len(s.b) {
				return s.malformed("unexpected end of JSON input")
			}
			if s.b[s.i] != ':' {
				return s.malformed("after object key")
			}
			s.i++
			s.ws()
			if s.i == len(s.b) {
				return s.malformed("unexpected end of JSON input")
			}
			c = s.b[s.i]
		}
		// A value. The token is checked before it is counted, as the
		// Token walk does, so a malformed token is malformed_json even
		// past the node limit.
		if c == '{' || c == '[' {
			s.i++
			if s.nodes++; s.nodes > s.lim.MaxNodes {
				return E(CodeTooManyNodes)
			}
			if len(s.stack)+1 > s.lim.MaxDepth {
				return Errorf(CodeTooDeep, "%w", s.shapeError("nested deeper than the limit"))
			}
			s.push(c == '{')
			open = true
			continue
		}
		if err := s.scalar(c); err != nil {
			return err
		}
		if s.nodes++; s.nodes > s.lim.MaxNodes {
			return E(CodeTooManyNodes)
		}
		if err := s.afterValue(); err != nil {
			return err
		}
		open = false
	}
	s.ws()
	if s.i != len(s.b) {
		return E(CodeTrailingData)
	}
	return nil
}

// afterValue consumes what may follow a value inside the enclosing
// container: a comma (the loop then reads the next member), or the close,
// which ends that container too. Closes cascade until a comma or the end
// of the top-level object.
func (s *oldShapeScanner) afterValue() error {
	for len(s.stack) > 0 {
		top := &s.stack[len(s.stack)-1]
		s.ws()
		if s.i == len(s.b) {
			return s.malformed("unexpected end of JSON input")
		}
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			if !top.object {
				top.index++
			}
			return nil
		case c == '}' && top.object, c == ']' && !top.object:
			s.i++
			s.pop()
		default:
			return s.malformed("after a value")
		}
	}
	return nil
}

func (s *oldShapeScanner) push(object bool) {
	if n := len(s.stack); n < cap(s.stack) {
		s.stack = s.stack[:n+1]
		l := &s.stack[n]
		l.object, l.index, l.key, l.hasKey, l.keys = object, 0, nil, false, l.keys[:0]
		clear(l.set)
		return
	}
	if s.stack == nil {
		s.stack = make([]oldShapeLevel, 0, 8)
	}
	s.stack = append(s.stack, oldShapeLevel{object: object, keys: make([][]byte, 0, smallObject)})
}

func (s *oldShapeScanner) pop() { s.stack = s.stack[:len(s.stack)-1] }

// seen records key in the object and reports whether it was there.
func (l *oldShapeLevel) seen(key []byte) bool {
	if len(l.set) == 0 { // still small
		for _, k := range l.keys {
			if bytes.Equal(k, key) {
				return true
			}
		}
		if len(l.keys) < smallObject {
			l.keys = append(l.keys, key)
			return false
		}
		if l.set == nil {
			l.set = make(map[string]struct{}, 2*smallObject)
		}
		for _, k := range l.keys {
			l.set[string(k)] = struct{}{}
		}
	}
	if _, dup := l.set[string(key)]; dup {
		return true
	}
	l.set[string(key)] = struct{}{}
	return false
}

// key scans an object key and returns it as encoding/json decodes it: the
// raw bytes when they are plain (no escape, valid UTF-8), which is
// byte-identical to the decoded form, else encoding/json's own unquoting
// (escapes resolved; invalid UTF-8 and lone surrogates become U+FFFD).
func (s *oldShapeScanner) key() ([]byte, error) {
	start := s.i
	plain, err := s.str()
	if err != nil {
		return nil, err
	}
	raw := s.b[start+1 : s.i-1]
	if plain {
		return raw, nil
	}
	var k string
	if err := json.Unmarshal(s.b[start:s.i], &k); err != nil {
		return nil, s.malformed("in object key")
	}
	return []byte(k), nil
}

// str scans a string starting at its opening quote. plain reports that it
// holds no escape and only valid UTF-8.
func (s *oldShapeScanner) str() (plain bool, err error) {
	b := s.b
	start := s.i + 1
	i := start
	ascii, escaped := true, false
	for {
		// The common run: bytes that need no attention.
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i == len(b) {
			return false, s.malformedAt(i, "unexpected end of JSON input")
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			if escaped {
				return false, nil
			}
			return ascii || utf8.Valid(b[start:i]), nil
		case c == '\\':
			escaped = true
			if i+1 == len(b) {
				return false, s.malformedAt(i+1, "unexpected end of JSON input")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := 2; j < 6; j++ {
					if i+j == len(b) {
						return false, s.malformedAt(i+j, "unexpected end of JSON input")
					}
					if !isHex(b[i+j]) {
						return false, s.malformedAt(i+j, "in \\u hexadecimal character escape")
					}
				}
				i += 6
			default:
				return false, s.malformedAt(i+1, "in string escape code")
			}
		case c < 0x20:
			return false, s.malformedAt(i, "in string literal")
		default: // >= 0x80: any byte is accepted, as encoding/json does
			ascii = false
			i++
		}
	}
}

func (s *oldShapeScanner) scalar(c byte) error {
	switch {
	case c == '"':
		_, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return s.malformed("looking for beginning of value")
}

func (s *oldShapeScanner) literal(lit string) error {
	for j := 0; j < len(lit); j++ {
		if s.i+j == len(s.b) {
			return s.malformedAt(s.i+j, "unexpected end of JSON input")
		}
		if s.b[s.i+j] != lit[j] {
			return s.malformedAt(s.i+j, "in literal "+lit)
		}
	}
	s.i += len(lit)
	return nil
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; what
// follows it is for afterValue to judge.
func (s *oldShapeScanner) number() error {
	b, i := s.b, s.i
	digits := func() bool {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return s.malformedAt(i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return s.malformedAt(i, "after decimal point in numeric literal")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return s.malformedAt(i, "in exponent of numeric literal")
		}
	}
	s.i = i
	return nil
}

func (s *oldShapeScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *oldShapeScanner) malformed(what string) error { return s.malformedAt(s.i, what) }

// malformedAt words a grammar fault as encoding/json would, with its
// offset; the character is quoted, never more of the document.
func (s *oldShapeScanner) malformedAt(i int, what string) error {
	reason := what
	if i < len(s.b) {
		reason = fmt.Sprintf("invalid character %s %s (offset %d)", quoteByte(s.b[i]), what, i)
	}
	return Errorf(CodeMalformedJSON, "%w", s.shapeError(reason))
}

// shapeError captures the current path (the stack's keys and indices).
func (s *oldShapeScanner) shapeError(reason string) *ShapeError {
	e := &ShapeError{Reason: reason}
	for _, l := range s.stack {
		if l.object {
			if l.hasKey {
				e.Path = append(e.Path, PathStep{Key: string(l.key), Index: -1})
			}
			continue
		}
		e.Path = append(e.Path, PathStep{Index: l.index})
	}
	return e
}
