package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// CheckShape is the project's one strict-JSON shape check, one pass over
// b: one top-level object, no duplicate key at any depth (keys compared as
// encoding/json decodes them, so "a" and "\u0061" are one key), bounded
// depth and node count, nothing after the object. The grammar is
// encoding/json's; the scanner is hand-written because encoding/json's
// Decoder.Token runs at about 15 MB/s and the relay checks bodies of up to
// 16 MiB (FuzzCheckShape holds it to the Token walk's verdicts). The same
// pass also serves Admit and DecodeStrict (see scanner), so a frame is
// walked once before its one typed decode.
//
// A refusal's local cause is a *ShapeError naming where the fault is.
func CheckShape(b []byte, lim Limits) error {
	s := newScanner(b, lim)
	defer s.release()
	s.shape = true
	return s.run()
}

// ShapeError locates a CheckShape refusal: the path from the top-level
// object down to the fault, ending with the repeated key for duplicate_key.
// Keys are document content: it is a local cause, never put on the wire
// (AsWire keeps only the code).
type ShapeError struct {
	Path   []PathStep
	Reason string // the grammar fault, "" for duplicate_key
}

// PathStep is one level of a ShapeError's path: an object member's key, or
// (Index >= 0) an array element.
type PathStep struct {
	Key   string
	Index int
}

