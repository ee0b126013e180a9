package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Limits bound the shape of one JSON document.
type Limits struct {
	MaxDepth int // nesting of objects and arrays; the top-level object is depth 1
	MaxNodes int // values of any kind, keys excluded
}

// Schema says which documents a peer admits: the protocol versions it
// speaks, the field naming the message kind, and for each kind the exact set
// of top-level fields allowed and required.
type Schema struct {
	Versions      []int
	Discriminator string // "action" for requests, "type" for responses
	Kinds         map[string]Fields
	Limits        Limits
}

// Fields is the exact field set of one message kind.
type Fields struct {
	Required []string
	Optional []string
}

func (f Fields) allowsKey(key []byte) bool {
	for _, names := range [][]string{f.Required, f.Optional} {
		for _, n := range names {
			if n == string(key) {
				return true
			}
		}
	}
	return false
}

// schemaOnce holds a schema built on first use. Its zero value is ready
// and refers to nothing, so a binary that never decodes a protocol (the
// launcher and the worker protocol) links none of that protocol's table.
type schemaOnce struct {
	once sync.Once
	s    *Schema
}

func (o *schemaOnce) get(build func() *Schema) *Schema {
	o.once.Do(func() { o.s = build() })
	return o.s
}

// Admission is what Admit learned about an admitted document.
type Admission struct {
	Version int
	Kind    string
}

// Admit checks b against the schema without decoding it into any type.
// Order matters: the cheap structural checks run before anything looks at
// field values, so a hostile document is refused before it can steer us.
func (s *Schema) Admit(b []byte) (Admission, error) {
	sc := newScanner(b, s.Limits)
	defer sc.release()
	sc.shape, sc.utf8, sc.collect = true, true, true
	if err := sc.scan(); err != nil {
		return Admission{}, err
	}
	return s.admit(b, sc.members)
}

// decode is Admit, then DecodeStrict into v, from one walk of b: the walk
// that admits b also checks its keys against v's type, and the exact-key
// fault it found (if any) is reported only after admission, where
// DecodeStrict would have found it.
func (s *Schema) decode(b []byte, v any) (Admission, error) {
	sc := newScanner(b, s.Limits)
	defer sc.release()
	sc.shape, sc.utf8, sc.collect, sc.check = true, true, true, keyCheckOf(reflect.TypeOf(v))
	if err := sc.scan(); err != nil {
		return Admission{}, err
	}
	a, err := s.admit(b, sc.members)
	if err != nil {
		return Admission{}, err
	}
	if sc.fault != nil {
		return Admission{}, sc.fault
	}
	return a, decodeTyped(b, v, sc.check)
}

// checkDecode is CheckShape, then DecodeStrict into v, from one walk of b.
func checkDecode(b []byte, lim Limits, v any) error {
	sc := newScanner(b, lim)
	defer sc.release()
	sc.shape, sc.check = true, keyCheckOf(reflect.TypeOf(v))
	if err := sc.run(); err != nil {
		return err
	}
	if sc.fault != nil {
		return sc.fault
	}
	return decodeTyped(b, v, sc.check)
}

