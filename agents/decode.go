package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"
)

// keyRE is the whole alphabet of profile keys. encoding/json matches keys
// case-insensitively (even U+212A KELVIN SIGN as "k"); refusing anything but
// exact lower case makes "unknown field" mean unknown.
var keyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// maxDepth bounds nesting: a profile is an object of arrays of objects.
const maxDepth = 4

// Decode strictly decodes and validates one profile document.
func Decode(data []byte) (*Profile, error) {
	if len(data) > maxProfileSize {
		return nil, &FieldError{Reason: fmt.Sprintf("larger than %d bytes", maxProfileSize), Err: ErrSyntax}
	}
	if !utf8.Valid(data) {
		return nil, &FieldError{Reason: "not valid UTF-8", Err: ErrSyntax}
	}
	if err := checkKeys(data); err != nil {
		return nil, err
	}
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, classify(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &FieldError{Reason: "trailing data after the JSON document", Err: ErrSyntax}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func classify(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &FieldError{Field: te.Field, Reason: fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value), Err: ErrInvalid}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &FieldError{Field: strings.Trim(f, `"`), Reason: "not part of the profile format", Err: ErrUnknownField}
	}
	return &FieldError{Reason: err.Error(), Err: ErrSyntax}
}

// checkKeys walks the token stream once: one top-level object, no
// duplicate keys, keys in the exact alphabet, bounded depth.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // object: next token is a key
	}
	var stack []*frame
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if first {
				return &FieldError{Reason: "empty document", Err: ErrSyntax}
			}
			return nil
		}
		if err != nil {
			return &FieldError{Reason: err.Error(), Err: ErrSyntax}
		}
		if first {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return &FieldError{Reason: "a profile is a JSON object", Err: ErrSyntax}
			}
		}
		if len(stack) == 0 && !first {
			return &FieldError{Reason: "trailing data after the JSON document", Err: ErrSyntax}
		}
		first = false
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].expect = true
				}
				continue
			}
			k := tok.(string)
			if !keyRE.MatchString(k) {
				return &FieldError{Field: k, Reason: "keys are exact lower-case field names", Err: ErrUnknownField}
			}
			if top.keys[k] {
				return &FieldError{Field: k, Reason: "given twice in one object", Err: ErrDuplicateKey}
			}
			top.keys[k] = true
			top.expect = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return &FieldError{Reason: fmt.Sprintf("nested deeper than %d", maxDepth), Err: ErrSyntax}
			}
			stack = append(stack, &frame{object: tok == json.Delim('{'), keys: map[string]bool{}, expect: true})
			continue
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
		}
		// A value (or a closed container) completes an object member.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expect = true
		}
	}
}
