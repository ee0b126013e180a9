package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
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

func (f Fields) allows(name string) bool {
	return slices.Contains(f.Required, name) || slices.Contains(f.Optional, name)
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
	if !utf8.Valid(b) {
		return Admission{}, E(CodeNotUTF8)
	}
	if err := CheckShape(b, s.Limits); err != nil {
		return Admission{}, err
	}
	// The document is now known to be one well-formed object without
	// duplicate keys, so its top-level map is exactly its fields. Keys match
	// byte for byte: a map, unlike a struct, has no case folding.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Admission{}, Errorf(CodeMalformedJSON, "%w", err)
	}
	v, ok := top["protocol"]
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
	k, ok := top[s.Discriminator]
	if !ok {
		return Admission{}, Errorf(CodeMissingField, "%s", s.Discriminator)
	}
	var kind string
	if len(k) == 0 || k[0] != '"' || json.Unmarshal(k, &kind) != nil {
		return Admission{}, Errorf(CodeInvalidField, "%s", s.Discriminator)
	}
	fields, ok := s.Kinds[kind]
	if !ok {
		return Admission{}, Errorf(CodeUnknownAction, "%s %q", s.Discriminator, kind)
	}
	// Sorted, so a document with several unknown fields always names the
	// same one.
	var unknown []string
	for key := range top {
		if key != "protocol" && key != s.Discriminator && !fields.allows(key) {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		return Admission{}, Errorf(CodeUnknownField, "%q", slices.Min(unknown))
	}
	for _, r := range fields.Required {
		if _, ok := top[r]; !ok {
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

// DecodeStrict unmarshals an admitted document into v, refusing fields the
// Go type does not declare at any depth. Field names match exactly:
// encoding/json alone would match "PIDS" (or "ſ" for "s") to a field
// tagged "pids", so {"pids":1,"PIDS":9} would slip past the duplicate-key
// rule and set one field twice.
func DecodeStrict(b []byte, v any) error {
	var doc any
	generic := json.NewDecoder(bytes.NewReader(b))
	generic.UseNumber()
	if err := generic.Decode(&doc); err != nil {
		return Errorf(CodeMalformedJSON, "%w", err)
	}
	if err := exactKeys(doc, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
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

// exactKeys walks a generic document beside the Go type it will decode into
// and refuses every object key that is not exactly a field name of that
// type. A value of the wrong kind is left for the typed decoder to refuse.
func exactKeys(doc any, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonFields(t)
		for k, v := range obj {
			ft, ok := fields[k]
			if !ok {
				return Errorf(CodeUnknownField, "%q", at+k)
			}
			if err := exactKeys(v, ft, at+k+"."); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		for k, v := range obj {
			if err := exactKeys(v, t.Elem(), at+k+"."); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := doc.([]any)
		if !ok {
			return nil
		}
		for _, v := range arr {
			if err := exactKeys(v, t.Elem(), at); err != nil {
				return err
			}
		}
	}
	return nil
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