// admit judges the top-level members of a document the walk found to be
// one well-formed object without duplicate keys, so its members are
// exactly its fields. Keys match byte for byte: unlike a struct's, they
// have no case folding.
func (s *Schema) admit(b []byte, top []member) (Admission, error) {
	raw := func(name string) (json.RawMessage, bool) {
		for _, m := range top {
			if string(m.key) == name {
				return b[m.start:m.end], true
			}
		}
		return nil, false
	}
	v, ok := raw("protocol")
	if !ok {
		return Admission{}, Errorf(CodeMissingField, "protocol")
	}
	version, ok := versionOf(v)
	if !ok {
		return Admission{}, Errorf(CodeInvalidField, "protocol")
	}
	// Any integer we do not speak, however large or negative, gets the one
	// answer a peer can act on: which version this side speaks.
	if !slices.Contains(s.Versions, version) {
		return Admission{}, Errorf(CodeUnsupportedVersion, "version %.20s", v)
	}
	k, ok := raw(s.Discriminator)
	if !ok {
		return Admission{}, Errorf(CodeMissingField, "%s", s.Discriminator)
	}
	if len(k) == 0 || k[0] != '"' {
		return Admission{}, Errorf(CodeInvalidField, "%s", s.Discriminator)
	}
	// Without an escape, the walk has proved the string's bytes are what
	// it decodes to.
	kind := string(k[1 : len(k)-1])
	if bytes.IndexByte(k, '\\') >= 0 && json.Unmarshal(k, &kind) != nil {
		return Admission{}, Errorf(CodeInvalidField, "%s", s.Discriminator)
	}
	fields, ok := s.Kinds[kind]
	if !ok {
		return Admission{}, Errorf(CodeUnknownAction, "%s %q", s.Discriminator, kind)
	}
	// The least, so a document with several unknown fields always names
	// the same one.
	var unknown []byte
	found := false
	for _, m := range top {
		if string(m.key) != "protocol" && string(m.key) != s.Discriminator && !fields.allowsKey(m.key) &&
			(!found || bytes.Compare(m.key, unknown) < 0) {
			unknown, found = m.key, true
		}
	}
	if found {
		return Admission{}, Errorf(CodeUnknownField, "%q", unknown)
	}
	for _, r := range fields.Required {
		if _, ok := raw(r); !ok {
			return Admission{}, Errorf(CodeMissingField, "%q", r)
		}
	}
	return Admission{Version: version, Kind: kind}, nil
}

// versionOf accepts only a JSON integer literal (no fraction, no exponent).
// It reports -1 for an integer no peer can speak (negative, or longer than
// nine digits), so the caller answers unsupported_version rather than
// invalid_field: the value is a version, just not one spoken here.
func versionOf(raw json.RawMessage) (int, bool) {
	v := string(raw)
	if !integerLiteral.MatchString(v) {
		return 0, false
	}
	if v[0] == '-' || len(v) > 9 {
		return -1, true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1, true
	}
	return n, true
}

// DecodeStrict unmarshals the first JSON value of b into v, refusing
// fields the Go type does not declare at any depth. Field names match
// exactly: encoding/json alone would match "PIDS" (or "ſ" for "s") to a
// field tagged "pids", so {"pids":1,"PIDS":9} would slip past the
// duplicate-key rule and set one field twice. Every occurrence of a key is
// checked, a repeated one too (CheckShape refuses repeats; DecodeStrict
// alone reads them as encoding/json does, the last one winning).
//
// It is one walk of b that checks the grammar and every key against v's
// type (the scanner CheckShape runs, without its shape rules), then one
// typed decode with unknown fields disallowed. The walk's refusals come
// first: malformed_json (including nesting deeper than encoding/json's
// 10000), then unknown_field; the typed decode's are invalid_field, or
// unknown_field for a field encoding/json does not take (as when two
// embedded structs at one depth declare it).
func DecodeStrict(b []byte, v any) error {
	sc := newScanner(b, Limits{MaxDepth: maxNesting, MaxNodes: math.MaxInt})
	defer sc.release()
	sc.check = keyCheckOf(reflect.TypeOf(v))
	if err := sc.run(); err != nil {
		return err
	}
	if sc.fault != nil {
		return sc.fault
	}
	return decodeTyped(b[:sc.i], v, sc.check)
}

// decodeTyped is the one typed decode of a document the walk checked
// against c, v's check. Unknown fields are refused: by the walk alone when
// c is closed (json.Unmarshal then takes every key the walk let through,
// at half a Decoder's cost), else by the Decoder's rule as well.
func decodeTyped(b []byte, v any, c *keyCheck) error {
	var err error
	if c != nil && c.closed {
		err = json.Unmarshal(b, v)
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return Errorf(CodeInvalidField, "%s: %w", ute.Field, err)
		}
		if bytes.Contains([]byte(err.Error()), []byte("unknown field")) {
			return Errorf(CodeUnknownField, "%w", err)
		}
		return Errorf(CodeInvalidField, "%w", err)
	}
	return nil
}