// String renders a path as "syscalls[0].args[1]".
func (e *ShapeError) String() string {
	var sb strings.Builder
	for _, s := range e.Path {
		if s.Index >= 0 {
			sb.WriteString("[" + strconv.Itoa(s.Index) + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(s.Key)
	}
	return sb.String()
}

func (e *ShapeError) Error() string {
	switch {
	case e.Reason == "":
		return strconv.Quote(e.String())
	case len(e.Path) == 0:
		return e.Reason
	}
	return "at " + e.String() + ": " + e.Reason
}

// smallObject is how many keys an object holds before its duplicate check
// moves from a linear scan (no allocation) to a map.
// smallObject is how many keys an object holds before its duplicate check
// moves from a linear scan (no allocation) to a map.
const smallObject = 16

// scanner is the one pass every strict-JSON check makes over a document.
// What it checks beyond the grammar depends on its fields:
//   - shape: CheckShape's rules (one top-level object, no duplicate key,
//     lim, nothing after the object); without it, DecodeStrict's reading of
//     the first JSON value of any kind, as encoding/json's Decoder reads
//     it (no duplicate check, nesting capped at encoding/json's 10000, what
//     follows the value unread);
//   - utf8: Admit's not_utf8, which outranks every other refusal;
//   - check: the Go type the document decodes into; the first object key
//     that is not byte-exactly a field name of the type at its place is
//     kept in fault, to be reported after everything the walk decides;
//   - collect: Admit's top-level keys and the raw bytes of their values,
//     in members.
type scanner struct {
	b     []byte
	i     int
	lim   Limits
	stack []shapeLevel
	nodes int

	shape   bool
	utf8    bool
	badUTF8 bool // a string was not valid UTF-8
	check   *keyCheck
	fault   error
	collect bool
	members []member

	// keys holds the keys of every open small object, innermost last, for
	// the duplicate check: one slice for the whole walk, not one per
	// object.
	keys [][]byte
}

// scanners keeps walks' buffers for the next walk, so a frame's walk
// allocates nothing.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// newScanner returns a scanner of b from the pool, its buffers emptied.
func newScanner(b []byte, lim Limits) *scanner {
	s := scanners.Get().(*scanner)
	*s = scanner{b: b, lim: lim, stack: s.stack[:0], keys: s.keys[:0], members: s.members[:0]}
	return s
}

// release returns s to the pool without its references into the document
// it walked; buffers grown past a frame's size are left to the collector.
func (s *scanner) release() {
	if cap(s.stack) > 64 || cap(s.keys) > 1024 || cap(s.members) > 1024 {
		return
	}
	clear(s.stack[:cap(s.stack)])
	clear(s.keys[:cap(s.keys)])
	clear(s.members[:cap(s.members)])
	*s = scanner{stack: s.stack[:0], keys: s.keys[:0], members: s.members[:0]}
	scanners.Put(s)
}

type shapeLevel struct {
	object bool
	index  int
	key    []byte // the member being read, as decoded
	hasKey bool
	keys   int // where the object's keys begin in scanner.keys, while it is small
	set    map[string]struct{}
	check  *keyCheck // the type the container decodes into; nil: no key check
}

// member is one top-level member: its key as decoded and its value's raw
// bytes b[start:end].
type member struct {
	key        []byte
	start, end int
}

// maxNesting is encoding/json's nesting limit: a deeper document is a
// syntax error to its Decoder, so DecodeStrict refuses it as malformed.
const maxNesting = 10000

// scan is run with Admit's not_utf8 rule: a document that is not UTF-8 is
// refused as such whatever else is wrong with it. Outside strings the
// grammar admits only ASCII, so when the walk succeeds, its strings were
// the only place left to look; when it fails, the whole document is.
func (s *scanner) scan() error {
	err := s.run()
	if s.utf8 && (s.badUTF8 || err != nil && !utf8.Valid(s.b)) {
		return E(CodeNotUTF8)
	}
	return err
}

func (s *scanner) run() error {
	s.ws()
	if s.i == len(s.b) {
		return s.malformed("unexpected end of JSON input")
	}
	c := s.b[s.i]
	if s.shape && c != '{' {
		return Errorf(CodeMalformedJSON, "top level is not an object")
	}
	check := s.check
	for {
		// c begins a value; check is the key check that applies to it.
		if c == '{' || c == '[' {
			s.i++
			// The top-level value is not counted against the limits.
			if len(s.stack) > 0 {
				if s.nodes++; s.nodes > s.lim.MaxNodes {
					return E(CodeTooManyNodes)
				}
				if len(s.stack)+1 > s.lim.MaxDepth {
					if !s.shape {
						return s.malformed("exceeded max depth")
					}
					return Errorf(CodeTooDeep, "%w", s.shapeError("nested deeper than the limit"))
				}
			} else {
				s.nodes = 1
			}
			s.push(c == '{', check)
			s.ws()
			if s.i == len(s.b) {
				return s.malformed("unexpected end of JSON input")
			}
			if d := s.b[s.i]; !(d == '}' && c == '{' || d == ']' && c == '[') {
				var err error
				if c, check, err = s.member(); err != nil {
					return err
				}
				continue
			}
			s.i++
			s.pop()
		} else {
			// The token is checked before it is counted, as the Token
			// walk does, so a malformed token is malformed_json even past
			// the node limit.
			if err := s.scalar(c); err != nil {
				return err
			}
			if s.nodes++; s.nodes > s.lim.MaxNodes {
				return E(CodeTooManyNodes)
			}
		}
		more, err := s.afterValue()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if c, check, err = s.member(); err != nil {
			return err
		}
	}
	if s.shape {
		s.ws()
		if s.i != len(s.b) {
			return E(CodeTrailingData)
		}
	}
	return nil
}

// member reads up to the first byte of the next value of the innermost
// container: for an object, its key and colon. It returns that byte and the
// key check that applies to the value.
func (s *scanner) member() (byte, *keyCheck, error) {
	top := &s.stack[len(s.stack)-1]
	s.ws()
	if s.i == len(s.b) {
		return 0, nil, s.malformed("unexpected end of JSON input")
	}
	c := s.b[s.i]
	if !top.object {
		if top.check == nil {
			return c, nil, nil
		}
		return c, top.check.elem, nil
	}
	if c != '"' {
		return 0, nil, s.malformed("looking for beginning of object key string")
	}
	key, err := s.key()
	if err != nil {
		return 0, nil, err
	}
	dup := s.shape && s.seen(top, key)
	top.key, top.hasKey = key, true
	if dup {
		return 0, nil, Errorf(CodeDuplicateKey, "%w", s.shapeError(""))
	}
	s.ws()
	if s.i == len(s.b) {
		return 0, nil, s.malformed("unexpected end of JSON input")
	}
	if s.b[s.i] != ':' {
		return 0, nil, s.malformed("after object key")
	}
	s.i++
	s.ws()
	if s.i == len(s.b) {
		return 0, nil, s.malformed("unexpected end of JSON input")
	}
	if s.collect && len(s.stack) == 1 {
		s.members = append(s.members, member{key: key, start: s.i})
	}
	return s.b[s.i], s.keyCheck(top, key), nil
}

// keyCheck returns the check of the value of key in object l, noting the
// first key that is not exactly a field name of l's struct.
func (s *scanner) keyCheck(l *shapeLevel, key []byte) *keyCheck {
	c := l.check
	switch {
	case c == nil:
		return nil
	case c.fields == nil: // a map: any key, each value the element type
		return c.elem
	}
	f, ok := c.fields[string(key)]
	if !ok && s.fault == nil {
		var path []string
		for _, l := range s.stack {
			if l.object {
				path = append(path, string(l.key))
			}
		}
		s.fault = Errorf(CodeUnknownField, "%q", strings.Join(path, "."))
	}
	return f
}

// afterValue consumes what may follow a value inside the enclosing
// container: a comma (more: the caller reads the next member), or the
// close, which ends that container too. Closes cascade until a comma or the
// end of the top-level value.
func (s *scanner) afterValue() (more bool, err error) {
	for len(s.stack) > 0 {
		if s.collect && len(s.stack) == 1 {
			s.members[len(s.members)-1].end = s.i
		}
		top := &s.stack[len(s.stack)-1]
		s.ws()
		if s.i == len(s.b) {
			return false, s.malformed("unexpected end of JSON input")
		}
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			if !top.object {
				top.index++
			}
			return true, nil
		case c == '}' && top.object, c == ']' && !top.object:
			s.i++
			s.pop()
		default:
			return false, s.malformed("after a value")
		}
	}
	return false, nil
}

// push opens a container; check applies to it only if it is of the kind
// the type decodes from (an object for a struct or map, an array for a
// slice or array): a value of the wrong kind is the typed decode's to
// refuse.
func (s *scanner) push(object bool, check *keyCheck) {
	if check != nil && check.object != object {
		check = nil
	}
	s.stack = append(s.stack, shapeLevel{object: object, keys: len(s.keys), check: check})
}

func (s *scanner) pop() {
	l := &s.stack[len(s.stack)-1]
	if l.set == nil {
		s.keys = s.keys[:l.keys]
	}
	s.stack = s.stack[:len(s.stack)-1]
}

// seen records key in object l and reports whether it was there.
func (s *scanner) seen(l *shapeLevel, key []byte) bool {
	if l.set == nil { // still small
		for _, k := range s.keys[l.keys:] {
			if bytes.Equal(k, key) {
				return true
			}
		}
		if len(s.keys)-l.keys < smallObject {
			s.keys = append(s.keys, key)
			return false
		}
		l.set = make(map[string]struct{}, 2*smallObject)
		for _, k := range s.keys[l.keys:] {
			l.set[string(k)] = struct{}{}
		}
		s.keys = s.keys[:l.keys]
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
func (s *scanner) key() ([]byte, error) {
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
func (s *scanner) str() (plain bool, err error) {
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
			valid := ascii || utf8.Valid(b[start:i])
			if !valid {
				s.badUTF8 = true
			}
			return valid && !escaped, nil
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

// plainByte marks string bytes that end nothing and need no check.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// scalar scans a string, number or literal value starting at c.
func (s *scanner) scalar(c byte) error {
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

func (s *scanner) literal(lit string) error {
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
func (s *scanner) number() error {
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

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) malformed(what string) error { return s.malformedAt(s.i, what) }

// malformedAt words a grammar fault as encoding/json would, with its
// offset; the character is quoted, never more of the document.
func (s *scanner) malformedAt(i int, what string) error {
	reason := what
	if i < len(s.b) {
		reason = fmt.Sprintf("invalid character %s %s (offset %d)", quoteByte(s.b[i]), what, i)
	}
	return Errorf(CodeMalformedJSON, "%w", s.shapeError(reason))
}

func quoteByte(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	if c >= 0x80 {
		q = fmt.Sprintf(`"\x%02x"`, c)
	}
	return "'" + q[1:len(q)-1] + "'"
}

// shapeError captures the current path (the stack's keys and indices).
func (s *scanner) shapeError(reason string) *ShapeError {
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