// keyCheck is what the walk needs of a Go type to hold object keys to its
// exact field names: one node per type, built once (keyCheckOf). A nil
// *keyCheck checks nothing below: a type implementing json.Unmarshaler,
// or any kind other than struct, map, slice and array (and pointers to
// them).
type keyCheck struct {
	object bool                 // a struct or map (decoded from an object), else a slice or array
	fields map[string]*keyCheck // a struct's wire names (jsonFields), each its field's check; nil for a map
	elem   *keyCheck            // a map's, slice's or array's element

	// plain: encoding/json takes exactly this struct's jsonFields as its
	// fields (plainStruct), and nothing directly below is an interface,
	// whose dynamic value the walk cannot see. closed: so is every check
	// reachable from this one.
	plain, closed bool
}

var (
	keyChecks   sync.Map // reflect.Type → *keyCheck
	keyChecksMu sync.Mutex
)

// keyCheckOf returns t's check, building it (and its fields', recursive
// types included) on first use.
func keyCheckOf(t reflect.Type) *keyCheck {
	if t == nil {
		return nil
	}
	if c, ok := keyChecks.Load(t); ok {
		return c.(*keyCheck)
	}
	keyChecksMu.Lock()
	defer keyChecksMu.Unlock()
	built := map[reflect.Type]*keyCheck{}
	c := buildKeyCheck(t, built)
	for _, c := range built {
		if c != nil {
			c.closed = allPlain(c, map[*keyCheck]bool{})
		}
	}
	// Published only when whole: a reader never sees a node being filled.
	for t, c := range built {
		keyChecks.Store(t, c)
	}
	return c
}

func allPlain(c *keyCheck, seen map[*keyCheck]bool) bool {
	if c == nil || seen[c] {
		return true
	}
	seen[c] = true
	if !c.plain || !allPlain(c.elem, seen) {
		return false
	}
	for _, f := range c.fields {
		if !allPlain(f, seen) {
			return false
		}
	}
	return true
}

// plainStruct reports whether encoding/json's fields of t are exactly
// jsonFields(t): no embedded field (where the two differ on conflicts and
// unexported types), no two fields of one name (which encoding/json
// drops), and every tag name of the letters, digits, '_' and '-' that
// encoding/json accepts as written (it ignores a tag name it finds
// invalid).
func plainStruct(t reflect.Type) bool {
	names := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return false
		}
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		for _, r := range name {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-') {
				return false
			}
		}
		if names[name] {
			return false
		}
		names[name] = true
	}
	return true
}

// holdsInterface reports whether values of t are interfaces (through
// pointers).
func holdsInterface(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Interface
}

func buildKeyCheck(t reflect.Type, built map[reflect.Type]*keyCheck) *keyCheck {
	if c, ok := keyChecks.Load(t); ok {
		return c.(*keyCheck)
	}
	if c, ok := built[t]; ok {
		return c
	}
	u := t
	for u.Kind() == reflect.Pointer {
		u = u.Elem()
	}
	if u.Implements(unmarshalerType) || reflect.PointerTo(u).Implements(unmarshalerType) {
		built[t] = nil
		return nil
	}
	var c *keyCheck
	switch u.Kind() {
	case reflect.Struct:
		c = &keyCheck{object: true, fields: map[string]*keyCheck{}, plain: plainStruct(u)}
		built[t] = c
		for name, ft := range jsonFields(u) {
			c.fields[name] = buildKeyCheck(ft, built)
			c.plain = c.plain && !holdsInterface(ft)
		}
	case reflect.Map:
		c = &keyCheck{object: true, plain: !holdsInterface(u.Elem())}
		built[t] = c
		c.elem = buildKeyCheck(u.Elem(), built)
	case reflect.Slice, reflect.Array:
		c = &keyCheck{plain: !holdsInterface(u.Elem())}
		built[t] = c
		c.elem = buildKeyCheck(u.Elem(), built)
	default:
		built[t] = nil
	}
	return c
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps each wire name of struct type t to its field's type, as
// encoding/json names them (tag name, else Go name; embedded structs
// flattened).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, shadowed := out[k]; !shadowed {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
